"""`sglang-dsv4 plan`: the bad-input table of docs/bad-input.md, row by row, through the real CLI entry.

Each row is an input and the one error line the user must see: exit 2, the flag or the
model-config field named with what is allowed, no traceback, no plan printed. The rows
mirror the table "`sglang-dsv4 plan`" of docs/bad-input.md.
"""

from __future__ import annotations

import json
import os

import pytest

from sglang_dsv4_ext.tools import cli
from tests.support.cli_calls import assert_refused_once
from tests.support.releases import ONLY_WITH_0_5_23_V41

# (row, arguments after `plan`, what the user sees); argparse rejects these before any work.
FLAG_ROWS = [
    ("KV budget inf", ["--kv-budget-gib", "inf"], "argument --kv-budget-gib: 'inf': allowed: a finite number > 0"),
    ("KV budget nan", ["--kv-budget-gib", "nan"], "argument --kv-budget-gib: 'nan': allowed: a finite number > 0"),
    ("KV budget negative", ["--kv-budget-gib", "-1"], "argument --kv-budget-gib: '-1': allowed: a finite number > 0"),
    (
        "max running requests 0",
        ["--max-running-requests", "0"],
        "argument --max-running-requests: '0': allowed: an integer >= 1",
    ),
    (
        "max running requests negative",
        ["--max-running-requests", "-4"],
        "argument --max-running-requests: '-4': allowed: an integer >= 1",
    ),
    (
        "chunked prefill size 0",
        ["--chunked-prefill-size", "0"],
        "argument --chunked-prefill-size: '0': allowed: an integer >= 1, or -1 (chunked prefill off)",
    ),
    (
        "SWA ratio inf",
        ["--swa-full-tokens-ratio", "inf"],
        "argument --swa-full-tokens-ratio: 'inf': allowed: a finite number > 0",
    ),
    ("start layer negative", ["--start-layer", "-1"], "argument --start-layer: '-1': allowed: an integer >= 0"),
    ("end layer 0", ["--end-layer", "0"], "argument --end-layer: '0': allowed: an integer >= 1"),
    ("unknown dtype", ["--dtypes", "int8"], "allowed values are fp8, bf16, fp4"),
    # one number rule for every command: ASCII digits (int() and float() also take other scripts' digits)
    (
        "max running requests in Devanagari digits",
        ["--max-running-requests", "१६"],
        "argument --max-running-requests: '१६': allowed: an integer >= 1",
    ),
    (
        "KV budget in full-width digits",
        ["--kv-budget-gib", "１２"],
        "argument --kv-budget-gib: '１２': allowed: a finite",
    ),
]


def _plan(argv) -> int:
    try:
        return cli.main(["plan", *argv])
    except SystemExit as exc:  # argparse's usage errors
        return exc.code


def _assert_refused(capsys, argv, needle):
    assert assert_refused_once(capsys, _plan(argv), needle) == ""


@pytest.mark.parametrize("argv, needle", [r[1:] for r in FLAG_ROWS], ids=[r[0] for r in FLAG_ROWS])
def test_bad_flag_is_refused_naming_it(capsys, argv, needle):
    _assert_refused(capsys, argv, needle)


GOOD = {"num_hidden_layers": 4, "compress_ratios": [0, 4, 128, 4, 0], "index_head_dim": 128}
# A DeepSeek-V4.1-style config: ratio-2 layers 1 and 2 share kv_source layer 1's sub-pool layer.
V41_GOOD = {
    "model_type": "deepseek_v41",
    "num_hidden_layers": 4,
    "compress_ratios": [0, 2, 2, 4, 0],
    "kv_source_layer_ids": [1],
}

