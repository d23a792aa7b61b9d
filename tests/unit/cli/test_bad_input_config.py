"""The extension's environment variables: the README's bad-input table for configuration.

Rows go through :func:`load_config` (what every process reads: activation, pool creation,
``doctor``, ``serve``) and one row through ``sglang-dsv4 serve --dry-run``. An empty (or
blank) value means unset, for every variable; a bad value is one error naming the variable
and the allowed values. The rows mirror the README table "Bad input: configuration".
"""

from __future__ import annotations

import os

import pytest

from sglang_dsv4_ext.cli import main
from sglang_dsv4_ext.config import ConfigError, ExtConfig, load_config
from tests.support.serve_helpers import dry_run_children, environment_from_dry_run

ALIAS, DTYPE, GATE, EXT = (
    "SGLANG_DSV4_BF16_INDEX_K", "SGLANG_DSV4_INDEX_K_DTYPE", "SGLANG_DSV4_INDEX_K_GATE", "SGLANG_DSV4_EXT"
)

# (row, environment, (enabled, index-K dtype, gate) the process runs with)
ACCEPTED_ROWS = [
    ("empty alias next to bf16", {ALIAS: "", DTYPE: "bf16"}, (True, "bf16", "auto")),
    ("blank alias next to bf16", {ALIAS: "  ", DTYPE: "bf16"}, (True, "bf16", "auto")),
    ("empty alias next to fp8", {ALIAS: "", DTYPE: "fp8"}, (True, "fp8", "auto")),
    ("empty alias alone", {ALIAS: ""}, (True, "fp8", "auto")),
    ("empty dtype", {DTYPE: ""}, (True, "fp8", "auto")),
    ("empty gate", {GATE: ""}, (True, "fp8", "auto")),
    ("empty kill switch", {EXT: ""}, (True, "fp8", "auto")),
    ("alias 1 alone", {ALIAS: "1"}, (True, "bf16", "auto")),
]


@pytest.mark.parametrize("env, expected", [r[1:] for r in ACCEPTED_ROWS], ids=[r[0] for r in ACCEPTED_ROWS])
def test_empty_means_unset(env, expected):
    enabled, dtype, gate = expected
    assert load_config(env) == ExtConfig(enabled=enabled, index_k_dtype=dtype, gate=gate)


# (row, environment, the error the user sees)
REFUSED_ROWS = [
    ("alias not 0/1", {ALIAS: "yes"}, "SGLANG_DSV4_BF16_INDEX_K='yes' is not valid; allowed values: '0', '1'"),
    ("alias 1 next to fp8", {ALIAS: "1", DTYPE: "fp8"},
     "SGLANG_DSV4_BF16_INDEX_K=1 (alias for bf16) contradicts SGLANG_DSV4_INDEX_K_DTYPE='fp8'"),
    ("alias 0 next to bf16", {ALIAS: "0", DTYPE: "bf16"},
     "SGLANG_DSV4_BF16_INDEX_K=0 contradicts SGLANG_DSV4_INDEX_K_DTYPE='bf16'"),
    ("unknown dtype", {DTYPE: "int8"}, "SGLANG_DSV4_INDEX_K_DTYPE='int8' is not valid; allowed values: 'fp8', 'bf16'"),
    ("unknown gate", {GATE: "maybe"}, "SGLANG_DSV4_INDEX_K_GATE='maybe' is not valid; allowed values: 'auto'"),
    ("kill switch not 0/1", {EXT: "off"}, "SGLANG_DSV4_EXT='off' is not valid; allowed values: '0', '1'"),
]


@pytest.mark.parametrize("env, needle", [r[1:] for r in REFUSED_ROWS], ids=[r[0] for r in REFUSED_ROWS])
def test_bad_value_names_the_variable(env, needle):
    with pytest.raises(ConfigError) as excinfo:
        load_config(env)
    assert needle in str(excinfo.value)


def test_serve_without_a_preset_reads_an_empty_alias_as_unset(capsys, monkeypatch):
    """The shell's variables are serve's defaults without a preset: empty alias + bf16 is bf16."""
    monkeypatch.setenv(ALIAS, "")
    monkeypatch.setenv(DTYPE, "bf16")
    rc = main(["serve", "--dry-run", "--mode", "single", "--model-path", "m"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    (unset, env, _), = dry_run_children(out)
    assert load_config(environment_from_dry_run(unset, env, dict(os.environ))).index_k_dtype == "bf16"
