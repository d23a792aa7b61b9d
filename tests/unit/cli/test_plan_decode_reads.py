"""``sglang-dsv4 plan --context``: the bytes a decode step reads per request, by index-K dtype.

The formula (``sglang_dsv4_ext.tools.plan.decode_reads``) is checked against SGLang 0.5.23's real pools built
on CPU through its own configurator and builder (tests/support/dsv4_pools.py): the row size of every
KV pool a decode step reads, the index-K row each dtype's indexer pool allocates, and the number of
layers of each kind. Then the per-reader sums against an independent walk over the layers, and the
CLI (table, JSON, recall from ``--recall-json``, bad input).
"""

from __future__ import annotations

import json

import pytest

from sglang_dsv4_ext.runtime.index_k.dtype import index_k_bytes_per_token
from sglang_dsv4_ext.tools import cli
from sglang_dsv4_ext.tools.plan import decode_reads
from sglang_dsv4_ext.tools.sglang_cpu import dsv4_model
from tests.support.dsv4_pools import sized_pool

MODEL = dsv4_model.load_model()
RATIO_MODE = dict(swa_full_tokens_ratio=0.1, _swa_full_tokens_ratio_explicitly_set=True)
POOL_ARGS = {"fp8": ("fp8", {}), "bf16": ("bf16", {}), "fp4": ("fp8", {"enable_deepseek_v4_fp4_indexer": True})}


@pytest.mark.parametrize("dtype", ["fp8", "bf16", "fp4"])
def test_row_sizes_and_layer_counts_are_the_real_pools(ext_active, monkeypatch, dtype):
    env_dtype, server_args = POOL_ARGS[dtype]
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", env_dtype)
    with sized_pool(**RATIO_MODE, **server_args) as (_, _, pool):
        kv = decode_reads.kv_row_bytes(MODEL)
        assert kv == pool.swa_kv_pool.kv_cache_total_dim == pool.c4_kv_pool.kv_cache_total_dim
        assert kv == pool.c128_kv_pool.kv_cache_total_dim
        indexer = pool.c4_indexer_kv_pool
        row = indexer.index_k_with_scale_buffer[0].shape[1] // indexer.index_page_size
        assert row == index_k_bytes_per_token(dtype, MODEL.index_head_dim)
        ratios = MODEL.compress_ratios[: MODEL.num_hidden_layers]
        assert pool.swa_kv_pool.layer_num == len(ratios)
        assert pool.c4_kv_pool.layer_num == indexer.layer_num == ratios.count(4)
        assert pool.c128_kv_pool.layer_num == ratios.count(128)


