"""Index-K integrity mode: per-page checksums recorded at backup, verified where the pages are read.

Why: a stale or corrupted index-K page does not crash anything; it changes which 512 tokens the
sparse attention sees, and the symptom is a wrong tool call several turns later. Operators need
to tell "index-K was intact where it was read" from "it was not" in one run on their own cluster,
without a debugger (``SGLANG_DSV4_INDEX_K_INTEGRITY=off|sample|full``, default off).

How: shared logic in :mod:`sglang_dsv4_ext.runtime.index_k.integrity`, kernels in
``kernels_sm120/index_k_checksum.py``:
  * AFTER ``DeepSeekV4PagedHostPool.__init__``: HiCache's c4 indexer host mirror gets a checksum
    table (one int64 per layer and host page) when the mode is on (decided at pool creation).
  * AFTER ``backup_from_device_all_layer``: the checksum of every device page backed up is stored
    under its host page, on the backup's stream. Token-granular backups forget the host page.
    Index tensors on the host (``--hicache-io-backend direct``) reach the device through pinned
    memory, non-blocking: no integrity path blocks the host.
  * AFTER ``load_to_device_per_layer``: the loaded rows of that layer become pending; ``sample``
    keeps 8 evenly spaced pages of one layer in four (layers rotating per load, rows shifting per
    sampled load of the layer, so a reloaded prefix is verified at every position), ``full`` all of them.
  * AFTER ``C4Indexer.forward`` (the reader of the layer's index-K, on the reader's stream, right
    after its read was enqueued): one fused kernel verifies the pending pages into a device-side
    mismatch counter and first-bad-page record; the record reaches the host through pinned memory
    and is read on a later call (no host synchronisation). Mismatches are logged once with layer,
    page, request and where, and counted in ``sglang:dsv4_index_k_integrity_mismatches_total``
    (SGLang's Prometheus registry, served by its /metrics). Skipped during CUDA-graph capture.
    Pages checked and pages loaded but not checked (by reason) are counted beside it; all three
    series exist at zero from pool creation, so "checked, nothing found" never reads like "never ran".
    Every series carries a ``launch`` label (this process's launch): counter files an earlier launch left in a
    shared ``PROMETHEUS_MULTIPROC_DIR`` are told apart from the live ones (repro counts the live launch's only).
    A background thread polls each tracker every second, so the last verifications of a run reach the counters
    without waiting for the next load (a scrape cannot: SGLang's HTTP process reads the counter files only).
  * Page reuse: the mirror borrows the page indices of its group's KV anchor (a ``LogicalHostPool``;
    ``hybrid_pool_assembler`` pairs ``DEEPSEEK_V4_C4_INDEXER`` with ``KV``), and SGLang frees,
    reallocates and fills those pages through the anchor only (``FullComponent.free_host_values``,
    ``HostPoolGroup.free``/``alloc``, the controller's prefetch buffers, the decode side's host
    receive), never calling the mirror's own ``free``. AFTER ``HostPoolGroup.__init__`` links the
    mirror to its anchor; AFTER the anchor's ``alloc`` and ``free`` the pages forget their checksum
    in the mirror, so a page refilled from L3 or by a host receive is counted as not checked
    (``no_checksum``) instead of compared with its previous occupant. AFTER ``clear`` of the mirror
    (HiCache reset) every checksum is forgotten.
  * AFTER ``free`` of that host pool: freed host pages forget their checksum.
  * PD: SGLang already carries a per-request KV checksum prefill -> decode in its metadata buffers
    (``--disaggregation-enable-kv-checksum``: adler32 over every transferred region, the c4
    index-K rows included). A BEFORE hook on the decode side's ``_handle_kv_checksum_mismatch``
    counts each mismatch under ``where="pd"`` with its request; that channel carries one digest
    per request, so layer and page are reported as unknown.

Upstream status: not upstream; SGLang has the PD digest but nothing for HiCache loads.
Retire when: SGLang verifies HiCache layer loads itself and exports per-layer PD digests.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any

import torch

from sglang_dsv4_ext.config import IndexKDtype, IntegrityMode, load_config
from sglang_dsv4_ext.runtime import compat
from sglang_dsv4_ext.runtime.index_k import integrity as index_k_integrity

if TYPE_CHECKING:
    from sglang_dsv4_ext.runtime.hooks import Hook, HookContext, ProcessRecord
    from sglang_dsv4_ext.runtime.sglang_types import C4Indexer, ForwardBatch, HostPoolGroup, PagedHostPool, Req

logger = logging.getLogger("sglang_dsv4_ext.integrity")

_TRACKER = "_dsv4_integrity"  # attribute on the host pool and on the device sub-pool it mirrors
_BORROWERS = "_dsv4_integrity_borrowers"  # attribute on an anchor host pool: tracked pools using its page indices


def _pool_names() -> Any:  # SGLang's PoolName enum
    from sglang.srt.mem_cache.hicache_storage import PoolName

    return PoolName


def _c4_indexer_pool_name() -> str:
    return str(_pool_names().DEEPSEEK_V4_C4_INDEXER.value)


def _page_keys(indices: torch.Tensor, page_size: int) -> torch.Tensor:
    """Host page rows of token ``indices``; de-duplicated only on the host (``unique`` of a device tensor syncs)."""
    keys = indices.to(torch.int64) // page_size
    return torch.unique(keys) if keys.device.type == "cpu" else keys


def tracker_of(pool: object) -> index_k_integrity.IntegrityTracker | None:
    return getattr(pool, _TRACKER, None)


def _after_host_pool_init(
    process: ProcessRecord,
    result: None,
    self: PagedHostPool,
    pool_name: object,
    device_buffers: list[torch.Tensor],
    item_bytes: int,
    num_host_pages: int,
    *args: object,
    **kwargs: object,
) -> None:
    mode = load_config().integrity
    if mode == IntegrityMode.OFF or str(getattr(pool_name, "value", pool_name)) != _c4_indexer_pool_name():
        return None
    index_k_integrity.use_launch(process.current_launch())
    split = _scales_in_a_second_region(process.built_index_k_dtype())
    index_k_integrity.use_regions(index_k_integrity.PAYLOAD_ONLY if split else index_k_integrity.WHOLE_PAGE)
    series = index_k_integrity.Series(index_k_integrity.WHERE_LOAD)  # exported at zero from here on
    tracker = index_k_integrity.IntegrityTracker(mode, list(device_buffers), int(num_host_pages), series=series)
    setattr(self, _TRACKER, tracker)
    index_k_integrity.poll_in_background(tracker)
    logger.info(
        "index-K integrity %s: checksums for %d layers x %d host pages%s",
        mode,
        len(device_buffers),
        num_host_pages,
        " (fp4 index-K in AITER's layout: the payload region only; its scale region is not checksummed)"
        if split
        else "",
    )
    return None


def _scales_in_a_second_region(built_index_k_dtype: str) -> bool:
    """fp4 index-K in AITER's layout: SGLang keeps its scales apart (``DEEPSEEK_V4_C4_INDEXER_SCALE``).

    SGLang's ``DeepSeekV4IndexerPool._create_buffer`` splits payload and scale only where
    ``uses_aiter_fp4_layout`` (a ROCm build with the fp4 indexer); elsewhere an fp4 page row holds both (68 B per
    slot), as fp8's holds value and scale, and the one mirror tracked covers the whole row.
    """
    return built_index_k_dtype == IndexKDtype.FP4 and torch.version.hip is not None


def _page_aligned(self: PagedHostPool, host_indices: torch.Tensor, device_indices: torch.Tensor) -> bool:
    size = self.slot_page_size
    return host_indices.numel() % size == 0 and device_indices.numel() % size == 0


def _tracker_for_transfer(
    host_pool: PagedHostPool,
    device_pool: object,
    host_indices: torch.Tensor | None,
    device_indices: torch.Tensor | None,
) -> index_k_integrity.IntegrityTracker | None:
    """The host pool's tracker for a non-empty transfer (also handed to the device pool), else None."""
    tracker = tracker_of(host_pool)
    if tracker is None or host_indices is None or device_indices is None or host_indices.numel() == 0:
        return None
    if device_pool is not None:
        setattr(device_pool, _TRACKER, tracker)
    return tracker


