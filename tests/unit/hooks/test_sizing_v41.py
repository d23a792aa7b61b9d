"""DeepSeek-V4.1 sizing: SGLang's real configurator and pool agree for the shared ratio-1/2 sub-pools.

The bundled V4.1-Flash config (2 x r0, 18 x r2, 20 x r1; kv_source layers 2, 8, 14 for ratio 2 and 20 for
ratio 1) is built into SGLang's real ``DeepSeekV4TokenToKVPool`` through SGLang's own
``DSV4PoolConfigurator`` and ``KVCacheConfigurator._build_dsv4_kv_pool`` on CPU. Expected bytes come from
the page arithmetic of the pools (V4 KV layout: 584-B slots in 576-B units; fp4 index-K: 68 B per slot in
64-slot pages), not from the code under test.
"""

from __future__ import annotations

import dataclasses
import json
from fractions import Fraction
from importlib import resources

import pytest

from sglang_dsv4_ext import errors
from sglang_dsv4_ext.runtime.hooks import pool as pool_patch
from sglang_dsv4_ext.runtime.index_k import budget as index_k_budget
from sglang_dsv4_ext.runtime.index_k import dtype as index_k
from sglang_dsv4_ext.tools.sglang_cpu import dsv4_model
from tests.support.dsv4_pools import sized_pool
from tests.support.releases import ONLY_WITH_0_5_23_V41

pytestmark = ONLY_WITH_0_5_23_V41

V41 = dsv4_model.load_model(bundled="v4.1-flash")
PAGE = 256
INDEX_PAGE = 64  # SGLang's DSV41_INDEX_PAGE_SIZE without DeepGEMM's paged sparse MQA kernel (this machine)
FP4_BYTES = 128 // 2 + 128 // 32  # e2m1 values + one ue8m0 byte per 32 values
BUDGET = 64 << 20
RATIO_MODE = dict(swa_full_tokens_ratio=0.1, _swa_full_tokens_ratio_explicitly_set=True)


