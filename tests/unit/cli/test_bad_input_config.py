"""The extension's environment variables: the bad-input table for configuration (docs/bad-input.md).

Rows go through :func:`load_config` (what every process reads: activation, pool creation,
``doctor``, ``serve``) and one row through ``sglang-dsv4 serve --dry-run``. An empty (or
blank) value means unset, for every variable; a bad value is one error naming the variable
and the allowed values. The rows mirror the table "Configuration" of docs/bad-input.md.
"""

from __future__ import annotations

import json
import os

import pytest

from sglang_dsv4_ext.config import ConfigError, ExtConfig, load_config
from sglang_dsv4_ext.tools.cli import main
from tests.support.serve_helpers import dry_run_children, environment_from_dry_run

ALIAS, DTYPE, GATE, EXT = (
    "SGLANG_DSV4_BF16_INDEX_K",
    "SGLANG_DSV4_INDEX_K_DTYPE",
    "SGLANG_DSV4_INDEX_K_GATE",
    "SGLANG_DSV4_EXT",
)
CAPTURE, LAYERS = "SGLANG_DSV4_INDEX_K_CAPTURE", "SGLANG_DSV4_INDEX_K_CAPTURE_LAYERS"

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
    (
        "alias 1 next to fp8",
        {ALIAS: "1", DTYPE: "fp8"},
        "SGLANG_DSV4_BF16_INDEX_K=1 (alias for bf16) contradicts SGLANG_DSV4_INDEX_K_DTYPE='fp8'",
    ),
    (
        "alias 0 next to bf16",
        {ALIAS: "0", DTYPE: "bf16"},
        "SGLANG_DSV4_BF16_INDEX_K=0 contradicts SGLANG_DSV4_INDEX_K_DTYPE='bf16'",
    ),
    ("unknown dtype", {DTYPE: "int8"}, "SGLANG_DSV4_INDEX_K_DTYPE='int8' is not valid; allowed values: 'fp8', 'bf16'"),
    ("unknown gate", {GATE: "maybe"}, "SGLANG_DSV4_INDEX_K_GATE='maybe' is not valid; allowed values: 'auto'"),
    ("kill switch not 0/1", {EXT: "off"}, "SGLANG_DSV4_EXT='off' is not valid; allowed values: '0', '1'"),
    # str.isdigit() accepts '²', int() does not: each must be the variable's own error, not a ValueError
    *[
        (f"superscript digit in {name}", {name: "²"}, f"{name}='²' is not valid; allowed values: a whole number >= 1")
        for name in (
            "SGLANG_DSV4_INDEX_K_CAPTURE_REQUESTS",
            "SGLANG_DSV4_INDEX_K_CAPTURE_ROWS",
            "SGLANG_DSV4_INDEX_K_CAPTURE_MAX_MB",
        )
    ],
    ("superscript digit in a layer id", {LAYERS: "2,²"}, f"{LAYERS}='2,²' is not valid; allowed values: 'all'"),
    ("superscript digit in every:N", {LAYERS: "every:²"}, f"{LAYERS}='every:²' is not valid; allowed values: 'all'"),
    (
        "layer id given more than once",
        {LAYERS: "2,2,2"},
        f"{LAYERS}='2,2,2' lists layer 2 more than once; give each c4 layer id once",
    ),
    # One rule with the preset keys and serve's flags: a value is an allowed spelling exactly (found in review:
    # the variables forgave case and surrounding space, a non-breaking space included, and the others did not)
    ("upper-case dtype", {DTYPE: "BF16"}, "SGLANG_DSV4_INDEX_K_DTYPE='BF16' is not valid; allowed values: 'fp8'"),
    ("dtype in spaces", {DTYPE: " bf16 "}, "SGLANG_DSV4_INDEX_K_DTYPE=' bf16 ' is not valid; allowed values:"),
    ("dtype after a no-break space", {DTYPE: "\xa0bf16"}, "SGLANG_DSV4_INDEX_K_DTYPE='\\xa0bf16' is not valid"),
    ("a no-break space alone", {GATE: "\xa0"}, "SGLANG_DSV4_INDEX_K_GATE='\\xa0' is not valid; allowed values:"),
    ("upper-case gate", {GATE: "Strict"}, "SGLANG_DSV4_INDEX_K_GATE='Strict' is not valid; allowed values:"),
    ("switch in spaces", {EXT: " 0"}, "SGLANG_DSV4_EXT=' 0' is not valid; allowed values: '0', '1'"),
    ("number in spaces", {"SGLANG_DSV4_INDEX_K_CAPTURE_ROWS": " 4"}, "_CAPTURE_ROWS=' 4' is not valid; allowed"),
    ("upper-case layer rule", {LAYERS: "ALL"}, f"{LAYERS}='ALL' is not valid; allowed values: 'all'"),
    ("spaces in a layer list", {LAYERS: "2, 4"}, f"{LAYERS}='2, 4' is not valid; allowed values: 'all'"),
]


