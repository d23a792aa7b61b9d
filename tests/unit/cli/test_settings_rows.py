"""One settings table (``config.SETTINGS``): what serve, a preset, docs/settings.md and the children show
follows the rows, and the environment is parsed once per set of values.

Nothing is stubbed: serve runs through its real command line (``--dry-run``, SGLang 0.5.23's real
argument parser checking every command), presets through the real loader.
"""

from __future__ import annotations

import os
import re

import pytest

from sglang_dsv4_ext import config
from sglang_dsv4_ext.config import load_config
from sglang_dsv4_ext.tools.cli import main
from sglang_dsv4_ext.tools.serving.launch_plan import build_plan, check_spec
from sglang_dsv4_ext.tools.serving.preset import PresetError, default_spec, load_preset
from tests.support.serve_helpers import commands_from_dry_run, sglang_args

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BF16 = "dsv4-flash-8gpu-pd-4p4d-bf16-hicache"


def _dry_run(capsys, *argv):
    rc = main(["serve", "--dry-run", *argv])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out, commands_from_dry_run(out)


def _serve_help(capsys) -> str:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines; compare words


def test_the_settings_page_configuration_table_is_the_settings_table():
    with open(os.path.join(REPO, "docs", "settings.md"), encoding="utf-8") as f:
        page = f.read()
    table = "\n".join(line for line in page.splitlines() if line.startswith("|"))
    assert table == config.markdown_table(), (
        "regenerate: python -c 'from sglang_dsv4_ext import config; print(config.markdown_table())'"
    )


def test_the_epilog_names_every_variable_the_stack_sets_in_its_children(capsys):
    """Found by review: the epilog listed three of the variables every child gets (integrity missing)."""
    out, _ = _dry_run(capsys, "--preset", BF16)
    line = next(x for x in out.splitlines() if x.startswith("# extension environment in every child: "))
    names = [word.split("=", 1)[0] for word in line.split(": ", 1)[1].split()]
    assert "SGLANG_DSV4_INDEX_K_INTEGRITY" in names
    text = _serve_help(capsys)
    assert all(name in text for name in names), (names, text)


def test_fp4_budget_is_set_by_serve_and_by_a_preset(capsys, tmp_path):
    """Found by review: serve's activation check compared fp4_budget, but neither a flag nor a preset key set it."""
    _, cmds = _dry_run(capsys, "--preset", BF16, "--fp4-budget", "stock")
    assert cmds and all(load_config(env).fp4_budget == "stock" for env, _ in cmds)
    preset = tmp_path / "p.toml"
    preset.write_text('mode = "single"\nmodel_path = "m"\n[extension]\nindex_k_dtype = "fp4"\nfp4_budget = "stock"\n')
    assert load_preset(str(preset)).ext.fp4_budget == "stock"
    _, cmds = _dry_run(capsys, "--preset", str(preset))
    ((env, argv),) = cmds
    assert load_config(env).fp4_budget == "stock" and "--enable-deepseek-v4-fp4-indexer" in argv


def test_a_shell_fp4_budget_is_the_stacks_without_a_preset_and_said_when_a_preset_replaces_it(capsys, monkeypatch):
    """Every child gets the stack's budget, which serve's activation check then expects: the shell's never
    reaches a child behind the check's back."""
    monkeypatch.setenv("SGLANG_DSV4_FP4_BUDGET", "stock")
    _, cmds = _dry_run(capsys, "--mode", "single", "--model-path", "m")
    assert [load_config(env).fp4_budget for env, _ in cmds] == ["stock"]
    out, cmds = _dry_run(capsys, "--preset", BF16)
    assert "shell has SGLANG_DSV4_FP4_BUDGET=stock; children get exact (--fp4-budget or [extension] fp4_budget" in out
    assert all(env["SGLANG_DSV4_FP4_BUDGET"] == "exact" for env, _ in cmds)


