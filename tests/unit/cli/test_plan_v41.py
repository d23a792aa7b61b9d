"""``sglang-dsv4 plan --model v4.1-flash``: its ratio-1/2 numbers against SGLang's real pools built on CPU.

The plan's low-ratio pool bytes, PD item lengths, HiCache host item bytes and ``pd_kv_layout`` are
compared with a real ``DeepSeekV4TokenToKVPool`` sized by SGLang's configurator for the same budget, with
``get_contiguous_buf_infos`` (what PD registers) and with SGLang's own HiCache host pools for those
regions (``hybrid_pool_assembler._dsv4_low_ratio_entries``).
"""

from __future__ import annotations

import json

import pytest

from sglang_dsv4_ext.tools import cli
from sglang_dsv4_ext.tools.plan import decode_reads
from sglang_dsv4_ext.tools.sglang_cpu import dsv4_model
from tests.support.dsv4_pools import sized_pool
from tests.support.releases import ONLY_WITH_0_5_23_V41

pytestmark = ONLY_WITH_0_5_23_V41

V41 = dsv4_model.load_model(bundled="v4.1-flash")
BUDGET_GIB = 0.0625
PLAN_ARGS = ["--kv-budget-gib", str(BUDGET_GIB), "--max-running-requests", "8"]
SERVER_ARGS = dict(swa_full_tokens_ratio=0.1, _swa_full_tokens_ratio_explicitly_set=True, chunked_prefill_size=8192)


@pytest.fixture(scope="module")
def v41_plan(ext_active):
    import io
    from contextlib import redirect_stdout

    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(["plan", "--model", "v4.1-flash", "--json", *PLAN_ARGS]) == 0
    return json.loads(out.getvalue())


def _host_pools(pool, monkeypatch):
    """SGLang's own host pools for the ratio-1/2 regions. Stubbed: cudaHostRegister (pinning; no CUDA here)."""
    from sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler import _dsv4_low_ratio_entries

    monkeypatch.setattr("sglang.srt.mem_cache.pool_host.common._cuda_host_register", lambda *args, **kwargs: None)
    entries = _dsv4_low_ratio_entries(
        pool, dsv4_model.PAGE_SIZE, num_host_pages=2, transfer_layer_id_max=V41.num_hidden_layers
    )
    return {
        (r, kind): e.host_pool
        for e in entries
        for r in (1, 2)
        for kind in ("kv", "index_k")
        if e.device_pool is (pool.kv_pools.get(r) if kind == "kv" else pool.index_pools.get(r))
    }


@pytest.mark.parametrize("dtype", ["fp8", "bf16", "fp4"])
def test_plan_low_ratio_numbers_are_what_sglangs_pools_allocate(v41_plan, monkeypatch, dtype):
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", dtype)
    extra = {"enable_deepseek_v4_fp4_indexer": True} if dtype == "fp4" else {}
    planned = v41_plan["dtypes"][dtype]
    with sized_pool(model=V41, budget_bytes=int(BUDGET_GIB * (1 << 30)), **SERVER_ARGS, **extra) as (_, cfg, pool):
        assert planned["full_tokens"] == cfg.full_max_total_num_tokens
        ptrs, _, items = pool.get_contiguous_buf_infos()
        pd_item = dict(zip(ptrs, items))
        host = _host_pools(pool, monkeypatch)
        assert planned["pd_kv_layout"] == pool.pd_kv_layout()
        assert set(planned["low_ratio"]) == {"1", "2"}
        for ratio in (1, 2):
            row = planned["low_ratio"][str(ratio)]
            kv_pool, index_pool = pool.kv_pools[ratio], pool.index_pools[ratio]
            index_buffers = index_pool.contiguous_page_row_buffers()
            assert row["kv_source_layers"] == pool.sources_by_ratio[ratio]
            assert row["index_k_pool_bytes"] == sum(b.nbytes for b in index_buffers)
            assert row["kv_pool_bytes"] == sum(b.nbytes for b in kv_pool.kv_buffer)
            assert row["index_k_bytes_per_full_token"] == len(index_buffers) * index_pool.get_bytes_per_token() / ratio
            assert {pd_item[b.data_ptr()] for b in index_buffers} == {row["pd_index_k_item_bytes"]}
            assert {pd_item[b.data_ptr()] for b in kv_pool.kv_buffer} == {row["pd_kv_item_bytes"]}
            # One host page of each region holds one FULL page of tokens per kv_source layer.
            for kind in ("kv", "index_k"):
                host_pool = host[(ratio, kind)]
                buffers = host_pool.kv_buffer  # per layer (layer_first) or one tensor (page_first)
                host_bytes = sum(b.nbytes for b in buffers) if isinstance(buffers, list) else buffers.nbytes
                assert host_bytes == 2 * host_pool.layer_num * row[f"host_{kind}_item_bytes"]