@pytest.mark.parametrize("env, needle", [r[1:] for r in REFUSED_ROWS], ids=[r[0] for r in REFUSED_ROWS])
def test_bad_value_names_the_variable(env, needle):
    with pytest.raises(ConfigError) as excinfo:
        load_config(env)
    assert needle in str(excinfo.value)


def test_a_value_the_variable_refuses_is_refused_by_the_preset_key_and_the_flag(tmp_path, capsys):
    """The other two places a setting is written: the same spelling is refused there too."""
    preset = tmp_path / "p.toml"
    preset.write_text('mode = "single"\nmodel_path = "m"\n[extension]\nindex_k_dtype = "BF16"\n')
    assert main(["serve", "--preset", str(preset), "--dry-run"]) == 2
    assert "index_k_dtype" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--mode", "single", "--model-path", "m", "--index-k-dtype", "BF16", "--dry-run"])
    assert exit_info.value.code == 2 and "invalid choice: 'BF16'" in capsys.readouterr().err


def test_blank_is_ascii_whitespace_alone(monkeypatch):
    assert load_config({DTYPE: " \t\n"}) == ExtConfig()  # unset
    with pytest.raises(ConfigError, match="not valid"):
        load_config({DTYPE: "\u2003"})  # an em space is not blank: it is a value, and no allowed one