def kv_bytes_per_slot(ratio: int) -> Fraction:
    """V4 layout: P slots of 576 value bytes + 8 scale bytes, the page rounded up to 576-B units."""
    slots = PAGE // ratio if ratio else PAGE
    return Fraction(-(-(slots * 584) // 576) * 576, slots)


def low_ratio_allocation(full: int, ratio: int, layers: int) -> Fraction:
    """What the ratio's KV + index-K pools hold: full // ratio slots, plus one reserved FULL page of KV slots,
    plus index-K rounded up to 64-slot pages after (full + one page) // ratio slots and one padding page."""
    kv = (full // ratio + PAGE) * kv_bytes_per_slot(ratio)
    index_slots = -(-((full + PAGE) // ratio + INDEX_PAGE) // INDEX_PAGE) * INDEX_PAGE
    return layers * (kv + index_slots * FP4_BYTES)


def allocated_low_ratio_bytes(pool, ratio: int) -> int:
    kv = sum(b.nbytes for b in pool.kv_pools[ratio].kv_buffer)
    return kv + sum(b.nbytes for b in pool.index_pools[ratio].contiguous_page_row_buffers())


def test_bundled_config_says_where_every_value_comes_from():
    filename, _ = dsv4_model.BUNDLED_MODELS["v4.1-flash"]
    raw = json.loads(resources.files("sglang_dsv4_ext.data").joinpath(filename).read_text())
    fields = {k for k in raw if not k.startswith("_")}
    assert fields == set(raw["_sources"]), fields ^ set(raw["_sources"])
    assert all(len(text) > 40 for text in raw["_sources"].values())


def test_kv_sources_follow_sglangs_own_rule():
    from sglang.srt.mem_cache.deepseek_v4_memory_pool import collect_sources_by_ratio

    assert V41.is_v41 and V41.num_hidden_layers == 40
    stage = range(V41.num_hidden_layers)
    sglang_sources = collect_sources_by_ratio(V41.compress_ratios, V41.kv_source_layer_ids, stage)
    assert {r: s for r, s in sglang_sources.items() if r in (1, 2)} == V41.low_ratio_sources()
    assert not {4, 128} & set(sglang_sources)  # V4.1-Flash has no c4 / c128 layer


def expected_bytes_per_full_token(model, swa_ratio=Fraction(1, 10)) -> Fraction:
    """SWA (every layer's main KV, priced per SWA slot; no c4 state without c4 layers) + per ratio-1/2
    kv_source layer (KV + fp4 index-K) / ratio."""
    swa = swa_ratio * kv_bytes_per_slot(0) * model.num_hidden_layers
    return swa + sum(len(s) * (kv_bytes_per_slot(r) + FP4_BYTES) / r for r, s in model.low_ratio_sources().items())


def test_documented_figure_from_the_formula():
    """docs/plan.md's 3972.50 B per full token for V4.1-Flash (ratio 0.1) follows from 2 x r0, 18 x r2, 20 x r1."""
    assert V41.layer_counts() == {0: 2, 1: 20, 2: 18}
    assert expected_bytes_per_full_token(V41) == Fraction("3972.5")


@pytest.mark.parametrize("dtype", ["fp8", "bf16", "fp4"])
def test_configurator_budget_equals_the_real_pools_allocation(ext_active, monkeypatch, dtype):
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", dtype)
    extra = {"enable_deepseek_v4_fp4_indexer": True} if dtype == "fp4" else {}
    with sized_pool(model=V41, budget_bytes=BUDGET, **RATIO_MODE, **extra) as (configurator, pool_config, pool):
        full = pool_config.full_max_total_num_tokens
        sources = V41.low_ratio_sources()
        coefficient = Fraction(configurator.bytes_per_full_token).limit_denominator(10**6)
        assert coefficient == expected_bytes_per_full_token(V41)
        swa = Fraction(1, 10) * kv_bytes_per_slot(0) * V41.num_hidden_layers
        # What SGLang budgets for the low-ratio pools (coefficient + reserved pages) is what they allocate.
        budgeted = (coefficient - swa) * full
        budgeted += Fraction(configurator._get_low_ratio_kv_padding_bytes(full)).limit_denominator(10**6)
        allocated = {r: allocated_low_ratio_bytes(pool, r) for r in sources}
        assert sum(allocated.values()) == budgeted
        for ratio, layers in sources.items():
            assert allocated[ratio] == low_ratio_allocation(full, ratio, len(layers))
            index_pool = pool.index_pools[ratio]
            # fp4 whatever the dtype: SGLang builds them with force_fp4=True; bf16 must not reach them.
            assert index_pool.use_fp4_indexer and not index_k.stores_bf16_index_k(index_pool)
            assert {b.shape[1] for b in index_pool.contiguous_page_row_buffers()} == {INDEX_PAGE * FP4_BYTES}
        assert 4 not in pool.index_pools
        report = pool_patch.check_index_k_budget(pool)
        assert report.endswith("ratio-1/2 fp4 index-K r1: 1 x 68 B per slot, r2: 3 x 68 B per slot == budget")


def test_self_check_refuses_low_ratio_pools_wider_than_budgeted(ext_active, monkeypatch):
    """A ratio-1/2 index-K row other than the budgeted fp4 one (bf16 leaking in, a layer count off) is refused."""
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", "fp8")
    with sized_pool(model=V41, budget_bytes=BUDGET, **RATIO_MODE) as (_, _, pool):
        budget = index_k_budget.last_budget()
        assert budget.low_ratio_index_bytes == FP4_BYTES
        assert dict(budget.low_ratio_index_layers) == {1: 1, 2: 3}
        for wrong in (
            dataclasses.replace(budget, low_ratio_index_bytes=2 * 128),
            dataclasses.replace(budget, low_ratio_index_layers=((1, 1), (2, 2))),
        ):
            index_k_budget.record(wrong)
            with pytest.raises(errors.IndexKSizingError, match=r"allocated r1: 1 x 68 B per slot, r2: 3 x 68 B"):
                pool_patch.check_index_k_budget(pool)
        index_k_budget.record(budget)


MIXED = {  # SGLang's model class takes c4 and ratio-1/2 layers together; no released config has both
    "model_type": "deepseek_v41",
    "num_hidden_layers": 8,
    "compress_ratios": [0, 4, 2, 2, 4, 1, 1, 128, 0],
    "kv_source_layer_ids": [2, 5],
}


def test_bf16_changes_only_the_c4_indexer(ext_active, monkeypatch, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(MIXED))
    model = dsv4_model.load_model(str(path))
    results = {}
    for dtype in ("fp8", "bf16"):
        monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", dtype)
        with sized_pool(model=model, budget_bytes=BUDGET, **RATIO_MODE) as (configurator, _, pool):
            rows = {r: {b.shape[1] for b in p.contiguous_page_row_buffers()} for r, p in pool.index_pools.items()}
            results[dtype] = (configurator.bytes_per_full_token, rows, pool.pd_kv_layout())
            assert pool_patch.check_index_k_budget(pool).endswith(" == budget")
    (fp8_bytes, fp8_rows, fp8_layout), (bf16_bytes, bf16_rows, bf16_layout) = results["fp8"], results["bf16"]
    assert fp8_rows[4] == {64 * 132} and bf16_rows[4] == {64 * 256}
    assert fp8_rows[1] == bf16_rows[1] == fp8_rows[2] == bf16_rows[2] == {INDEX_PAGE * FP4_BYTES}
    assert bf16_bytes - fp8_bytes == MIXED["compress_ratios"][:8].count(4) * (256 - 132) / 4
    assert bf16_layout == f"{fp8_layout},c4idx:bf16"