def test_v41_text_says_the_dtype_changes_no_pool_here(ext_active, capsys, tmp_path):
    assert cli.main(["plan", "--model", "v4.1-flash", *PLAN_ARGS]) == 0
    out = capsys.readouterr().out
    assert "(0 c4 layers here: every column sizes the same pools)" in out
    assert "kv_source layers (r1 [20], r2 [2, 8, 14]) is fp4, 68 B per token" in out
    assert "no c4/c128 layers" in out
    # With c4 layers next to the ratio-1/2 ones the columns differ, and the plan does not claim otherwise.
    mixed = tmp_path / "config.json"
    mixed.write_text(
        json.dumps(
            {
                "model_type": "deepseek_v41",
                "num_hidden_layers": 4,
                "compress_ratios": [0, 4, 2, 2],
                "kv_source_layer_ids": [2],
            }
        )
    )
    assert cli.main(["plan", "--model-config", str(mixed), *PLAN_ARGS]) == 0
    out = capsys.readouterr().out
    assert "(1 c4 layers here)" in out and "same pools" not in out
    assert "no c128 layers" in out


def test_flash_plan_json_has_no_low_ratio_keys(ext_active, capsys):
    assert cli.main(["plan", "--json", "--kv-budget-gib", "1", "--max-running-requests", "8"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert not {"low_ratio", "pd_kv_layout"} & {k for row in plan["dtypes"].values() for k in row}


def test_a_released_nested_v41_config_loads_as_the_flat_one(tmp_path):
    """The released V4.1 config.json nests the text model in text_config; SGLang flattens it, so do we."""
    from importlib import resources

    filename, _ = dsv4_model.BUNDLED_MODELS["v4.1-flash"]
    flat = json.loads(resources.files("sglang_dsv4_ext.data").joinpath(filename).read_text())
    text = {k: v for k, v in flat.items() if not k.startswith("_") and k not in ("architectures", "model_type")}
    nested = {
        "architectures": flat["architectures"],
        "model_type": flat["model_type"],
        "text_config": {**text, "model_type": "deepseek_v41_text"},
    }
    (tmp_path / "config.json").write_text(json.dumps(nested))
    loaded = dsv4_model.load_model(str(tmp_path))
    assert (loaded.compress_ratios, loaded.kv_source_layer_ids, loaded.model_type) == (
        V41.compress_ratios,
        V41.kv_source_layer_ids,
        V41.model_type,
    )
    assert loaded.layer_counts() == V41.layer_counts()


def test_v41_decode_reads_are_not_modelled_and_say_so(v41_plan, ext_active, capsys):
    # The decode-read formula knows ratios 0/4/128 only: V4.1's shared ratio-1/2 readers would be left out
    # of a total that then looks complete (3.0 MB at every context), so plan says it cannot tell instead.
    assert set(v41_plan["decode_reads"]) == {"not_modelled"}
    assert "ratio-1/2" in v41_plan["decode_reads"]["not_modelled"]
    with pytest.raises(ValueError, match="not modelled"):
        decode_reads.decode_read_bytes(V41, 8192, "bf16")
    assert cli.main(["plan", "--model", "v4.1-flash", *PLAN_ARGS]) == 0
    out = capsys.readouterr().out
    assert "decode: KV bytes one step reads per request: not modelled" in out
    assert "context 8,192" not in out