# (row, config.json contents (text), what the user sees after "model config <path>: ")
CONFIG_ROWS = [
    ("valid JSON, not an object", "42", "a JSON object is expected, found int"),
    ("a list", "[1, 2]", "a JSON object is expected, found list"),
    ("not JSON", "{", "not valid JSON"),
    (
        "compress_ratios null",
        json.dumps({**GOOD, "compress_ratios": None}),
        "compress_ratios = None: must be a list with one of 0, 1, 2, 4, 128 per layer",
    ),
    (
        "compress_ratios with an unknown ratio",
        json.dumps({**GOOD, "compress_ratios": [0, 4, 8, 4, 0]}),
        "compress_ratios = [0, 4, 8, 4, 0]: must be a list with one of 0, 1, 2, 4, 128 per layer",
    ),
    (
        "compress_ratios too short",
        json.dumps({**GOOD, "compress_ratios": [0, 4]}),
        "compress_ratios has 2 entries for 4 layers",
    ),
    (
        "num_hidden_layers a string",
        json.dumps({**GOOD, "num_hidden_layers": "four"}),
        "num_hidden_layers = 'four': must be a positive integer",
    ),
    (
        "num_hidden_layers negative",
        json.dumps({**GOOD, "num_hidden_layers": -4}),
        "num_hidden_layers = -4: must be a positive integer",
    ),
    (
        "num_hidden_layers true",
        json.dumps({**GOOD, "num_hidden_layers": True}),
        "num_hidden_layers = True: must be a positive integer",
    ),
    ("index_head_dim 0", json.dumps({**GOOD, "index_head_dim": 0}), "index_head_dim = 0: must be a positive integer"),
    (
        "qk_rope_head_dim negative",
        json.dumps({**GOOD, "qk_rope_head_dim": -64}),
        "qk_rope_head_dim = -64: must be a positive integer",
    ),
    (
        "window_size a float",
        json.dumps({**GOOD, "window_size": 128.5}),
        "window_size = 128.5: must be a positive integer",
    ),
    (
        "kv_source_layer_ids not a list",
        json.dumps({**GOOD, "kv_source_layer_ids": 3}),
        "kv_source_layer_ids = 3: must be a list of layer ids",
    ),
    ("missing keys", json.dumps({"hidden_size": 4096}), "missing num_hidden_layers, compress_ratios"),
    (
        "ratio-1/2 layers outside V4.1",
        json.dumps({**GOOD, "compress_ratios": [0, 2, 2, 4, 0], "kv_source_layer_ids": [1]}),
        "compress_ratios has ratio-1/2 layers but model_type = 'deepseek_v4': SGLang serves ratios 1 and 2 only for "
        "model_type 'deepseek_v41'",
    ),
    (
        "kv_source on a c4 layer",
        json.dumps({**V41_GOOD, "kv_source_layer_ids": [1, 3]}),
        "kv_source_layer_ids = [1, 3]: [3] are not ratio-1/2 layers below num_hidden_layers (4)",
    ),
    (
        "ratio-1/2 layer without a kv_source",
        json.dumps({**V41_GOOD, "kv_source_layer_ids": []}),
        "layers [1, 2] have ratio 1 or 2 but no kv_source layer of their ratio at or before them",
    ),
    (  # found in review: a top-k of 10^9 rows was planned
        "index_topk past the context",
        json.dumps({**GOOD, "index_topk": 10**9}),
        "index_topk = 1000000000: past max_position_embeddings (1048576); allowed: 1..1048576",
    ),
    (
        "kv_source of the other ratio",
        json.dumps({**V41_GOOD, "compress_ratios": [0, 1, 2, 4, 0]}),
        "layers [2] have ratio 1 or 2 but no kv_source layer of their ratio at or before them",
    ),
]


@pytest.mark.parametrize("text, needle", [r[1:] for r in CONFIG_ROWS], ids=[r[0] for r in CONFIG_ROWS])
def test_bad_model_config_is_refused_naming_the_field(tmp_path, capsys, text, needle):
    config = tmp_path / "config.json"
    config.write_text(text)
    _assert_refused(capsys, ["--model-config", str(tmp_path)], f"model config {config}: {needle}")


