"""Index-K integrity: per-page checksums recorded where pages are written, verified where they are read.

Shared by the integrity hook (:mod:`sglang_dsv4_ext.hooks.integrity`) and the GPU race replay
(``benchmarks/integrity_replay.py``); imports nothing from SGLang, so it runs where SGLang cannot.

One :class:`IntegrityTracker` per index-K host mirror (HiCache's c4 indexer host pool):

* :meth:`record` (at backup, device -> host): the checksum of each device page row being backed
  up is stored under its *key* (the host page row), on the stream that runs the backup.
* :meth:`expect` (at a layer's load, host -> device): the keys' checksums are gathered for the
  device rows just loaded; the layer is now *pending verification*. ``sample`` keeps at most
  ``sample_pages`` evenly spaced rows and verifies one layer in ``sample_layer_stride`` (rotating
  per load); ``full`` keeps every row of every layer.
* :meth:`verify` (on the reader's stream, where the layer is read): one fused kernel recomputes
  the pending rows' checksums and adds mismatches to a device-side record. No host
  synchronisation: the record is copied to pinned memory with ``non_blocking=True`` behind an
  event, and :meth:`poll` (called on a later step) reads it once the event has completed.
* :meth:`forget` (host pages freed): their keys lose their checksum, so a page later filled from
  elsewhere (L3 storage) is never compared with a stale checksum.

Keys with no checksum are skipped (the kernel treats the sentinel as "unknown").
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from kernels_sm120 import index_k_checksum as ck

logger = logging.getLogger("sglang_dsv4_ext.integrity")

OFF, SAMPLE, FULL = "off", "sample", "full"
WHERE_LOAD = "load"  # a HiCache layer load, verified where the layer is read
WHERE_PD = "pd"  # a PD decode server's received KV
METRIC_NAME = "sglang:dsv4_index_k_integrity_mismatches_total"
_REQUEST_HISTORY = 256  # verify calls whose request ids are kept for the mismatch log


@dataclass(frozen=True)
class Mismatch:
    where: str
    count: int  # new mismatching pages since the previous report
    layer: int  # first bad page: layer (tracker numbering)
    page: int  # first bad page: device page row (-1: unknown)
    requests: Tuple[str, ...]  # requests of the verify call that found it (may be empty)

    def describe(self) -> str:
        page = "unknown" if self.page < 0 else str(self.page)
        layer = "unknown" if self.layer < 0 else str(self.layer)
        reqs = ",".join(self.requests[:8]) or "unknown"
        return (f"index-K integrity mismatch ({self.where}): {self.count} page(s); first at layer {layer}, "
                f"page {page}, request(s) {reqs}")


class _Pending:
    __slots__ = ("rows", "expected", "requests")

    def __init__(self, rows, expected, requests):
        self.rows, self.expected, self.requests = rows, expected, requests


class IntegrityTracker:
    """Checksums of one index-K host mirror; see the module docstring."""

    def __init__(self, mode: str, buffers: Sequence[torch.Tensor], num_keys: int, *, where: str = WHERE_LOAD,
                 sample_pages: int = 8, sample_layer_stride: int = 4):
        if mode not in (SAMPLE, FULL):
            raise ValueError(f"integrity mode must be 'sample' or 'full' for a tracker, got {mode!r}")
        self.mode, self.where = mode, where
        self.buffers = list(buffers)  # plain list: reading it is not an index-K read
        self.device = self.buffers[0].device
        self.table = torch.full((len(self.buffers), num_keys), ck.NO_MISMATCH, dtype=torch.int64, device=self.device)
        self.state = ck.new_state(self.device)
        self.sample_pages, self.sample_layer_stride = sample_pages, sample_layer_stride
        self.pending: Dict[int, _Pending] = {}
        self.loads = 0
        self.seq = 0
        self.requests: "OrderedDict[int, Tuple[str, ...]]" = OrderedDict()
        pin = self.device.type == "cuda"
        self._snapshot = torch.zeros(2, dtype=torch.int64, pin_memory=pin)
        self._snapshot_event = torch.cuda.Event() if pin else None
        self._reported = 0
        self.mismatches = 0  # pages reported so far
        self.unverified_pages = 0  # loaded pages replaced by the next load before any reader verified them

    # ---- write side ----
    def record(self, layer: int, src_rows: torch.Tensor, keys: torch.Tensor) -> None:
        """Store the checksums of device page rows ``src_rows`` of ``layer`` under ``keys`` (host rows)."""
        sums = ck.page_checksums(self.buffers[layer], src_rows.to(self.device, torch.int64))
        self.table[layer].index_copy_(0, keys.to(self.device, torch.int64), sums)

    def record_all_layers(self, src_rows: torch.Tensor, keys: torch.Tensor) -> None:
        for layer in range(len(self.buffers)):
            self.record(layer, src_rows, keys)

    def forget(self, keys: torch.Tensor) -> None:
        """Keys (host rows) freed: they no longer hold what was backed up."""
        self.table.index_fill_(1, keys.to(self.device, torch.int64), ck.NO_MISMATCH)

    # ---- read side ----
    def begin_load(self) -> None:
        """A new load (all layers) starts: rotates the sampled layers and drops what the last one left pending.

        A pending entry names device rows and the checksums their load should have produced; once a new
        load starts, those rows may hold other data, so verifying them later would report a false
        mismatch (seen on the GPU replay in ``sample`` mode, whose rotation keeps other layers than the
        next load replaces). What no reader verified is counted instead.
        """
        self.loads += 1
        for layer in sorted(self.pending):
            self._note_unverified(layer, self.pending.pop(layer))

    def samples_layer(self, layer: int) -> bool:
        return self.mode == FULL or (layer + self.loads) % self.sample_layer_stride == 0

    def expect(self, layer: int, dst_rows: torch.Tensor, keys: torch.Tensor, requests: Sequence[str] = ()) -> None:
        """Device rows ``dst_rows`` of ``layer`` were loaded from ``keys``: verify them where read."""
        if not self.samples_layer(layer):
            return
        dst_rows = dst_rows.to(self.device, torch.int64)
        keys = keys.to(self.device, torch.int64)
        n = dst_rows.numel()
        if self.mode == SAMPLE and n > self.sample_pages:
            step = n // self.sample_pages  # views only: evenly spaced rows, no index tensor from the host
            offset = self.loads % step
            dst_rows, keys = dst_rows[offset::step][: self.sample_pages], keys[offset::step][: self.sample_pages]
        expected = self.table[layer].index_select(0, keys)
        self._note_unverified(layer, self.pending.get(layer))
        self.pending[layer] = _Pending(dst_rows, expected, tuple(requests))

    def _note_unverified(self, layer: int, previous: Optional[_Pending]) -> None:
        """A load replaces pages no reader verified: say so once (never a silent gap in the evidence)."""
        if previous is None:
            return
        if self.unverified_pages == 0:
            logger.warning(
                "index-K integrity: %d loaded page(s) of c4 layer %d were never verified before the next load: "
                "their reader ran no Python hook (a CUDA-graph replay, e.g. --cuda-graph-backend-prefill "
                "breakable) or did not run; integrity counts cover eagerly run readers only (logged once; "
                "the running count is IntegrityTracker.unverified_pages)", previous.rows.numel(), layer)
        self.unverified_pages += previous.rows.numel()

    def has_pending(self, layer: int) -> bool:
        return layer in self.pending

    def verify(self, layer: int, requests: Sequence[str] = ()) -> bool:
        """Verify ``layer``'s pending rows on the current stream; False if nothing was pending."""
        pending = self.pending.pop(layer, None)
        if pending is None:
            return False
        self.seq += 1
        self.requests[self.seq] = tuple(requests) or pending.requests
        while len(self.requests) > _REQUEST_HISTORY:
            self.requests.popitem(last=False)
        ck.verify_page_checksums(self.buffers[layer], pending.rows, pending.expected, self.state,
                                 layer=layer, seq=self.seq, skip_unknown=True)
        self._take_snapshot()
        return True

    def _take_snapshot(self) -> None:
        self._snapshot.copy_(self.state, non_blocking=True)
        if self._snapshot_event is not None:
            self._snapshot_event.record()

    def poll(self) -> Optional[Mismatch]:
        """New mismatches found by completed verifications (never blocks); None if none."""
        if self._snapshot_event is not None and not self._snapshot_event.query():
            return None
        count, code = (int(v) for v in self._snapshot.tolist())
        if count <= self._reported:
            return None
        new, self._reported = count - self._reported, count
        self.mismatches = count
        if code == ck.NO_MISMATCH:  # found by verifications that ran between a snapshot and a reset
            return Mismatch(self.where, new, -1, -1, ())
        self.state[1].fill_(ck.NO_MISMATCH)  # the next report names the first page found after this one
        seq, layer, page = ck.decode_mismatch_code(code)
        return Mismatch(self.where, new, layer, page, self.requests.get(seq, ()))

    def drain(self) -> Optional[Mismatch]:
        """Wait for the last snapshot and report (tests, benchmarks, shutdown; synchronises)."""
        if self._snapshot_event is not None:
            self._snapshot_event.synchronize()
        return self.poll()


# ---------------------------------------------------------------------------------------- reporting
_METRIC = None


def mismatch_metric():
    """SGLang's Prometheus machinery: a counter in the default registry (multiprocess-aware, as
    SGLang's own collectors, when SGLang set PROMETHEUS_MULTIPROC_DIR), created on first use."""
    global _METRIC
    if _METRIC is None:
        from prometheus_client import Counter

        _METRIC = Counter(METRIC_NAME, "Index-K pages whose checksum differed where they were read "
                          "(sglang-dsv4-ext integrity mode).", labelnames=["where"])
    return _METRIC


def report(mismatch: Optional[Mismatch], seen: Optional[List[Mismatch]] = None) -> None:
    """Log a mismatch once and count it in the metric."""
    if mismatch is None:
        return
    logger.error(mismatch.describe())
    mismatch_metric().labels(where=mismatch.where).inc(mismatch.count)
    if seen is not None:
        seen.append(mismatch)