def _walk_layers(model, context, dtype, start=0, end=None):
    """The same reads, layer by layer, written from the module docstring's list."""
    kv = model.qk_nope_head_dim + 2 * model.qk_rope_head_dim + 8
    ik = index_k_bytes_per_token(dtype, model.index_head_dim)
    total = 0
    for ratio in model.compress_ratios[start : model.num_hidden_layers if end is None else end]:
        total += min(context, model.window_size) * kv
        if ratio == 4:
            total += (context // 4) * ik + min(model.index_topk, context // 4) * kv
        elif ratio == 128:
            total += (context // 128) * kv
    return total


@pytest.mark.parametrize("context", [1, 3, 100, 2048, 131072, 1 << 20])
@pytest.mark.parametrize("dtype", ["fp8", "bf16", "fp4"])
def test_sums_equal_a_walk_over_the_layers(context, dtype):
    got = decode_reads.decode_read_bytes(MODEL, context, dtype)
    assert got["total"] == _walk_layers(MODEL, context, dtype)
    assert got["total"] == got["swa"] + got["indexer"] + got["sparse_c4"] + got["c128"]
    stage = decode_reads.decode_read_bytes(MODEL, context, dtype, start_layer=3, end_layer=20)
    assert stage["total"] == _walk_layers(MODEL, context, dtype, 3, 20)


def test_only_the_indexer_term_depends_on_the_dtype():
    table = decode_reads.decode_reads_table(MODEL, [131072], ["fp8", "bf16", "fp4"])["131072"]
    for key in ("swa", "sparse_c4", "c128"):
        assert table["fp8"][key] == table["bf16"][key] == table["fp4"][key]
    assert table["bf16"]["indexer"] * 132 == table["fp8"]["indexer"] * 256
    assert table["fp8"]["vs_fp8"] == 1.0 and table["bf16"]["vs_fp8"] > 1.0 > table["fp4"]["vs_fp8"]


def _plan(capsys, *argv):
    try:
        rc = cli.main(["plan", *argv])
    except SystemExit as exc:
        rc = exc.code
    return rc, *capsys.readouterr()


def test_plan_json_has_the_contexts_asked_for(ext_active, capsys):
    rc, out, _ = _plan(capsys, "--json", "--context", "8192,128K,1M", "--dtypes", "fp8,bf16")
    assert rc == 0
    plan = json.loads(out)
    assert list(plan["decode_reads"]) == ["8192", "131072", "1048576"]
    assert plan["decode_reads"]["131072"]["bf16"]["total"] == _walk_layers(MODEL, 131072, "bf16")
    assert plan["recall"] == {"source": None, "k": MODEL.index_topk, "by_format": {"fp8": None, "bf16": None}}
    assert list(plan)[:9] == [
        "model",
        "layers",
        "stage",
        "kv_budget_bytes",
        "max_running_requests",
        "swa_mode",
        "mtp",
        "dtypes",
        "decode_reads",
    ]  # 0.3.0's keys first, unchanged in order


def test_plan_says_recall_is_not_measured_without_a_recall_file(ext_active, capsys):
    rc, out, _ = _plan(capsys, "--context", "32K")
    assert rc == 0
    assert "context 32,768" in out
    assert "recall: not measured (the config cannot tell it)" in out


def test_plan_shows_rows_weighted_recall_and_n_a_where_nothing_was_measured(ext_active, capsys, tmp_path):
    k = MODEL.index_topk
    rows = [  # what `sglang-dsv4 recall DIR --json` writes: one row per layer, format and k
        {"layer": 2, "format": "bf16", "k": k, "rows": 30, "recall": 1.0, "min_recall": 1.0},
        {"layer": 4, "format": "bf16", "k": k, "rows": 10, "recall": 0.96, "min_recall": 0.9},
        {"layer": 2, "format": "fp8", "k": k, "rows": 40, "recall": 0.97, "min_recall": 0.95},
        {"layer": 2, "format": "fp8", "k": k + 1, "rows": 40, "recall": 0.1, "min_recall": 0.1},  # other k
        {"layer": 2, "format": "fp4", "k": k, "rows": 0, "recall": None, "min_recall": None},  # rows <= k
    ]
    path = tmp_path / "recall.json"
    path.write_text(json.dumps({"directory": "cap", "files": 1, "rows": rows}))
    rc, out, _ = _plan(capsys, "--json", "--recall-json", str(path))
    assert rc == 0
    got = json.loads(out)["recall"]["by_format"]
    assert got["bf16"] == pytest.approx((30 * 1.0 + 10 * 0.96) / 40)
    assert got["fp8"] == pytest.approx(0.97)
    assert got["fp4"] is None  # cannot tell: no captured row had more than k keys
    rc, out, _ = _plan(capsys, "--recall-json", str(path))
    assert rc == 0 and "0.9900" in out and "n/a" in out


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--context", "0"], "argument --context: '0': allowed: comma-separated context lengths in tokens >= 1"),
        (["--context", "8K,abc"], "argument --context: '8K,abc': allowed:"),
        (["--context", ""], "argument --context: '': allowed:"),
    ],
)
def test_bad_context_is_refused_naming_the_flag(capsys, argv, needle):
    rc, out, err = _plan(capsys, *argv)
    assert rc == 2 and out == "" and "Traceback" not in err
    assert needle in err


@pytest.mark.parametrize("content", [None, "not json", '{"rows": 3}', '{"directory": "x"}'])
def test_a_file_that_is_not_recall_output_is_refused(ext_active, capsys, tmp_path, content):
    path = tmp_path / "recall.json"
    if content is not None:
        path.write_text(content)
    rc, out, err = _plan(capsys, "--recall-json", str(path))
    assert rc == 2 and out == "" and "Traceback" not in err
    assert f"--recall-json '{path}': not the output of `sglang-dsv4 recall DIR --json`" in err


