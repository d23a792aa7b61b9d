"""bf16 index-K everywhere SGLang copies or ships it: HiCache host pools, L3 keys, PD, writers.

All against SGLang 0.5.23's real classes on CPU. Transfers themselves are CUDA kernels
(``sgl_kernel.kvcacheio``) and cannot run here; what is tested is the geometry the host
pool derives and SGLang's own refusal of token-granular transfers before any kernel.
"""

from __future__ import annotations

import pytest
import torch

from sglang_dsv4_ext import errors
from sglang_dsv4_ext.runtime import activation, compat
from sglang_dsv4_ext.runtime.hooks import hicache as hicache_patch
from sglang_dsv4_ext.runtime.index_k import dtype as index_k
from tests.support.dsv4_pools import BF16_POOL_LAYOUT_MISUSES, sized_pool
from tests.support.pd_handshake import decode_side_check
from tests.support.releases import only_on

_NO_PD_LAYOUT_0_5_22 = (
    "0.5.22 has no pd_kv_layout: bf16 PD is refused there at each role's KV manager "
    "(tests/unit/hooks/test_release_paths.py)"
)
RATIO_MODE = dict(swa_full_tokens_ratio=0.1, _swa_full_tokens_ratio_explicitly_set=True)
# One page row = 64 compressed slots x bytes per index-K token (the formula under test lives in index_k).
BF16_ROW = 64 * index_k.index_k_bytes_per_token("bf16", 128)
FP8_ROW = 64 * index_k.index_k_bytes_per_token("fp8", 128)


@pytest.fixture
def bf16_pool(ext_active, monkeypatch):
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", "bf16")
    with sized_pool(**RATIO_MODE) as (_, _, pool):
        yield pool


@pytest.fixture
def fp8_pool(ext_active, monkeypatch):
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", "fp8")
    with sized_pool(**RATIO_MODE) as (_, _, pool):
        yield pool


def _indexer_host_pool(kv_pool, layout: str, host_pages: int = 4):
    from sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler import _dsv4_indexer_regions
    from sglang.srt.mem_cache.memory_pool_host import DeepSeekV4PagedHostPool

    (region,) = _dsv4_indexer_regions(kv_pool, 256)
    host = DeepSeekV4PagedHostPool(
        pool_name=str(region.name),
        device_buffers=region.device_buffers,
        item_bytes=region.item_bytes,
        num_host_pages=host_pages,
        slot_page_size=region.slot_page_size,
        layout=layout,
        pin_memory=False,
        page_aligned_only=region.page_aligned_only,
    )
    return region, host


@pytest.mark.parametrize("layout", ["layer_first", "page_first"])
def test_hicache_host_pool_geometry_follows_bf16_rows(bf16_pool, layout):
    region, host = _indexer_host_pool(bf16_pool, layout)
    assert region.item_bytes == BF16_ROW
    assert region.page_aligned_only is True  # the 584-B token-granular kernel must never see these rows
    layers = len(bf16_pool.index_pools[4].contiguous_page_row_buffers())
    assert host.layer_num == layers == 21
    if layout == "layer_first":
        assert all(tuple(buf.shape) == (4, BF16_ROW) for buf in host.kv_buffer)
        # PD host-receive path: host rows have exactly the device row width. (SGLang's
        # get_contiguous_buf_infos indexes per layer, so it only serves layer_first.)
        _, _, item_lens = host.get_contiguous_buf_infos()
        assert set(item_lens) == {BF16_ROW}
    else:
        assert tuple(host.kv_buffer.shape) == (4, layers, BF16_ROW)


def test_fp8_region_keeps_stock_geometry(fp8_pool):
    region, host = _indexer_host_pool(fp8_pool, "layer_first")
    assert region.item_bytes == FP8_ROW
    assert region.page_aligned_only is True  # whole pages only for every dtype (test_index_k_page_aligned.py)


@only_on(
    "0.5.23",
    "0.5.22 has no backup_tokens_from_device_all_layer; its whole-layer backup's refusal is tested in "
    "tests/unit/hooks/test_index_k_page_aligned.py",
)
def test_token_granular_index_k_transfers_refused_for_bf16(bf16_pool):
    _, host = _indexer_host_pool(bf16_pool, "layer_first")
    partial = torch.arange(100, dtype=torch.int64)  # not a multiple of the 256-token page
    with pytest.raises(ValueError, match="expects page-aligned indices"):
        host.backup_tokens_from_device_all_layer(partial, partial)
    with pytest.raises(ValueError, match="expects page-aligned indices"):
        host.load_to_device_per_layer(None, partial, partial, 0, "kernel")


