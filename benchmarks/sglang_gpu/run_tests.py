"""Run the GPU tests (``pytest -m gpu tests/gpu``) with SGLang's own code on this CUDA machine.

Bootstraps SGLang from the carried bundle first (:mod:`benchmarks.sglang_gpu.bootstrap`; skipped where
SGLang and its native packages are installed), prints what was stubbed, stood in and bridged, then runs
pytest in this same process. Extra arguments go to pytest. Results land under ``$OUT`` when set.
"""

from __future__ import annotations

import sys


def main(argv=None) -> int:
    import torch

    if not torch.cuda.is_available():
        print(
            "run_tests: no CUDA device (torch.cuda.is_available() is False): the GPU tests need one; "
            "on the CPU box the same tests are collected and skipped by the normal suite",
            file=sys.stderr,
        )
        return 2
    from benchmarks.sglang_gpu import bootstrap

    try:
        report = bootstrap.prepare()
    except bootstrap.BundleError as exc:
        print(f"run_tests: {exc}", file=sys.stderr)
        return 2
    print("\n".join(report.lines()), flush=True)
    import pytest

    args = list(sys.argv[1:] if argv is None else argv)
    return int(pytest.main(["-m", "gpu", "-q", "-rs", "-p", "no:cacheprovider", "tests/gpu", *args]))


if __name__ == "__main__":
    sys.exit(main())