def test_serve_without_a_preset_reads_an_empty_alias_as_unset(capsys, monkeypatch):
    """The shell's variables are serve's defaults without a preset: empty alias + bf16 is bf16."""
    monkeypatch.setenv(ALIAS, "")
    monkeypatch.setenv(DTYPE, "bf16")
    rc = main(["serve", "--dry-run", "--mode", "single", "--model-path", "m"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    ((unset, env, _),) = dry_run_children(out)
    assert load_config(environment_from_dry_run(unset, env, dict(os.environ))).index_k_dtype == "bf16"


# ----------------------------------------------------------------------------- checked where it would fail
# Well-formed capture settings that stop every server when its pool is built: doctor and serve (also the
# dry run) refuse them before anything starts, with the pool build's own rule.

C4_IDS = ",".join(map(str, range(2, 43, 2)))  # DeepSeek-V4-Flash's c4 layers (the bundled config)
BUNDLED_WHY = "checked against the bundled DeepSeek-V4-Flash config"

# (row, environment on top of bf16 + a capture directory, the error)
POOL_BUILD_ROWS = [
    (
        "layer ids that are not c4 layers",
        {LAYERS: "3,5"},
        f"{LAYERS}='3,5': [3, 5] are not c4 indexer layers of this model; allowed ids: {C4_IDS} ({BUNDLED_WHY}",
    ),
    ("a layer id past the last layer", {LAYERS: "999"}, f"{LAYERS}='999': [999] are not c4 indexer layers"),
]


def _capture_env(monkeypatch, tmp_path, extra):
    monkeypatch.setenv(DTYPE, "bf16")
    monkeypatch.setenv(CAPTURE, str(tmp_path / "capture"))
    for name, value in extra.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("extra, needle", [r[1:] for r in POOL_BUILD_ROWS], ids=[r[0] for r in POOL_BUILD_ROWS])
def test_serve_dry_run_refuses_capture_layers_the_pool_build_would_refuse(tmp_path, capsys, monkeypatch, extra, needle):
    _capture_env(monkeypatch, tmp_path, extra)
    rc = main(["serve", "--preset", "dsv4-flash-8gpu-pd-4p4d-bf16-hicache", "--dry-run"])
    out, err = capsys.readouterr()
    assert rc == 2 and not dry_run_children(out), err
    assert f"prefill-0 would stop when its pool is built: {needle}" in err and "Traceback" not in err


def test_serve_dry_run_refuses_a_capture_directory_that_is_a_file(tmp_path, capsys, monkeypatch):
    evidence = tmp_path / "capture"
    evidence.write_text("an earlier run's notes\n")
    _capture_env(monkeypatch, tmp_path, {})
    rc = main(["serve", "--preset", "dsv4-flash-8gpu-pd-4p4d-bf16-hicache", "--dry-run"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"{CAPTURE}='{evidence}': exists and is not a directory; allowed: a directory" in err
    assert evidence.read_text() == "an earlier run's notes\n"


def test_serve_dry_run_says_which_layers_and_which_model_config(tmp_path, capsys, monkeypatch):
    """The model path is a local directory with a config.json of 4 layers: the ids are checked against it."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"num_hidden_layers": 4, "compress_ratios": [0, 4, 128, 4]}))
    _capture_env(monkeypatch, tmp_path, {LAYERS: "3"})
    rc = main(["serve", "--preset", "dsv4-flash-8gpu-pd-4p4d-bf16-hicache", "--dry-run", "--model-path", str(model)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert (
        f"# note: decode-0: index-K capture into {tmp_path / 'capture'}: c4 layers 3 (1 of 2; ids checked "
        f"against {model / 'config.json'})"
    ) in out
    assert not (tmp_path / "capture").exists()  # a dry run creates nothing


@pytest.mark.parametrize("extra, needle", [r[1:] for r in POOL_BUILD_ROWS], ids=[r[0] for r in POOL_BUILD_ROWS])
def test_doctor_refuses_capture_layers_the_pool_build_would_refuse(
    tmp_path, capsys, monkeypatch, ext_active, extra, needle
):
    _capture_env(monkeypatch, tmp_path, extra)
    rc = main(["doctor", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert needle in report["capture"]["problem"] and needle in report["error"]


def test_doctor_refuses_a_capture_directory_that_is_a_file(tmp_path, capsys, monkeypatch, ext_active):
    (tmp_path / "capture").write_text("")
    _capture_env(monkeypatch, tmp_path, {})
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    refused = f"{CAPTURE}='{tmp_path / 'capture'}': exists and is not a directory"
    assert f"capture         REFUSED at pool build: {refused}" in out


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs procfs (Linux)")
@pytest.mark.parametrize("root", ["/proc/sglang-dsv4-capture", "/proc/sglang-dsv4-capture/deeper"])
def test_doctor_and_serve_refuse_a_capture_directory_under_procfs(tmp_path, capsys, monkeypatch, ext_active, root):
    """Found in review: os.access says yes for root in /proc, where mkdir fails; doctor passed the directory.
    The check now tries the creation."""
    _capture_env(monkeypatch, tmp_path, {})
    monkeypatch.setenv(CAPTURE, root)
    refused = f"{CAPTURE}='{root}': cannot be created: nothing can be created in /proc ("
    assert main(["doctor"]) == 1
    assert f"capture         REFUSED at pool build: {refused}" in capsys.readouterr().out
    rc = main(["serve", "--preset", "dsv4-flash-8gpu-pd-4p4d-bf16-hicache", "--dry-run"])
    err = capsys.readouterr().err
    assert rc == 2 and refused in err and "Traceback" not in err


def test_the_directory_check_leaves_nothing_behind(tmp_path, capsys, monkeypatch, ext_active):
    _capture_env(monkeypatch, tmp_path, {})
    (tmp_path / "capture").mkdir()
    assert main(["doctor"]) == 0, capsys.readouterr().out
    assert list((tmp_path / "capture").iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["capture"]


def test_doctor_checks_layer_ids_against_the_model_config_given(tmp_path, capsys, monkeypatch, ext_active):
    """Layer 3 is not a c4 layer of the bundled config; it is one of this 4-layer config."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"num_hidden_layers": 4, "compress_ratios": [0, 4, 128, 4]}))
    _capture_env(monkeypatch, tmp_path, {LAYERS: "3"})
    assert main(["doctor", "--model-config", str(config)]) == 0
    out = capsys.readouterr().out
    assert f"capture         {tmp_path / 'capture'}: c4 layers 3 (1 of 2; ids checked against {config})" in out
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert f"[3] are not c4 indexer layers of this model; allowed ids: {C4_IDS} ({BUNDLED_WHY})" in out


def test_doctor_refuses_a_model_config_that_does_not_exist(tmp_path, capsys):
    assert main(["doctor", "--model-config", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert f"--model-config '{tmp_path / 'none'}': no such file" in err and "Traceback" not in err


@pytest.mark.parametrize("name", ["SGLANG_DSV4_INDEX_K_CAPTURE_ROWS", LAYERS])
def test_doctor_and_serve_report_a_superscript_digit_without_a_traceback(
    tmp_path, capsys, monkeypatch, ext_active, name
):
    _capture_env(monkeypatch, tmp_path, {name: "²"})
    assert main(["doctor"]) == 1
    assert f"error           {name}='²' is not valid" in capsys.readouterr().out
    rc = main(["serve", "--preset", "dsv4-flash-8gpu-pd-4p4d-bf16-hicache", "--dry-run"])
    err = capsys.readouterr().err
    assert rc == 2 and f"{name}='²' is not valid" in err and "Traceback" not in err