@pytest.mark.parametrize("digit", ["²", "١٢", "８", "1_0", "8\u00a0"])
def test_a_context_in_digits_int_accepts_but_ascii_does_not_is_refused_by_the_flag(capsys, digit):
    """Found in review: '²' passed isdigit() and then failed int(), giving argparse's internal message; int()
    itself takes other scripts' digits ('١٢', full-width '８') and '_' separators. One rule: ASCII digits."""
    rc, out, err = _plan(capsys, "--context", digit)
    assert rc == 2 and out == "" and "Traceback" not in err
    assert f"argument --context: {digit!r}: allowed: comma-separated context lengths in tokens >= 1" in err


@pytest.mark.parametrize("context", ["100M", "1" * 29, "1048577"])
def test_a_context_past_the_models_limit_is_refused(ext_active, capsys, context):
    """Found in review: --context 100M on a 1M-context model printed decode bytes for it."""
    rc, out, err = _plan(capsys, "--context", f"8K,{context}")
    assert rc == 2 and out == "" and "Traceback" not in err
    assert "is past the model's limit of 1,048,576 (max_position_embeddings of" in err
    assert "allowed: 1..1048576" in err
    assert _plan(capsys, "--context", "1M", "--json")[0] == 0  # the limit itself is served


@pytest.mark.parametrize(
    "row, named",
    [
        ({"rows": 10, "recall": 5.0}, "recall = 5.0: allowed: a number in [0, 1]"),
        ({"rows": 10, "recall": -0.1}, "recall = -0.1: allowed: a number in [0, 1]"),
        ({"rows": 10, "recall": float("nan")}, "recall = nan: allowed: a number in [0, 1]"),
        ({"rows": 10, "recall": "0.9"}, "recall = '0.9': allowed: a number in [0, 1]"),
        ({"rows": 2.5, "recall": 0.9}, "rows = 2.5: allowed: a whole number >= 0"),
    ],
)
def test_recall_values_outside_0_1_are_refused(ext_active, capsys, tmp_path, row, named):
    """Found in review: recall 5.0 or NaN was printed as a measured recall."""
    path = tmp_path / "recall.json"
    entry = {"layer": 2, "format": "fp8", "k": MODEL.index_topk, "min_recall": 0.5, **row}
    path.write_text(json.dumps({"rows": [entry]}))  # json writes NaN as NaN, and reads it back
    rc, out, err = _plan(capsys, "--recall-json", str(path))
    assert rc == 2 and out == "" and "Traceback" not in err
    assert f"--recall-json '{path}': not the output of `sglang-dsv4 recall DIR --json`" in err and named in err


def test_a_fifo_or_a_device_as_recall_json_is_refused_without_blocking(ext_active, capsys, tmp_path):
    """Found in review: a FIFO made plan hang in open() and /dev/zero was read without end. Run in a thread
    with a deadline, so the unfixed code fails here instead of blocking the suite."""
    import os
    import threading

    fifo = tmp_path / "recall.fifo"
    os.mkfifo(fifo)
    for path, what in ((fifo, "is a FIFO (named pipe), not a regular file"), ("/dev/zero", "a character device")):
        result = {}
        worker = threading.Thread(
            target=lambda p=path, into=result: into.update(got=_plan(capsys, "--recall-json", str(p)))
        )
        worker.daemon = True
        worker.start()
        worker.join(timeout=60)
        if worker.is_alive():
            with open(fifo, "w"):  # release the blocked open() so the thread can end
                pass
            pytest.fail(f"plan --recall-json {path} did not return within 60 s")
        rc, out, err = result["got"]
        assert rc == 2 and out == "" and what in err, err


def test_a_large_recall_json_is_refused_by_size(ext_active, capsys, tmp_path, monkeypatch):
    from sglang_dsv4_ext.tools.plan import cli as plan_cli

    monkeypatch.setattr(plan_cli, "RECALL_JSON_LIMIT", 64)  # the bound, made small here
    path = tmp_path / "recall.json"
    path.write_text(json.dumps({"rows": [], "padding": "x" * 100}))
    rc, out, err = _plan(capsys, "--recall-json", str(path))
    assert rc == 2 and "is larger than" in err
