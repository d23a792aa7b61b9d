"""Integrity after host-page reuse, through SGLang's real DeepSeek-V4 HiCache stack on CPU.

The c4 indexer host mirror borrows the page indices of the KV anchor (``hybrid_pool_assembler`` pairs
``DEEPSEEK_V4_C4_INDEXER`` with ``KV``), and SGLang frees, reallocates and fills those pages through the
anchor alone: a checksum recorded for a page's previous occupant must not meet the page's new data. Each
test moves the pages with SGLang's own code: the controller's write (backup) and load, host eviction
through ``HostPoolGroup.free`` (what ``FullComponent.free_host_values`` calls) and the controller's
``evict_host``, the controller's prefetch buffers filled by SGLang's file L3 backend (``_page_transfer``,
the prefetch IO thread's body), the anchor allocation of the decode side's host receive, and the reader
``C4Indexer.forward``. What is stubbed is said in :mod:`tests.support.dsv4_hicache_stack`.
"""

from __future__ import annotations

import pytest
import torch

from kernels_sm120 import index_k_checksum as ck
from sglang_dsv4_ext.runtime import compat
from sglang_dsv4_ext.runtime.hooks import integrity
from sglang_dsv4_ext.runtime.index_k import integrity as index_k_integrity
from tests.support import dsv4_hicache_stack as hs

LAYERS = 2  # c4 layers of the pool (gate_doubles.RATIOS)
_REUSE_HOOKS = (compat.INTEGRITY_HOST_POOL_GROUP_INIT, compat.INTEGRITY_ANCHOR_ALLOC, compat.INTEGRITY_ANCHOR_FREE)


@pytest.fixture
def integrity_full(ext_active, monkeypatch):
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", "fp8")
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_GATE", "off")
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_INTEGRITY", "full")


def _mismatch_lines(caplog):
    return [r.getMessage() for r in caplog.records if "integrity mismatch" in r.getMessage()]


def _two_backed_up_prefixes(stack):
    """Prefix A in host pages 0, 1 and prefix B in 2, 3 (the whole host pool), backed up by the controller."""
    host_a = stack.controller.write(hs.tokens([1, 2]), node_id=1, extra_pools=hs.c4_sidecar())
    host_b = stack.controller.write(hs.tokens([3, 4]), node_id=2, extra_pools=hs.c4_sidecar())
    assert hs.pages_of(host_a) == [0, 1] and hs.pages_of(host_b) == [2, 3]
    return host_a, host_b


def _refill_from_l3(stack):
    """B goes to L3; A and B leave the host; B is prefetched back: its buffers are A's old pages."""
    from sglang.srt.mem_cache.base_prefix_cache import CacheRequestHandle
    from sglang.srt.mem_cache.hicache_storage import PoolName
    from sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller import PrefetchOperation, StorageOperation

    host_a, host_b = _two_backed_up_prefixes(stack)
    b_rows = hs.c4_rows(stack.pool, hs.tokens([3, 4]))
    stored = StorageOperation(
        host_b, list(range(2 * hs.PAGE)), hash_value=["b0", "b1"], pool_transfers=hs.c4_sidecar()
    )  # what write_storage queues
    stack.controller._page_backup(stored)  # the backup thread's body: B's pages to the file backend
    for host in (host_a, host_b):  # host eviction, as FullComponent.free_host_values does it
        stack.group.free(host, pool=PoolName.KV)
    prefetch = PrefetchOperation(
        CacheRequestHandle("req-b", 0), list(range(2 * hs.PAGE)), pool_transfers=hs.c4_sidecar()
    )
    prefetch.hash_value = ["b0", "b1"]
    prefetch.host_indices = stack.controller.alloc_prefetch_host_buffers(prefetch, 2 * hs.PAGE)
    assert hs.pages_of(prefetch.host_indices) == [0, 1]  # A's pages, reused for B
    assert stack.controller._page_transfer(prefetch) is None  # the prefetch IO thread's body: L3 -> host
    return prefetch.host_indices, b_rows


def _l3_refill_loaded_and_read(monkeypatch, l3_dir, caplog):
    """B refilled from L3 into A's old pages, loaded (intact: the device rows are B's) and read; the tracker."""
    stack = hs.build(monkeypatch, l3_dir=l3_dir)
    tracker = integrity.tracker_of(stack.c4_host)
    host, b_rows = _refill_from_l3(stack)
    device = hs.load(stack, host)
    assert all(torch.equal(got, want) for got, want in zip(hs.c4_rows(stack.pool, device), b_rows))
    with caplog.at_level("ERROR", logger="sglang_dsv4_ext.integrity"):
        hs.read_c4_layers(stack.pool)
        index_k_integrity.report(tracker.drain())
    return tracker


def test_a_page_refilled_from_l3_is_not_checked_against_its_previous_occupant(
    integrity_full, monkeypatch, tmp_path, caplog
):
    tracker = _l3_refill_loaded_and_read(monkeypatch, str(tmp_path / "l3"), caplog)
    assert _mismatch_lines(caplog) == [] and tracker.mismatches == 0
    # B's pages came from L3: nothing recorded them, so they are counted as loaded but not checked
    assert tracker.pages_checked == 0 and tracker.unchecked[index_k_integrity.NO_CHECKSUM] == 2 * LAYERS


