"""Index-K host regions are page-aligned for every dtype: the 584-B token-granular kernel is unreachable.

SGLang's real pools (fp8, fp4 with ``--enable-deepseek-v4-fp4-indexer``, bf16), its real
``_dsv4_indexer_regions`` and its real ``DeepSeekV4PagedHostPool`` on CPU. The one stand-in is
``transfer_cache_dsv4_mla`` itself: a CUDA JIT kernel that cannot run here, replaced by a recorder
so the test sees whether SGLang's host pool *reaches* it. With the hook unwrapped (``__wrapped__``,
stock SGLang) the fp8 and fp4 regions are token-granular and the recorder is called with their
132-B / 68-B rows; with the hook, SGLang refuses the transfer before any kernel.
"""

from __future__ import annotations

import pytest
import torch

from tests.support.dsv4_pools import sized_pool

RATIO_MODE = dict(swa_full_tokens_ratio=0.1, _swa_full_tokens_ratio_explicitly_set=True)
# One page row = 64 compressed slots; bytes per slot from each layout (values + scales).
ROW_BYTES = {"fp8": 64 * (128 + 4), "fp4": 64 * (64 + 4), "bf16": 64 * 128 * 2}
UNALIGNED = torch.arange(100, dtype=torch.int64)  # not a multiple of the 256-token page


@pytest.fixture(params=["fp8", "fp4", "bf16"])
def pool_of_dtype(request, ext_active, monkeypatch):
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", request.param)
    extra = {"enable_deepseek_v4_fp4_indexer": True} if request.param == "fp4" else {}
    with sized_pool(**RATIO_MODE, **extra) as (_, _, pool):
        yield request.param, pool


@pytest.fixture
def kernel_calls(monkeypatch):
    import sglang.srt.mem_cache.memory_pool_host as mph

    calls = []
    monkeypatch.setattr(mph, "transfer_cache_dsv4_mla", lambda **kw: calls.append(kw), raising=False)
    return calls


def _host_pool(region):
    from sglang.srt.mem_cache.memory_pool_host import DeepSeekV4PagedHostPool

    return DeepSeekV4PagedHostPool(
        pool_name=str(region.name),
        device_buffers=region.device_buffers,
        item_bytes=region.item_bytes,
        num_host_pages=4,
        slot_page_size=region.slot_page_size,
        layout="layer_first",
        pin_memory=False,
        page_aligned_only=region.page_aligned_only,
    )


def _try_token_granular(host):
    """Both token-granular entry points; returns the errors SGLang raised (None: it went on to the kernel)."""
    errors = []
    # SGLang 0.5.23's token backup; 0.5.22 has none, its whole-layer backup takes the same token-granular branch.
    backup = (
        (lambda: host.backup_tokens_from_device_all_layer(UNALIGNED, UNALIGNED))
        if hasattr(host, "backup_tokens_from_device_all_layer")
        else (lambda: host.backup_from_device_all_layer(None, UNALIGNED, UNALIGNED, "kernel"))
    )
    for call in (backup, lambda: host.load_to_device_per_layer(None, UNALIGNED, UNALIGNED, 0, "kernel")):
        try:
            call()
            errors.append(None)
        except ValueError as exc:
            errors.append(str(exc))
    return errors


def test_token_granular_kernel_unreachable_for_every_dtype(pool_of_dtype, kernel_calls):
    from sglang.srt.mem_cache.hybrid_cache import hybrid_pool_assembler as asm

    dtype, pool = pool_of_dtype
    regions = asm._dsv4_indexer_regions(pool, 256)
    assert [r.item_bytes for r in regions] == [ROW_BYTES[dtype]]
    assert all(r.page_aligned_only for r in regions)
    errors = _try_token_granular(_host_pool(regions[0]))
    assert all(e and "page-aligned" in e for e in errors), errors
    assert kernel_calls == []


@pytest.mark.parametrize("pool_of_dtype", ["fp8", "fp4"], indirect=True)
def test_stock_regions_reach_the_584_byte_kernel(pool_of_dtype, kernel_calls):
    """Regression replay: without the hook, SGLang sends 132-B / 68-B rows to the main-KV kernel."""
    from sglang.srt.mem_cache.hybrid_cache import hybrid_pool_assembler as asm

    stock = asm._dsv4_indexer_regions.__wrapped__(pool_of_dtype[1], 256)
    assert [r.page_aligned_only for r in stock] == [False]
    assert _try_token_granular(_host_pool(stock[0])) == [None, None]
    assert len(kernel_calls) == 2  # both directions reached transfer_cache_dsv4_mla
