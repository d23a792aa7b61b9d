"""pytest plugin loaded only by mutmut runs (pyproject's [tool.mutmut] ``pytest_add_cli_args``).

mutmut runs the tests once in its own process, then forks that process for each mutant. A
process-wide cache filled by that first run would answer the mutant's tests with the unmutated
code's results, so every mutant behind it would survive untested. The caches over the modules
mutmut runs on are emptied before each test: :func:`sglang_dsv4_ext.config.load_config`'s parse
cache (``_config_of``) and the read gate's call sites already logged (it logs once per site).

mutmut puts a trampoline, a frame in its own file, around every function it mutates: the read gate
looks through those frames (``_PASS_THROUGH_FILES``) when it names the caller of a refused read or
tells a writer of the raw buffer list from a reader, as it sees a server's call chain.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _config_parsed_afresh():
    from sglang_dsv4_ext import config

    config._config_of.cache_clear()
    yield


@pytest.fixture(autouse=True)
def _gate_sees_through_mutmut_trampolines():
    import mutmut.mutation.trampoline as trampoline

    from sglang_dsv4_ext.runtime.hooks.gate import subpool

    subpool._logged_sites.clear()
    subpool._PASS_THROUGH_FILES = (trampoline.__file__,)
    yield
