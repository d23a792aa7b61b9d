"""config.py behaviour that mutmut's mutants showed untested (docs/mutation-testing.md).

Each test pins what a surviving mutant changed: how the value kinds read their text (a choice is
taken exactly as listed, a whole number must be >= 1, a layer rule is normalised; no surrounding
space or other case is forgiven, docs/adding-a-setting.md), the alias
agreeing with ``bf16``, the errors naming the variable and the allowed values, and the
kill-switch and ``SGLANG_PLUGINS`` readers honouring the environment they are given, and the environment override
removing a variable that is not set.
"""

from __future__ import annotations

import os

import pytest

from sglang_dsv4_ext import config
from sglang_dsv4_ext.config import ConfigError, load_config

REQUESTS, ROWS = config.ENV_CAPTURE_REQUESTS, config.ENV_CAPTURE_ROWS
LAYERS, CAPTURE = config.ENV_CAPTURE_LAYERS, config.ENV_CAPTURE
DTYPE, ALIAS = config.ENV_INDEX_K_DTYPE, config.ENV_BF16_ALIAS


# ----- a choice (built once at import for each row, so its own behaviour is tested on a fresh one) -----
class _Checks(config.Choice):
    SAMPLE = "sample"
    FULL = "full"


def test_a_choice_reads_its_text_exactly_as_listed_and_declares_its_choices():
    kind = config._choice(_Checks)
    assert kind.parse("VAR", "full") is _Checks.FULL
    assert kind.parse("VAR", "sample") is _Checks.SAMPLE
    assert kind.type is _Checks
    assert kind.choices == ("sample", "full")


@pytest.mark.parametrize("text", [" full ", "Full", "FULL"])
def test_a_choice_refuses_its_values_spelled_otherwise(text):
    kind = config._choice(_Checks)
    with pytest.raises(ConfigError) as err:
        kind.parse("VAR", text)
    assert str(err.value) == f"VAR={text!r} is not valid; allowed values: 'sample', 'full'"


def test_a_choice_refuses_other_text_naming_the_variable_and_the_allowed_values():
    kind = config._choice(_Checks)
    with pytest.raises(ConfigError) as err:
        kind.parse("VAR", "often")
    assert str(err.value) == "VAR='often' is not valid; allowed values: 'sample', 'full'"


# ----- whole numbers -----
@pytest.mark.parametrize("text, value", [("1", 1), ("3", 3), ("16", 16)])
def test_a_whole_number_of_one_or_more_is_read(text, value):
    assert load_config({REQUESTS: text}).capture.requests == value
    assert load_config({ROWS: text}).capture.rows == value


@pytest.mark.parametrize("text", ["0", "-1", "1.5", "²", " 3 "])
def test_a_whole_number_below_one_or_not_whole_or_spaced_is_refused(text):
    with pytest.raises(ConfigError, match=rf"^{REQUESTS}='{text}' is not valid; allowed values: a whole number >= 1$"):
        load_config({REQUESTS: text})


# ----- the capture layer rule -----
@pytest.mark.parametrize(
    "text, rule",
    [
        ("all", "all"),
        ("every:1", "every:1"),
        ("every:02", "every:2"),
        ("2,4,10", "2,4,10"),
        ("07", "7"),
    ],
)
def test_the_layer_rule_is_normalised(text, rule):
    assert load_config({LAYERS: text}).capture.layers == rule


def test_a_layer_listed_twice_is_refused():
    with pytest.raises(ConfigError, match="lists layer 2 more than once"):
        load_config({LAYERS: "2,4,2"})


@pytest.mark.parametrize("text", ["every:0", "every:", "some", "2;4", " all ", "ALL", "Every:2", "every: 3", "2, 4,10"])
def test_another_layer_rule_is_refused_naming_the_allowed_forms(text):
    allowed = ", ".join(config.CAPTURE_LAYER_FORMS)
    with pytest.raises(ConfigError) as err:
        load_config({LAYERS: text})
    assert str(err.value) == f"{LAYERS}={text!r} is not valid; allowed values: {allowed}"


# ----- the bf16 alias and capture's dtype -----
def test_the_alias_agrees_with_bf16():
    assert load_config({ALIAS: "1", DTYPE: "bf16"}).index_k_dtype == "bf16"


def test_capture_with_another_dtype_names_both_variables_and_the_allowed_dtype():
    with pytest.raises(ConfigError) as err:
        load_config({CAPTURE: "/tmp/cap", DTYPE: "fp8"})
    message = str(err.value)
    assert message.startswith(f"{CAPTURE}='/tmp/cap' needs {DTYPE}=bf16 (got 'fp8')")
    assert message.endswith(f"allowed values of {DTYPE} with capture: 'bf16'")


# ----- the readers of the kill switch and SGLANG_PLUGINS: the environment given, else the process's -----
def test_the_kill_switch_is_read_from_the_environment_given(monkeypatch):
    monkeypatch.delenv(config.ENV_KILL_SWITCH, raising=False)
    assert config.kill_switch_set({config.ENV_KILL_SWITCH: "0"}) is True
    assert config.kill_switch_set({config.ENV_KILL_SWITCH: " 0 "}) is False  # exactly "0" (config.py)
    assert config.kill_switch_set({config.ENV_KILL_SWITCH: "1"}) is False
    assert config.kill_switch_set({}) is False


def test_the_kill_switch_is_read_from_the_process_environment_by_default(monkeypatch):
    monkeypatch.setenv(config.ENV_KILL_SWITCH, "0")
    assert config.kill_switch_set() is True


def test_sglang_plugins_is_split_on_commas_as_sglang_does(monkeypatch):
    monkeypatch.setenv(config.ENV_SGLANG_PLUGINS, " other , sglang_dsv4_ext ,,")
    assert config.sglang_plugins() == ("other", "sglang_dsv4_ext")
    assert config.sglang_plugins({config.ENV_SGLANG_PLUGINS: "a,b c"}) == ("a", "b c")


def test_sglang_plugins_of_an_unset_variable_is_empty():
    assert config.sglang_plugins({}) == ()
    assert config.sglang_plugins({config.ENV_SGLANG_PLUGINS: ""}) == ()


def test_the_plugin_allowlist_is_split_on_commas_only(monkeypatch):
    allowed = config.sglang_plugin_allowlist({config.ENV_SGLANG_PLUGINS: "other,sglang_dsv4_ext, b c"})
    assert allowed == frozenset({"other", "sglang_dsv4_ext", "b c"})
    monkeypatch.setenv(config.ENV_SGLANG_PLUGINS, "other,sglang_dsv4_ext")
    assert config.sglang_plugin_allowlist() == frozenset({"other", "sglang_dsv4_ext"})  # the process's by default
    assert config.plugin_allowed() is True


# ----- the environment override -----
def test_the_environment_override_may_remove_a_variable_that_is_not_set(monkeypatch):
    monkeypatch.delenv("SGLANG_DSV4_TEST_ABSENT", raising=False)
    with config.environment_override({"SGLANG_DSV4_TEST_ABSENT": None}):
        assert "SGLANG_DSV4_TEST_ABSENT" not in os.environ
    assert "SGLANG_DSV4_TEST_ABSENT" not in os.environ
