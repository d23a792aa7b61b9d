"""GPU-test fixtures: SGLang's own Python on this CUDA machine (bootstrapped from the carried bundle).

``sglang_gpu`` makes SGLang 0.5.23 importable (import stubs for its native packages, plain-torch
stand-ins for the native ops on the tested paths; see benchmarks/sglang_gpu/bootstrap.py) and
publishes a cuda server-args context. Where SGLang and sgl_kernel are installed, nothing is stubbed.
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def sglang_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: run tests/run_gpu_tests.sh on a CUDA GPU machine")
    from benchmarks.sglang_gpu import bootstrap

    try:
        report = bootstrap.prepare(device="cuda")
    except bootstrap.BundleError as exc:
        pytest.skip(str(exc))
    yield report
    bootstrap.restore()


@pytest.fixture
def result_dir(tmp_path):
    """Where a GPU test leaves its result files: ``$OUT/<test name>`` on the device tool, else tmp."""
    out = os.environ.get("OUT")
    return out if out else str(tmp_path)
