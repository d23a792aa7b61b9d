"""Index-K sizing: SGLang's real DSV4 configurator and pool agree byte for byte.

The expected bytes per full token are derived here from the layer counts and the
per-layer formula of the DSV4 layout (docs/patch-point-map.md, "Sizing"), not copied from the code under test.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from sglang_dsv4_ext import errors
from sglang_dsv4_ext.runtime.hooks import pool as pool_patch
from sglang_dsv4_ext.runtime.index_k import dtype as index_k
from sglang_dsv4_ext.tools.sglang_cpu import dsv4_model
from tests.support.dsv4_pools import sized_pool

MODEL = dsv4_model.load_model()
QK_NOPE, QK_ROPE, INDEX_DIM = MODEL.qk_nope_head_dim, MODEL.qk_rope_head_dim, MODEL.index_head_dim
ATTN_HEAD_DIM = QK_NOPE + QK_ROPE  # 512
PAGE = 256

# What each dtype stores per index-K token, from the layouts (values + scales).
INDEX_BYTES = {
    "fp8": INDEX_DIM * 1 + (INDEX_DIM // 128) * 4,  # e4m3 values + one fp32 scale per 128 values
    "bf16": INDEX_DIM * 2,  # 2 B per value, no scale
    "fp4": INDEX_DIM // 2 + INDEX_DIM // 32,  # e2m1 values + one ue8m0 byte per 32 values
}

MODES = {
    # name: (sized_pool kwargs, swa ratio in the coefficient, c4 ring size, spec inflation)
    "ratio": (dict(swa_full_tokens_ratio=0.1, _swa_full_tokens_ratio_explicitly_set=True), 0.1, 8, False),
    "mtp": (
        dict(swa_full_tokens_ratio=0.1, _swa_full_tokens_ratio_explicitly_set=True, speculative="EAGLE"),
        0.1,
        16,
        True,
    ),
    "cap": (dict(chunked_prefill_size=1024, swa_prefix_tails=0, budget_bytes=512 << 20), 0.0, 8, False),
    "pp_stage_mid": (
        dict(swa_full_tokens_ratio=0.1, _swa_full_tokens_ratio_explicitly_set=True, start_layer=21),
        0.1,
        8,
        False,
    ),
}


def paged_kv_bytes_per_token(ratio: int) -> Fraction:
    """V4 layout: P slots of 576 value bytes (fp8 nope + bf16 rope) + 8 scale bytes, rounded up to 576-B units."""
    value_bytes = QK_NOPE + 2 * QK_ROPE  # 576
    slot_bytes = value_bytes + 8  # 584
    slots_per_page = PAGE // ratio if ratio else PAGE
    page_bytes = -(-(slots_per_page * slot_bytes) // value_bytes) * value_bytes
    return Fraction(page_bytes, slots_per_page)


def expected_bytes_per_full_token(
    dtype: str, *, swa_ratio: float, ring: int, spec: bool, start: int = 0, end: int = MODEL.num_hidden_layers
) -> Fraction:
    stage = MODEL.compress_ratios[start:end]
    n_c4, n_c128 = stage.count(4), stage.count(128)
    # SWA: main KV of every layer + fp32 c4 compress and indexer-compress state priced per SWA slot.
    swa = (
        paged_kv_bytes_per_token(0) * len(stage)
        + Fraction(ring, PAGE) * (4 * ATTN_HEAD_DIM * 4 + 4 * INDEX_DIM * 4) * n_c4
    )
    c4 = paged_kv_bytes_per_token(4) / 4 + Fraction(INDEX_BYTES[dtype], 4)
    c128 = paged_kv_bytes_per_token(128) / 128
    total = Fraction(swa_ratio).limit_denominator(1000) * swa + c4 * n_c4 + c128 * n_c128
    if spec:
        total *= Fraction(len(stage) + 1, len(stage))  # one MTP draft layer over the target layers
    return total


def test_flash_numbers_from_the_formula():
    """The issue's figures for V4-Flash (ratio 0.1, no MTP) follow from 2 x r0, 21 x r4, 20 x r128."""
    assert MODEL.layer_counts() == {0: 2, 4: 21, 128: 20}
    assert expected_bytes_per_full_token("fp8", swa_ratio=0.1, ring=8, spec=False) == Fraction("7086.75")
    assert expected_bytes_per_full_token("bf16", swa_ratio=0.1, ring=8, spec=False) == Fraction("7737.75")


