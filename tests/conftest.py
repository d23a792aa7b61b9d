"""Shared fixtures: the suite runs in ONE process against the real installed SGLang 0.5.23.

- ``cpu_server_args`` (session): SGLang's runtime server-args context published for CPU,
  as SGLang's own test kit does (pools and the configurator read it).
- ``ext_active`` (session): the extension activated in this process through the same
  ``activate()`` the entry point calls; hooks decide per call from the environment, so
  tests switch features with ``monkeypatch.setenv``.
- ``env_writes``: every write or removal of an ``SGLANG_DSV4_*`` variable of ``os.environ`` during the test
  (code handed a configuration must write none).
- ``gpu`` marker: skipped here with a reason; ``tests/run_gpu_tests.sh`` runs them on the H200.
- ``integration`` marker: set here on every test under tests/integration; ``slow`` marks a unit test that
  takes seconds. ``make test-fast`` runs tests/unit without the slow ones.
"""

from __future__ import annotations

import os

import pytest

# Keep the test process's own configuration explicit: nothing from the caller's shell leaks in.
for _name in [n for n in os.environ if n.startswith("SGLANG_DSV4_")]:
    os.environ.pop(_name, None)


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


INTEGRATION_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "integration")
# The tests that build this checkout with setuptools in place (build/, *.egg-info): under pytest-xdist
# (`--dist loadgroup`) they share one worker, never building at once.
BUILDS_IN_TREE = ("test_startup_hook.py", "test_wheel_ships_series.py")


def pytest_collection_modifyitems(config, items):
    xdist = config.pluginmanager.hasplugin("xdist")
    for item in items:
        if str(item.path).startswith(INTEGRATION_DIR + os.sep):
            item.add_marker(pytest.mark.integration)
        if xdist:  # one group per file (a module's fixtures are built once), the in-tree builds in one group
            group = "builds-in-tree" if item.path.name in BUILDS_IN_TREE else str(item.path)
            item.add_marker(pytest.mark.xdist_group(group))
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: run tests/run_gpu_tests.sh on a CUDA GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cpu_server_args():
    from sglang_dsv4_ext.tools.sglang_cpu.dsv4_model import cpu_server_args

    with cpu_server_args() as server_args:
        yield server_args


@pytest.fixture(scope="session")
def ext_active(cpu_server_args):
    from sglang_dsv4_ext.runtime import activation

    return activation.activate()


@pytest.fixture
def index_k_dtype(monkeypatch):
    """Set the index-K dtype for one test: ``index_k_dtype("bf16")``."""

    def set_dtype(dtype: str) -> None:
        monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", dtype)

    return set_dtype


@pytest.fixture
def gate_mode(monkeypatch):
    """Set SGLANG_DSV4_INDEX_K_GATE for the pools built afterwards (read at pool creation); index-K fp8."""

    def set_mode(mode: str) -> None:
        monkeypatch.setenv("SGLANG_DSV4_INDEX_K_GATE", mode)

    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", "fp8")
    return set_mode


@pytest.fixture
def env_writes(monkeypatch):
    """Every write or removal of an SGLANG_DSV4_* variable of os.environ while the test runs."""
    writes: list[str] = []
    environ_type = type(os.environ)
    set_item, del_item = environ_type.__setitem__, environ_type.__delitem__

    def recording_set(self, name, value):
        if str(name).startswith("SGLANG_DSV4"):
            writes.append(f"{name}={value}")
        set_item(self, name, value)

    def recording_del(self, name):
        if str(name).startswith("SGLANG_DSV4"):
            writes.append(f"del {name}")
        del_item(self, name)

    monkeypatch.setattr(environ_type, "__setitem__", recording_set)
    monkeypatch.setattr(environ_type, "__delitem__", recording_del)
    return writes
