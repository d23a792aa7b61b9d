"""pytest plugin loaded only by mutmut runs (pyproject's [tool.mutmut] ``pytest_add_cli_args``).

mutmut runs the tests once in its own process, then forks that process for each mutant. A
process-wide cache filled by that first run would answer the mutant's tests with the unmutated
code's results, so every mutant behind it would survive untested. The one such cache over the
modules mutmut runs on is :func:`sglang_dsv4_ext.config.load_config`'s parse cache
(``_config_of``): it is emptied before each test.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _config_parsed_afresh():
    from sglang_dsv4_ext import config

    config._config_of.cache_clear()
    yield