def test_l3_storage_keys_carry_the_index_k_dtype(bf16_pool, fp8_pool):
    """SGLang names L3 pages by storage_model_name(model, anchor); the bf16 anchor gets a dtype tag."""
    from sglang.srt.managers.cache_controller import storage_model_name
    from sglang.srt.mem_cache.memory_pool_host import LogicalHostPool

    def anchor_built_for(kvcache):
        # Stand-in for build_deepseek_v4_hicache_stack's body (it needs a gloo group and CUDA
        # streams): the real hooked entry point runs it, and it builds the anchor as SGLang does.
        import sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler as asm

        built = {}

        def body(**kwargs):
            built["anchor"] = LogicalHostPool(4 * 256, 256, layout="layer_first")

        hooked = asm.build_deepseek_v4_hicache_stack
        hicache_patch._around_build_stack(body, kvcache=kvcache, params=None)
        assert activation.carries_hook(hooked, hicache_patch._around_build_stack)
        return built["anchor"]

    bf16_key = storage_model_name("DeepSeek-V4-Flash", anchor_built_for(bf16_pool))
    fp8_key = storage_model_name("DeepSeek-V4-Flash", anchor_built_for(fp8_pool))
    assert fp8_key == "DeepSeek-V4-Flash"  # stock keys unchanged for fp8
    assert bf16_key == f"DeepSeek-V4-Flash-{hicache_patch.L3_FORMAT_TAG}"
    assert bf16_key != fp8_key
    # Outside a DSV4 bf16 stack build, anchors stay untagged.
    assert LogicalHostPool(256, 256).storage_format_tag is None


def _decode_side_check(prefill_layout: str, decode_layout: str):
    """SGLang's real decode-side handshake check (tests/support/pd_handshake.py) with these KV layouts."""
    return decode_side_check({"kv_layout": prefill_layout}, {"kv_layout": decode_layout})


@only_on("0.5.23", _NO_PD_LAYOUT_0_5_22)
def test_pd_layout_carries_index_k_dtype_and_sglang_refuses_the_pair(bf16_pool, fp8_pool):
    bf16_layout, fp8_layout = bf16_pool.pd_kv_layout(), fp8_pool.pd_kv_layout()
    assert bf16_layout != fp8_layout
    assert fp8_layout == "v4,c4:v4,c128:v4"  # unchanged: an fp8 peer still pairs with stock SGLang
    assert bf16_layout.endswith(",c4idx:bf16")
    with pytest.raises(RuntimeError, match="KV layout mismatch") as excinfo:
        _decode_side_check(prefill_layout=bf16_layout, decode_layout=fp8_layout)
    assert bf16_layout in str(excinfo.value) and fp8_layout in str(excinfo.value)
    with pytest.raises(RuntimeError, match="KV layout mismatch"):
        _decode_side_check(prefill_layout=fp8_layout, decode_layout=bf16_layout)


@only_on("0.5.23", _NO_PD_LAYOUT_0_5_22)
def test_stock_pd_layout_lets_a_bf16_fp8_pair_through(bf16_pool, fp8_pool):
    """The regression the PD hook fixes: with SGLang's own pd_kv_layout the strings match, so the
    handshake accepts a bf16 prefill with an fp8 decode whose index-K items differ in size."""
    stock_layout = compat.unwrap_to_original(type(bf16_pool).pd_kv_layout)
    bf16_stock, fp8_stock = stock_layout(bf16_pool), stock_layout(fp8_pool)
    assert bf16_stock == fp8_stock
    assert _decode_side_check(prefill_layout=bf16_stock, decode_layout=fp8_stock) is True  # accepted: the hazard
    bf16_items = bf16_pool.get_contiguous_buf_infos()[2][21:42]
    fp8_items = fp8_pool.get_contiguous_buf_infos()[2][21:42]
    assert set(bf16_items) == {BF16_ROW} and set(fp8_items) == {FP8_ROW}


def test_pd_buffer_infos_use_bf16_item_length(bf16_pool):
    ptrs, lens, item_lens = bf16_pool.get_contiguous_buf_infos()
    index_buffers = bf16_pool.index_pools[4].contiguous_page_row_buffers()
    # Order is [C4 KV x21, C4 indexer x21, C128 KV x20]; the indexer items are one bf16 page row.
    assert item_lens[21:42] == [BF16_ROW] * 21
    assert lens[21:42] == [b.nbytes for b in index_buffers]


def test_bf16_writer_stores_rows_at_their_slots(bf16_pool):
    layer = 2  # first c4 layer of V4-Flash
    rows = torch.randn(5, 128).to(torch.bfloat16)
    slots = torch.tensor([0, 63, 64, 200, -1])  # page 0 first/last, page 1 first, page 3, padding
    bf16_pool.set_index_k_fused(layer, slots, rows)
    pages = index_k.bf16_page_view(bf16_pool.get_index_k_with_scale_buffer(layer), 64, 128)
    for row, slot in zip(rows[:4], slots[:4].tolist()):
        assert torch.equal(pages[slot // 64, slot % 64], row)
    assert int((pages != 0).any(dim=-1).sum()) == 4  # the padding slot wrote nothing


@pytest.mark.parametrize("call", BF16_POOL_LAYOUT_MISUSES)
def test_fp8_fp4_layout_paths_refuse_a_bf16_pool(bf16_pool, call):
    with pytest.raises(errors.DSV4IndexKLayoutError, match="bf16 index-K"):
        call(bf16_pool)