def _after_backup(
    result: None,
    self: PagedHostPool,
    device_pool: object,
    host_indices: torch.Tensor,
    device_indices: torch.Tensor,
    io_backend: str,
) -> None:
    tracker = _tracker_for_transfer(self, device_pool, host_indices, device_indices)
    if tracker is None:
        return None
    if not _page_aligned(self, host_indices, device_indices):
        tracker.forget(_page_keys(host_indices, self.slot_page_size))
        return None
    tracker.record_all_layers(self._to_page_indices(device_indices), self._to_page_indices(host_indices))
    index_k_integrity.report(tracker.poll())
    return None


def _after_load_layer(
    result: None,
    self: PagedHostPool,
    device_pool: object,
    host_indices: torch.Tensor,
    device_indices: torch.Tensor,
    layer_id: int,
    io_backend: str,
    *,
    is_draft: bool = False,
) -> None:
    tracker = _tracker_for_transfer(self, device_pool, host_indices, device_indices)
    if tracker is None:
        return None
    if not _page_aligned(self, host_indices, device_indices):
        return None  # token-granular (HiSparse) loads: no whole page to compare
    if layer_id == 0:
        tracker.begin_load()
    tracker.expect(layer_id, self._to_page_indices(device_indices), self._to_page_indices(host_indices))
    return None


