"""Activation through SGLang's real plugin machinery.

The fresh-process phases run in ``tests/support/activation_phases.py`` (one subprocess: entry-point
discovery, kill switch, invalid values, a drifted table, the default activation).
"""

from __future__ import annotations

import pytest

from sglang_dsv4_ext.config import ConfigError, load_config
from sglang_dsv4_ext.runtime import activation, compat
from tests.support.fresh_interpreter import ROOT, last_json_line, run_python_ok


@pytest.fixture(scope="module")
def phases():
    return last_json_line(run_python_ok(str(ROOT / "tests" / "support" / "activation_phases.py")))


def test_entry_point_is_discovered(phases):
    assert "sglang_dsv4_ext=sglang_dsv4_ext.runtime.activation:register" in phases["entry_points"]


def test_kill_switch_leaves_sglang_untouched(phases):
    kill = phases["kill_switch"]
    assert kill["error"] is None
    assert kill["identical"] is True
    assert not any(kill["registered"].values())


@pytest.mark.parametrize(
    "case,variable,allowed",
    [
        ("SGLANG_DSV4_INDEX_K_DTYPE=int8", "SGLANG_DSV4_INDEX_K_DTYPE", "'fp8', 'bf16', 'fp4'"),
        ("SGLANG_DSV4_INDEX_K_GATE=always", "SGLANG_DSV4_INDEX_K_GATE", "'auto', 'strict', 'off'"),
        ("SGLANG_DSV4_EXT=yes", "SGLANG_DSV4_EXT", "'0', '1'"),
        ("SGLANG_DSV4_BF16_INDEX_K=2", "SGLANG_DSV4_BF16_INDEX_K", "'0', '1'"),
        ("SGLANG_DSV4_EXT_ALLOW_UNTESTED_SGLANG=true", "SGLANG_DSV4_EXT_ALLOW_UNTESTED_SGLANG", "'0', '1'"),
    ],
)
def test_invalid_value_refuses_with_variable_and_allowed_values(phases, case, variable, allowed):
    outcome = phases["invalid"][case]
    assert outcome["error"] is not None, "activation must stop the process (SystemExit)"
    assert variable in outcome["error"] and allowed in outcome["error"]
    assert not any(outcome["registered"].values()) and outcome["wrapped"] == []


def test_before_any_plugin_loads_only_the_startup_hook_guards_the_model_constructor(phases):
    # The startup hook (sglang_dsv4_ext-bootstrap.pth) may guard exactly one target before SGLang loads
    # plugins: the DeepSeek-V4 model constructor (its guard loads the plugins first). Nothing else.
    assert set(phases["startup_guarded"]) <= {compat.DSV4_MODEL_INIT.path}


def test_alias_contradiction_refuses(phases):
    outcome = phases["invalid"]["contradiction"]
    assert "SGLANG_DSV4_BF16_INDEX_K=1" in outcome["error"] and "SGLANG_DSV4_INDEX_K_DTYPE='fp8'" in outcome["error"]
    assert outcome["wrapped"] == []


def test_drifted_signature_refuses_naming_the_target_and_patches_nothing(phases):
    drift = phases["drift"]
    assert drift["error"] is not None
    assert drift["victim"] in drift["error"] and "force_fp4=True" in drift["error"]
    assert drift["status"] == activation.DRIFTED
    assert drift["wrapped"] == []


def test_a_drifted_name_the_hooks_call_refuses_naming_it_and_patches_nothing(phases):
    drift = phases["called_drift"]
    assert drift["error"] is not None
    assert f"{drift['victim']}: signature drifted" in drift["error"] and "skip_compressor=True" in drift["error"]
    assert drift["wrapped"] == []


def test_default_activation_applies_and_verifies_every_target(phases):
    default = phases["default"]
    assert default["error"] is None and default["activated"] is True
    assert set(default["statuses"]) == {t.path for t in compat.installed_table()}
    scoped = {compat.HOOK_REGISTRY_PROPAGATE.path}  # patched only while hooks apply
    applied = {
        t
        for t, s in default["statuses"].items()
        if s in (activation.APPLIED, activation.SKIPPED_BY_CONFIG) and t not in scoped
    }
    assert applied == set(default["wrapped"])  # every installed hook is really on its target
    assert not scoped & set(default["wrapped"])  # and SGLang's propagation is restored afterwards
    assert phases["idempotent"] is True


def test_config_parsing_alias_and_defaults():
    assert load_config({}).index_k_dtype == "fp8" and load_config({}).gate == "auto"
    assert load_config({"SGLANG_DSV4_BF16_INDEX_K": "1"}).index_k_dtype == "bf16"
    assert load_config({"SGLANG_DSV4_BF16_INDEX_K": "1", "SGLANG_DSV4_INDEX_K_DTYPE": "bf16"}).bf16_index_k
    with pytest.raises(ConfigError, match="allowed values"):  # one rule for a value: an allowed spelling exactly
        load_config({"SGLANG_DSV4_INDEX_K_DTYPE": " BF16 "})
    with pytest.raises(ConfigError, match="SGLANG_DSV4_BF16_INDEX_K=0 contradicts"):
        load_config({"SGLANG_DSV4_BF16_INDEX_K": "0", "SGLANG_DSV4_INDEX_K_DTYPE": "bf16"})
    assert load_config({"SGLANG_DSV4_EXT": "0"}).enabled is False


def test_compat_table_matches_installed_sglang():
    assert compat.check_targets() == []
    assert len({t.path for t in compat.TARGETS}) == len(compat.TARGETS)


def test_in_process_activation_reports_every_row(ext_active):
    assert ext_active.activated
    assert set(ext_active.statuses) == {t.path for t in compat.installed_table()}
    assert activation.DRIFTED not in ext_active.statuses.values()