def test_a_preset_env_table_may_not_set_a_variable_the_stack_sets(tmp_path):
    preset = tmp_path / "p.toml"
    preset.write_text('mode = "single"\n[common]\nenv = { SGLANG_DSV4_FP4_BUDGET = "stock" }\n')
    with pytest.raises(PresetError, match=r"common.env: SGLANG_DSV4_FP4_BUDGET is set by the \[extension\] table"):
        load_preset(str(preset))


def test_the_dry_run_shows_the_plugin_allowlist_each_server_gets(capsys, monkeypatch):
    """Found by review: only the start added our name to SGLANG_PLUGINS, so the dry run (and commands.sh,
    the same text) showed children an allowlist that would have skipped the extension."""
    monkeypatch.setenv("SGLANG_PLUGINS", "other_plugin")
    out, cmds = _dry_run(capsys, "--preset", BF16)
    servers = [env for env, argv in cmds if argv[2] == "sglang.launch_server"]
    routers = [env for env, argv in cmds if argv[2] != "sglang.launch_server"]
    assert len(servers) == 2 and len(routers) == 1
    assert all(env.get("SGLANG_PLUGINS") == "other_plugin,sglang_dsv4_ext" for env in servers)
    assert "SGLANG_PLUGINS" not in routers[0]  # the router loads no SGLang plugins
    assert "SGLANG_PLUGINS='other_plugin' does not name sglang_dsv4_ext: every server gets" in out


@pytest.mark.parametrize("value", ["", "sglang_dsv4_ext", " other , sglang_dsv4_ext "])
def test_an_allowlist_that_already_admits_us_is_left_alone(capsys, monkeypatch, value):
    monkeypatch.setenv("SGLANG_PLUGINS", value)
    out, cmds = _dry_run(capsys, "--preset", BF16)
    assert all("SGLANG_PLUGINS" not in env for env, _ in cmds) and "does not name" not in out


# SGLANG_PLUGINS values and whether SGLang's loader then runs our entry point: unset or empty loads every plugin;
# any other string, blank or commas alone included, is an allow-set of exact names.
PLUGIN_VALUES = [
    (None, True),
    ("", True),
    (" ", False),
    (",", False),
    (",,", False),
    (" , ", False),
    ("sglang_dsv4_ext_dev", False),
    ("other", False),
    ("other, sglang_dsv4_ext ", True),
]


@pytest.mark.parametrize("value, loads_us", PLUGIN_VALUES)
def test_plugin_allowed_is_what_sglangs_plugin_loader_does(monkeypatch, value, loads_us):
    """Found in review: a blank or comma-only SGLANG_PLUGINS made doctor say "allowed" while SGLang loaded no
    plugin; a substring match would take sglang_dsv4_ext_dev for us. Checked against SGLang's real
    load_plugins_by_group over the installed entry points (it imports our entry point, never calls it)."""
    from sglang.srt.plugins import GENERAL_PLUGINS_GROUP, load_plugins_by_group

    from sglang_dsv4_ext.runtime import activation

    if value is None:
        monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    else:
        monkeypatch.setenv("SGLANG_PLUGINS", value)
    loaded = config.PLUGIN_NAME in load_plugins_by_group(GENERAL_PLUGINS_GROUP)
    assert loaded == loads_us  # SGLang's loader itself, so this table cannot drift from it unseen
    assert config.plugin_allowed(os.environ) == loaded
    assert (activation.plugin_allowlist_block(os.environ) is None) == loaded  # doctor's SGLANG_PLUGINS line


@pytest.mark.parametrize("value", [" ", ",", ",,"])
def test_a_blank_or_comma_only_allowlist_gets_our_name_in_the_launch_plan(capsys, monkeypatch, value):
    monkeypatch.setenv("SGLANG_PLUGINS", value)
    out, cmds = _dry_run(capsys, "--preset", BF16)
    servers = [env for env, argv in cmds if argv[2] == "sglang.launch_server"]
    assert servers and all(env.get("SGLANG_PLUGINS") == "sglang_dsv4_ext" for env in servers)
    assert f"SGLANG_PLUGINS={value!r} does not name sglang_dsv4_ext: every server gets" in out