def _after_free(result: object, self: PagedHostPool, indices: torch.Tensor | None) -> None:
    tracker = tracker_of(self)
    if tracker is not None and indices is not None and indices.numel():
        tracker.forget(_page_keys(indices, self.slot_page_size))
    return None


def _after_clear(result: None, self: PagedHostPool) -> None:
    tracker = tracker_of(self)
    if tracker is not None:
        tracker.forget_all()
    return None


def _after_group_init(result: None, self: HostPoolGroup, entries: object) -> None:
    """Link every tracked mirror of this group to the KV anchor whose page indices it borrows."""
    borrowers = [e.host_pool for e in self.entries if e is not self.anchor_entry and tracker_of(e.host_pool)]
    if not borrowers:
        return None
    if self.anchor_entry.name != _pool_names().KV:
        logger.warning(
            "index-K integrity: host pool group anchored on %s, not KV: pages reused through it are not "
            "forgotten by the c4 indexer mirror",
            self.anchor_entry.name,
        )
        return None
    setattr(self.anchor_entry.host_pool, _BORROWERS, borrowers)
    return None


def _forget_in_borrowers(anchor: object, indices: torch.Tensor | None) -> None:
    if indices is None or not indices.numel():
        return
    for host in getattr(anchor, _BORROWERS, ()):
        # Borrowers are tracked pools (_after_group_init keeps only those).
        tracker_of(host).forget(_page_keys(indices, host.slot_page_size))  # type: ignore[union-attr]


def _after_anchor_alloc(result: torch.Tensor | None, self: object, need_size: int) -> None:
    _forget_in_borrowers(self, result)  # a new owner: whatever fills the pages next, the old checksum is wrong
    return None


def _after_anchor_free(result: object, self: object, indices: torch.Tensor | None) -> None:
    _forget_in_borrowers(self, indices)
    return None


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _after_c4_indexer_forward(
    result: object,
    self: C4Indexer,
    x: torch.Tensor,
    q_lora: torch.Tensor,
    forward_batch: ForwardBatch,
    attn_backend: object,
    *args: object,
    **kwargs: object,
) -> None:
    pool = getattr(forward_batch, "token_to_kv_pool", None)
    tracker = tracker_of(getattr(pool, "c4_indexer_kv_pool", None))
    if tracker is None or _capturing():
        return None
    _, compress_layer_id, _ = pool.layer_mapping[self.layer_id]  # type: ignore[union-attr]  # the tracker was on its pool
    if tracker.verify(compress_layer_id, requests=tuple(getattr(forward_batch, "rids", None) or ())):
        index_k_integrity.report(tracker.poll())
    return None


def _before_pd_checksum_mismatch(process: ProcessRecord, self: object, req: Req, msg: str) -> None:
    if load_config().integrity_enabled:
        index_k_integrity.use_launch(process.current_launch())
        mismatch = index_k_integrity.Mismatch(index_k_integrity.WHERE_PD, 1, -1, -1, (str(req.rid),))
        index_k_integrity.report(mismatch)
    return None


def hooks(ctx: HookContext) -> list[Hook]:
    from sglang_dsv4_ext.runtime.hooks import Hook

    return [
        Hook(compat.INTEGRITY_HOST_POOL_INIT, functools.partial(_after_host_pool_init, ctx.process), "after"),
        Hook(compat.INTEGRITY_HOST_POOL_BACKUP, _after_backup, "after"),
        Hook(compat.INTEGRITY_HOST_POOL_LOAD, _after_load_layer, "after"),
        Hook(compat.INTEGRITY_HOST_POOL_FREE, _after_free, "after"),
        Hook(compat.INTEGRITY_HOST_POOL_CLEAR, _after_clear, "after"),
        Hook(compat.INTEGRITY_HOST_POOL_GROUP_INIT, _after_group_init, "after"),
        Hook(compat.INTEGRITY_ANCHOR_ALLOC, _after_anchor_alloc, "after"),
        Hook(compat.INTEGRITY_ANCHOR_FREE, _after_anchor_free, "after"),
        Hook(compat.INTEGRITY_C4_INDEXER_FORWARD, _after_c4_indexer_forward, "after"),
        Hook(
            compat.INTEGRITY_PD_CHECKSUM_MISMATCH,
            functools.partial(_before_pd_checksum_mismatch, ctx.process),
            "before",
        ),
    ]
