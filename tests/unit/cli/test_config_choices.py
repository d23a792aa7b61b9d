"""The settings' choices as ``str`` enums, and a configuration handed to in-process code (``config.configured``).

A choice row takes its allowed values from its enum, a bad value is refused naming the variable and those values,
and a member reads as its text wherever it is written out. ``configured`` reaches the decisions made at pool
creation and by the configurator (the real SGLang classes, on CPU) without writing the process environment.
"""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from sglang_dsv4_ext import config
from sglang_dsv4_ext.config import (
    ConfigError,
    ExtConfig,
    Fp4Budget,
    Fp4LogitsKernel,
    Fp8LogitsKernel,
    GateMode,
    IndexKDtype,
    IntegrityMode,
    configured,
    environment_override,
    load_config,
)

# What each choice setting is: its field and its enum (the spec of this change, not read from the table).
CHOICES = {
    "index_k_dtype": IndexKDtype,
    "gate": GateMode,
    "fp4_budget": Fp4Budget,
    "integrity": IntegrityMode,
    "fp8_logits": Fp8LogitsKernel,
    "fp4_logits": Fp4LogitsKernel,
}
ENUM_TEXTS = {
    IndexKDtype: ("fp8", "bf16", "fp4"),
    GateMode: ("auto", "strict", "off"),
    Fp4Budget: ("exact", "stock"),
    IntegrityMode: ("off", "sample", "full"),
    Fp8LogitsKernel: ("triton", "sglang"),
    Fp4LogitsKernel: ("triton", "sglang"),
}
ROWS = {s.attribute: s for s in config.SETTINGS if s.field}


def test_every_row_with_choices_is_one_of_the_enums():
    with_choices = {s.attribute for s in config.SETTINGS if s.field and s.choices and s.kind.type is not bool}
    assert with_choices == set(CHOICES)


@pytest.mark.parametrize("field", CHOICES)
def test_a_rows_allowed_values_are_its_enums_values_and_its_default_a_member(field):
    row, choice = ROWS[field], CHOICES[field]
    assert row.kind.type is choice
    assert row.choices == ENUM_TEXTS[choice] == choice.values()
    assert row.default in list(choice) and type(row.default) is choice
    assert ExtConfig.__dataclass_fields__[field].type == choice.__name__  # the field is typed by its enum


@pytest.mark.parametrize("field", CHOICES)
@pytest.mark.parametrize("text", ["never", "OFF", " fp8 "])
def test_a_bad_value_is_refused_naming_the_variable_and_the_enums_values(field, text):
    row = ROWS[field]
    with pytest.raises(ConfigError) as err:
        load_config({row.env: text})
    allowed = ", ".join(f"'{t}'" for t in ENUM_TEXTS[CHOICES[field]])
    assert str(err.value) == f"{row.env}={text!r} is not valid; allowed values: {allowed}"


@pytest.mark.parametrize("field", CHOICES)
def test_each_text_parses_to_its_member(field):
    row, choice = ROWS[field], CHOICES[field]
    for text in ENUM_TEXTS[choice]:
        value = getattr(load_config({row.env: text}), field)
        assert value is choice(text) and value == text


def test_a_member_reads_as_its_text_wherever_it_is_written():
    member = IndexKDtype.BF16
    assert str(member) == "bf16" and f"{member}" == "bf16" and f"{member:>6}" == "  bf16"
    assert "%s" % member == "bf16"  # noqa: UP031 (the logging module's formatting)
    assert repr(member) == "'bf16'" and repr((member,)) == "('bf16',)"
    assert json.dumps({member: member}) == '{"bf16": "bf16"}'
    assert {"bf16": 1}[member] == 1 and {member: 1}["bf16"] == 1  # same hash as the text
    assert member == "bf16" and member != "fp8" and "bf16" in IndexKDtype.values()


def test_a_configuration_given_texts_holds_members():
    cfg = ExtConfig(index_k_dtype="bf16", gate="strict", fp4_budget="stock", integrity="full", fp8_logits="sglang")
    assert cfg.index_k_dtype is IndexKDtype.BF16 and cfg.gate is GateMode.STRICT
    assert cfg.fp4_budget is Fp4Budget.STOCK and cfg.integrity is IntegrityMode.FULL
    assert cfg.fp8_logits is Fp8LogitsKernel.SGLANG
    assert dataclasses.replace(cfg, gate="off").gate is GateMode.OFF
    assert cfg.to_env()[config.ENV_GATE] == "strict" and type(cfg.to_env()[config.ENV_GATE]) is str
    with pytest.raises(ValueError):
        ExtConfig(gate="sometimes")


def test_the_alias_gives_the_bf16_member():
    assert load_config({config.ENV_BF16_ALIAS: "1"}).index_k_dtype is IndexKDtype.BF16
    assert load_config({config.ENV_BF16_ALIAS: "0"}).index_k_dtype is IndexKDtype.FP8
    assert load_config({}).index_k_dtype is IndexKDtype.FP8


# ----- configured: a configuration handed over, the environment untouched -----
def test_configured_is_the_configuration_in_force_for_its_body_only(monkeypatch, env_writes):
    monkeypatch.setenv(config.ENV_GATE, "strict")
    env_writes.clear()
    before = dict(os.environ)
    handed = ExtConfig(gate=GateMode.OFF, index_k_dtype=IndexKDtype.BF16)
    with configured(handed) as given:
        assert given is handed and load_config() is handed
        inner = dataclasses.replace(handed, gate=GateMode.AUTO)
        with configured(inner):
            assert load_config() is inner
        assert load_config() is handed
        # An environment given explicitly is read, whatever was handed over (serve reads its children's).
        assert load_config({config.ENV_GATE: "auto"}).gate is GateMode.AUTO
        assert os.environ.get(config.ENV_GATE) == "strict"
    assert load_config().gate is GateMode.STRICT
    assert dict(os.environ) == before and env_writes == []


def test_configured_ends_with_its_body_when_the_body_raises(monkeypatch):
    monkeypatch.delenv(config.ENV_GATE, raising=False)
    with pytest.raises(RuntimeError), configured(ExtConfig(gate=GateMode.OFF)):
        raise RuntimeError("body failed")
    assert load_config().gate is GateMode.AUTO


def test_environment_override_sets_and_removes_then_restores(monkeypatch):
    monkeypatch.setenv("SGLANG_DSV4_TEST_KEPT", "before")
    monkeypatch.delenv("SGLANG_DSV4_TEST_ADDED", raising=False)
    with environment_override({"SGLANG_DSV4_TEST_KEPT": None, "SGLANG_DSV4_TEST_ADDED": "1"}):
        assert "SGLANG_DSV4_TEST_KEPT" not in os.environ and os.environ["SGLANG_DSV4_TEST_ADDED"] == "1"
    assert os.environ["SGLANG_DSV4_TEST_KEPT"] == "before" and "SGLANG_DSV4_TEST_ADDED" not in os.environ
    with pytest.raises(RuntimeError), environment_override({"SGLANG_DSV4_TEST_KEPT": "during"}):
        raise RuntimeError("body failed")
    assert os.environ["SGLANG_DSV4_TEST_KEPT"] == "before"