def test_a_blank_allowlist_in_a_preset_env_gets_our_name_for_that_server(tmp_path, monkeypatch):
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    preset = tmp_path / "p.toml"
    preset.write_text('model_path = "m"\n[[prefill]]\nenv = { SGLANG_PLUGINS = " , " }\n[[decode]]\n')
    plan = build_plan(load_preset(str(preset)), 0, sglang_args(), validate_router=False)
    by_name = {c.name: c.environment({}) for c in plan.children}
    assert by_name["prefill-0"]["SGLANG_PLUGINS"] == "sglang_dsv4_ext"
    assert "SGLANG_PLUGINS" not in by_name["decode-0"]


def test_a_preset_env_allowlist_is_completed_for_that_server_alone(tmp_path, monkeypatch):
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    preset = tmp_path / "p.toml"
    preset.write_text('model_path = "m"\n[[prefill]]\nenv = { SGLANG_PLUGINS = "mine" }\n[[decode]]\n')
    plan = build_plan(load_preset(str(preset)), 0, sglang_args(), validate_router=False)
    by_name = {c.name: c.environment({}) for c in plan.children}
    assert by_name["prefill-0"]["SGLANG_PLUGINS"] == "mine,sglang_dsv4_ext"
    assert "SGLANG_PLUGINS" not in by_name["decode-0"]
    assert any(n.endswith("prefill-0 gets SGLANG_PLUGINS='mine,sglang_dsv4_ext'") for n in plan.notes), plan.notes


@pytest.mark.parametrize("change, named", [
    (lambda s: setattr(s.router, "port", 70000), "router.port = 70000: allowed range 1-65535"),
    (lambda s: setattr(s.prefill[0], "base_gpu_id", -1), "prefill[0].base_gpu_id = -1: allowed: an integer >= 0"),
    (lambda s: setattr(s, "hicache_ratio", float("nan")), "hicache_ratio = nan: allowed: a finite number > 0"),
])  # fmt: skip
def test_a_stack_changed_in_code_is_checked_by_the_types_of_the_preset_keys(change, named):
    spec = default_spec("pd")
    spec.model_path, spec.hicache = "m", True
    change(spec)
    with pytest.raises(PresetError, match=re.escape(named)):
        check_spec(spec, 0)


def test_the_environment_is_parsed_once_per_set_of_values(monkeypatch):
    parses = []
    real = config._parse
    monkeypatch.setattr(config, "_parse", lambda env: parses.append(dict(env)) or real(env))
    config._config_of.cache_clear()
    env = {"SGLANG_DSV4_INDEX_K_DTYPE": "bf16", "UNRELATED": "x"}
    first = load_config(env)
    assert load_config(dict(env, UNRELATED="y")) is first and len(parses) == 1  # other variables do not count
    assert load_config({"SGLANG_DSV4_INDEX_K_DTYPE": "fp4"}).index_k_dtype == "fp4" and len(parses) == 2
    for _ in range(2):  # an invalid value is refused on every call, never remembered as a configuration
        with pytest.raises(config.ConfigError, match="SGLANG_DSV4_INDEX_K_GATE='sometimes'"):
            load_config({"SGLANG_DSV4_INDEX_K_GATE": "sometimes"})
    assert len(parses) == 4
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", "fp4")
    assert load_config().index_k_dtype == "fp4"  # os.environ read at the call, never at import
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", "bf16")
    assert load_config().index_k_dtype == "bf16"


def test_the_config_dataclasses_declare_exactly_the_rows_fields_with_their_kinds_types():
    """ExtConfig and CaptureConfig spell each field (for the type checker); the rows stay the truth: same names in
    table order, the kind's type, the row's default."""
    import dataclasses
    import typing

    def declared(cls, prefix=""):
        hints = typing.get_type_hints(cls)
        return [(prefix + f.name, hints[f.name], f.default) for f in dataclasses.fields(cls) if f.name != "capture"]

    rows = [(s.field, s.kind.type, s.default) for s in config.SETTINGS if s.field]
    fields = declared(config.ExtConfig) + declared(config.CaptureConfig, "capture.")
    assert fields == rows
    assert typing.get_type_hints(config.ExtConfig)["capture"] is config.CaptureConfig