@pytest.mark.parametrize("dtype", ["fp8", "bf16", "fp4"])
@pytest.mark.parametrize("mode", list(MODES))
def test_configurator_budget_and_pool_allocation_agree(ext_active, monkeypatch, mode, dtype):
    kwargs, swa_ratio, ring, spec = MODES[mode]
    kwargs = dict(kwargs)
    start = kwargs.get("start_layer", 0)
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", dtype)
    if dtype == "fp4":
        kwargs["enable_deepseek_v4_fp4_indexer"] = True
    with sized_pool(**kwargs) as (configurator, pool_config, pool):
        expected = expected_bytes_per_full_token(dtype, swa_ratio=swa_ratio, ring=ring, spec=spec, start=start)
        assert Fraction(configurator.bytes_per_full_token).limit_denominator(10**6) == expected
        assert configurator.indexer_bytes_per_token == INDEX_BYTES[dtype]

        index_pool = pool.index_pools[4]
        buffers = index_pool.contiguous_page_row_buffers()
        n_c4 = MODEL.compress_ratios[start : MODEL.num_hidden_layers].count(4)
        assert len(buffers) == n_c4  # one 2-D buffer per c4 layer (PD and HiCache rely on it)
        assert all(b.dim() == 2 and b.shape[1] == 64 * INDEX_BYTES[dtype] for b in buffers)
        # Allocation per full token, page rounding accounted: bytes over (pages x 256 tokens).
        allocated = sum(b.nbytes for b in buffers)
        pages = buffers[0].shape[0]
        budget_per_token = Fraction(INDEX_BYTES[dtype] * n_c4, 4)
        assert Fraction(allocated, pages * PAGE) - budget_per_token == 0
        if dtype == "bf16":
            assert index_k.stores_bf16_index_k(index_pool)
        else:
            assert not index_k.stores_bf16_index_k(index_pool)


def test_regression_fork_sizing_gap_replayed(ext_active, monkeypatch):
    """bf16 storage on, configurator sizing unpatched (the fork) -> the self-check fails with the 124 B / 4 gap."""
    import sglang.srt.mem_cache.deepseek_v4_memory_pool as mp
    import sglang.srt.model_executor.pool_configurator as pc

    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", "bf16")
    patched = mp.get_dsv4_indexer_bytes_per_token
    assert patched.__wrapped__ is not None
    stock = patched.__wrapped__
    # Disable only the sizing patch: both bindings (pool module, configurator's from-import) go stock.
    monkeypatch.setattr(mp, "get_dsv4_indexer_bytes_per_token", stock)
    monkeypatch.setattr(pc, "get_dsv4_indexer_bytes_per_token", stock)
    with pytest.raises(errors.IndexKSizingError) as excinfo:
        with sized_pool(swa_full_tokens_ratio=0.1, _swa_full_tokens_ratio_explicitly_set=True):
            pass
    message = str(excinfo.value)
    n_c4 = MODEL.layer_counts()[4]
    allocated, budgeted = n_c4 * INDEX_BYTES["bf16"] / 4, n_c4 * INDEX_BYTES["fp8"] / 4
    assert f"gap {allocated - budgeted:+.2f} B per full token" in message
    assert f"allocated {allocated:.2f} B" in message and f"budgeted {budgeted:.2f} B" in message

    # With the sizing patch back on, the same build passes the self-check.
    monkeypatch.setattr(mp, "get_dsv4_indexer_bytes_per_token", patched)
    monkeypatch.setattr(pc, "get_dsv4_indexer_bytes_per_token", patched)
    with sized_pool(swa_full_tokens_ratio=0.1, _swa_full_tokens_ratio_explicitly_set=True) as (_, _, pool):
        assert pool_patch.check_index_k_budget(pool).endswith("== budget")


def test_stock_fp4_budget_on_cuda_disagrees_with_allocation(ext_active, monkeypatch):
    """Stock SGLang on CUDA budgets fp4 at 132 B while allocating 68 B; the self-check sees it, the fix removes it."""
    import sglang.srt.model_executor.pool_configurator as pc

    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", "fp4")
    monkeypatch.setattr(pc, "get_dsv4_indexer_bytes_per_token", pc.get_dsv4_indexer_bytes_per_token.__wrapped__)
    budgeted_as_fp8 = MODEL.layer_counts()[4] * INDEX_BYTES["fp8"] / 4
    with pytest.raises(errors.IndexKSizingError, match=rf"budgeted {budgeted_as_fp8:.2f} B"):
        with sized_pool(
            enable_deepseek_v4_fp4_indexer=True, swa_full_tokens_ratio=0.1, _swa_full_tokens_ratio_explicitly_set=True
        ):
            pass


def test_one_source_of_truth_for_bytes_per_token(ext_active, monkeypatch):
    import sglang.srt.mem_cache.deepseek_v4_memory_pool as mp
    import sglang.srt.model_executor.pool_configurator as pc

    # The configurator's from-import alias is the same patched object as the pool module's.
    assert pc.get_dsv4_indexer_bytes_per_token is mp.get_dsv4_indexer_bytes_per_token
    for dtype in ("fp8", "bf16"):
        monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", dtype)
        assert mp.get_dsv4_indexer_bytes_per_token(INDEX_DIM, False) == INDEX_BYTES[dtype]
        # The configurator's keyword call for the V4.1 low-ratio pools stays fp4.
        assert mp.get_dsv4_indexer_bytes_per_token(INDEX_DIM, use_fp4_indexer=True) == INDEX_BYTES["fp4"]
        assert index_k.index_k_bytes_per_token(dtype, INDEX_DIM) == INDEX_BYTES[dtype]


def test_bf16_with_sglang_fp4_flag_is_a_clear_error(ext_active, monkeypatch):
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", "bf16")
    with pytest.raises(ValueError, match="contradicts --enable-deepseek-v4-fp4-indexer"):
        with sized_pool(enable_deepseek_v4_fp4_indexer=True, build=False):
            pass


def test_fp4_without_sglang_flag_is_a_clear_error(ext_active, monkeypatch):
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", "fp4")
    with pytest.raises(ValueError, match="also pass --enable-deepseek-v4-fp4-indexer"):
        with sized_pool(build=False):
            pass