@pytest.mark.parametrize(
    "good, layers",
    [
        pytest.param(GOOD, {"0": 1, "4": 2, "128": 1}, id="V4"),
        pytest.param(V41_GOOD, {"0": 1, "2": 2, "4": 1}, id="V4.1", marks=ONLY_WITH_0_5_23_V41),
    ],
)
def test_the_good_config_of_these_rows_plans(ext_active, tmp_path, capsys, good, layers):
    """The base configs are valid, so each row above fails for its one field only."""
    (tmp_path / "config.json").write_text(json.dumps(good))
    assert _plan(["--model-config", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["layers"] == layers


# (row, arguments after `plan`, what the user sees): what SGLang refuses for DeepSeek-V4.1 is refused, not planned.
V41_ROWS = [
    (
        "V4.1 with MTP",
        ["--model", "v4.1-flash", "--mtp"],
        "--mtp: DeepSeek-V4.1-Flash (bundled config) is DeepSeek-V4.1 (model_type deepseek_v41); SGLang's "
        "validate_deepseek_v41_features (arg_groups/deepseek_v4_hook.py) refuses speculative decoding "
        "other than DSpark",
    ),
    (
        "V4.1 pipeline stage",
        ["--model", "v4.1-flash", "--start-layer", "20"],
        "--start-layer 20 / --end-layer 40: DeepSeek-V4.1-Flash (bundled config) is DeepSeek-V4.1; SGLang's "
        "validate_deepseek_v41_features (arg_groups/deepseek_v4_hook.py) refuses pipeline parallelism for it",
    ),
    (
        "V4.1 pipeline stage by its end",
        ["--model", "v4.1-flash", "--end-layer", "20"],
        "--start-layer 0 / --end-layer 20: DeepSeek-V4.1-Flash (bundled config) is DeepSeek-V4.1",
    ),
    (
        "--model and --model-config",
        ["--model", "v4.1-flash", "--model-config", "/x"],
        "--model v4.1-flash and --model-config '/x': give one of them",
    ),
    ("unknown bundled model", ["--model", "v5"], "argument --model: invalid choice: 'v5'"),
]


@pytest.mark.parametrize("argv, needle", [r[1:] for r in V41_ROWS], ids=[r[0] for r in V41_ROWS])
def test_what_sglang_refuses_for_v41_is_refused(ext_active, capsys, argv, needle):
    _assert_refused(capsys, argv, needle)


def test_missing_model_config(tmp_path, capsys):
    _assert_refused(capsys, ["--model-config", str(tmp_path / "nope")], "--model-config")


def test_budget_sglang_refuses_is_one_line_naming_the_budget(ext_active, capsys):
    _assert_refused(
        capsys,
        ["--kv-budget-gib", "0.001", "--dtypes", "fp8"],
        "SGLang's DSV4PoolConfigurator refuses a 0.000999999 GiB budget (fp8)",
    )


def test_bad_stage_names_both_flags(ext_active, capsys):
    _assert_refused(capsys, ["--start-layer", "40", "--end-layer", "10"], "--start-layer 40 / --end-layer 10")


def test_a_model_config_that_is_a_directory_without_config_json_or_a_fifo_says_what_it_is(tmp_path, capsys):
    """Found in review: both were called "no such file"."""
    _assert_refused(
        capsys, ["--model-config", str(tmp_path)], f"--model-config '{tmp_path}': a directory without a config.json"
    )
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)  # opened without blocking: no writer is needed for the refusal
    _assert_refused(
        capsys, ["--model-config", str(fifo)], f"--model-config '{fifo}': is a FIFO (named pipe), not a regular file"
    )
    (tmp_path / "config.json").mkdir()
    _assert_refused(capsys, ["--model-config", str(tmp_path)], "config.json is a directory, not a regular file")