def test_without_the_reuse_hooks_the_intact_l3_page_is_reported_as_a_mismatch(
    integrity_full, monkeypatch, tmp_path, caplog
):
    """The false positive of 0.3.0, reproduced: the mirror's checksums of A survive A's eviction."""
    for target in _REUSE_HOOKS:
        owner, name, current = compat.resolve(target.path)
        monkeypatch.setattr(owner, name, compat.unwrap_to_original(current))
    tracker = _l3_refill_loaded_and_read(monkeypatch, str(tmp_path / "l3"), caplog)
    assert tracker.mismatches == 2 * LAYERS and len(_mismatch_lines(caplog)) == LAYERS  # both pages, every layer


def test_host_receive_pages_are_not_checked_against_their_previous_occupant(integrity_full, monkeypatch, caplog):
    """The decode side's host receive allocates from the KV anchor (``_pre_alloc_host``: ``host_pool.alloc``) and
    the transfer engine writes the received rows into the mirror's buffers."""
    from sglang.srt.mem_cache.hicache_storage import PoolName

    stack = hs.build(monkeypatch)
    with pytest.raises(ValueError, match="Host receive requires dense NHD MHA"):
        # SGLang 0.5.23 itself refuses host receive for DeepSeek-V4 at decode start (kept honest here: the
        # allocation below is the decode side's own, ready for the day SGLang lifts this)
        stack.group.get_contiguous_buf_infos({PoolName.KV, PoolName.DEEPSEEK_V4_C4_INDEXER})
    tracker = integrity.tracker_of(stack.c4_host)
    host_a, _ = _two_backed_up_prefixes(stack)
    stack.controller.evict_host(host_a)  # the controller's own host eviction
    received = stack.anchor.alloc(2 * hs.PAGE)  # as DecodePreallocQueue._pre_alloc_host
    assert hs.pages_of(received) == [0, 1]
    g = torch.Generator().manual_seed(7)
    for layer in range(LAYERS):  # what the KV transfer writes into the mirror's host buffers
        stack.c4_host.kv_buffer[layer][[0, 1]] = torch.randint(
            0, 256, (2, stack.c4_host.item_bytes), dtype=torch.uint8, generator=g
        )
    hs.load(stack, received)
    with caplog.at_level("ERROR", logger="sglang_dsv4_ext.integrity"):
        hs.read_c4_layers(stack.pool)
        index_k_integrity.report(tracker.drain())
    assert _mismatch_lines(caplog) == [] and tracker.mismatches == 0
    assert tracker.unchecked[index_k_integrity.NO_CHECKSUM] == 2 * LAYERS


def test_evicted_pages_forget_and_a_reset_forgets_everything(integrity_full, monkeypatch):
    stack = hs.build(monkeypatch)
    tracker = integrity.tracker_of(stack.c4_host)
    host_a, _ = _two_backed_up_prefixes(stack)
    assert (tracker.table != ck.NO_MISMATCH).all()  # all four pages recorded, both layers
    stack.controller.evict_host(host_a)
    assert (tracker.table[:, :2] == ck.NO_MISMATCH).all() and (tracker.table[:, 2:] != ck.NO_MISMATCH).all()
    stack.group.clear()  # what HiCacheController.reset does to its host pools
    assert (tracker.table == ck.NO_MISMATCH).all()


def test_a_corrupted_host_page_is_still_caught_on_the_real_stack(integrity_full, monkeypatch, caplog):
    stack = hs.build(monkeypatch)
    tracker = integrity.tracker_of(stack.c4_host)
    host_a, _ = _two_backed_up_prefixes(stack)
    stack.c4_host.kv_buffer[1][1, 40] ^= 0x08  # one bit of host page 1, c4 layer 1
    device = hs.load(stack, host_a)
    with caplog.at_level("ERROR", logger="sglang_dsv4_ext.integrity"):
        hs.read_c4_layers(stack.pool)
        index_k_integrity.report(tracker.drain())
    page = hs.pages_of(device)[1]
    assert _mismatch_lines(caplog) == [
        f"index-K integrity mismatch (load): 1 page(s); first at layer 1, page {page}, request(s) req-7"
    ]
    assert tracker.pages_checked == 2 * LAYERS and tracker.unchecked[index_k_integrity.NO_CHECKSUM] == 0


def test_pages_the_anchor_hands_out_again_are_forgotten_however_they_came_back(integrity_full, monkeypatch):
    """The anchor's own ``clear`` puts every page back on its free list without a ``free`` call: a new owner's
    allocation is where the mirror forgets, whatever path returned the page."""
    stack = hs.build(monkeypatch)
    tracker = integrity.tracker_of(stack.c4_host)
    _two_backed_up_prefixes(stack)
    stack.anchor.clear()
    reused = stack.anchor.alloc(2 * hs.PAGE)
    assert hs.pages_of(reused) == [0, 1]
    assert (tracker.table[:, :2] == ck.NO_MISMATCH).all() and (tracker.table[:, 2:] != ck.NO_MISMATCH).all()
