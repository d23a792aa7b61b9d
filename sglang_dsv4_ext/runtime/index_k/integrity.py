"""Index-K integrity: per-page checksums recorded where pages are written, verified where they are read.

Shared by the integrity hook (:mod:`sglang_dsv4_ext.runtime.hooks.integrity`) and the GPU race replay
(``benchmarks/integrity_replay.py``); imports nothing from SGLang, so it runs where SGLang cannot.

One :class:`IntegrityTracker` per index-K host mirror (HiCache's c4 indexer host pool):

* :meth:`record` (at backup, device -> host): the checksum of each device page row being backed
  up is stored under its *key* (the host page row), on the stream that runs the backup.
* :meth:`expect` (at a layer's load, host -> device): the keys' checksums are gathered for the
  device rows just loaded; the layer is now *pending verification*. ``sample`` keeps at most
  ``sample_pages`` evenly spaced rows and verifies one layer in ``sample_layer_stride`` (the layers
  rotate per load; the rows shift by one per sampled load of that layer, so a prefix loaded again and
  again has every position verified within a bounded number of loads); ``full`` keeps every row of
  every layer.
* :meth:`verify` (on the reader's stream, where the layer is read): one fused kernel recomputes
  the pending rows' checksums and adds mismatches to a device-side record. No host
  synchronisation: the record is copied to pinned memory with ``non_blocking=True`` behind an
  event, and :meth:`poll` (called on a later step) reads the newest copy whose event has completed.
* :meth:`forget` (host pages freed or handed to a new owner): their keys lose their checksum, so a
  page later filled from elsewhere (L3 storage, a PD host receive) is never compared with the
  checksum of its previous occupant.

Keys with no checksum are skipped (the kernel treats the sentinel as "unknown") and counted as
loaded but not checked. Every loaded page ends in one of four counts (exported at zero when the
tracker is created, see :class:`Series`): checked, or not checked because of ``sampling``, because
no hooked reader ran before the next load (``no_eager_reader``: a CUDA-graph replay), or because
the page had ``no_checksum``.

No host synchronisation anywhere: index tensors that are on the host (HiCache's ``direct`` io
backend) reach the device through pinned memory with ``non_blocking=True`` (:func:`indices_on`);
forgets run on a side stream of their own, and the streams that read or write the table wait for
it on the device (``wait_event``), never on the host.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from kernels_sm120 import index_k_checksum as ck
from sglang_dsv4_ext.config import IntegrityMode

if TYPE_CHECKING:
    from prometheus_client import Counter

logger = logging.getLogger("sglang_dsv4_ext.integrity")

WHERE_LOAD = "load"  # a HiCache layer load, verified where the layer is read
WHERE_PD = "pd"  # a PD decode server's received KV
METRIC_NAME = "sglang:dsv4_index_k_integrity_mismatches_total"
CHECKED_METRIC_NAME = "sglang:dsv4_index_k_integrity_pages_checked_total"
UNCHECKED_METRIC_NAME = "sglang:dsv4_index_k_integrity_pages_unchecked_total"
# Why a loaded page was not checked (label ``reason`` of UNCHECKED_METRIC_NAME).
SAMPLING = "sampling"  # not among the pages ``sample`` mode verifies
NO_EAGER_READER = "no_eager_reader"  # replaced by the next load before a hooked reader ran (CUDA-graph replay)
NO_CHECKSUM = "no_checksum"  # its host page holds no recorded checksum (filled from L3 or a PD host receive)
UNCHECKED_REASONS = (SAMPLING, NO_EAGER_READER, NO_CHECKSUM)
_REQUEST_HISTORY = 256  # verify calls whose request ids are kept for the mismatch log
_SNAPSHOTS = 64  # pinned copies of the device record in flight: the host may run this many verifies ahead


@dataclass(frozen=True)
class Mismatch:
    where: str
    count: int  # new mismatching pages since the previous report
    layer: int  # first bad page: layer (tracker numbering)
    page: int  # first bad page: device page row (-1: unknown)
    requests: tuple[str, ...]  # requests of the verify call that found it (may be empty)

    def describe(self) -> str:
        page = "unknown" if self.page < 0 else str(self.page)
        layer = "unknown" if self.layer < 0 else str(self.layer)
        reqs = ",".join(self.requests[:8]) or "unknown"
        return (
            f"index-K integrity mismatch ({self.where}): {self.count} page(s); first at layer {layer}, "
            f"page {page}, request(s) {reqs}"
        )


def indices_on(device: torch.device, indices: torch.Tensor) -> torch.Tensor:
    """``indices`` as int64 on ``device``, without making the host wait.

    A host tensor bound for a CUDA device (HiCache's ``direct`` io backend keeps its indices on the
    host) is copied into fresh pinned memory and sent with ``non_blocking=True``: a blocking copy
    synchronises the stream, and CUDA stages a copy from pageable memory only after the stream's
    earlier work, so either would block the host once per layer. Fresh pinned memory: PyTorch keeps
    it alive until the copy ran, and the caller may reuse its own tensor at once.
    """
    indices = indices.to(torch.int64)
    if indices.device == device:
        return indices
    if device.type == "cuda" and indices.device.type == "cpu":
        staged = torch.empty(indices.shape, dtype=torch.int64, pin_memory=True)
        staged.copy_(indices)
        return staged.to(device, non_blocking=True)
    return indices.to(device)


class Series:
    """One tracker's counts in SGLang's Prometheus registry, created at zero (see :func:`export_at_zero`)."""

    def __init__(self, where: str) -> None:
        export_at_zero(where)
        labels = series_labels(where)
        self.checked = checked_metric().labels(**labels)
        self.unchecked = {r: unchecked_metric().labels(**labels, reason=r) for r in UNCHECKED_REASONS}


class _Snapshot:
    """A pinned copy of the device record and the host-side count of rows verified when it was taken."""

    __slots__ = ("values", "event", "rows")

    def __init__(self, pin: bool) -> None:
        self.values = torch.zeros(3, dtype=torch.int64, pin_memory=pin)
        self.event = torch.cuda.Event() if pin else None
        self.rows = 0

    def done(self) -> bool:
        return self.event is None or self.event.query()


class _Pending:
    __slots__ = ("rows", "expected", "requests")

    def __init__(self, rows: torch.Tensor, expected: torch.Tensor, requests: tuple[str, ...]) -> None:
        self.rows, self.expected, self.requests = rows, expected, requests


class IntegrityTracker:
    """Checksums of one index-K host mirror; see the module docstring."""

    def __init__(
        self,
        mode: str,
        buffers: Sequence[torch.Tensor],
        num_keys: int,
        *,
        where: str = WHERE_LOAD,
        sample_pages: int = 8,
        sample_layer_stride: int = 4,
        series: Series | None = None,
    ):
        if mode not in (IntegrityMode.SAMPLE, IntegrityMode.FULL):
            raise ValueError(f"integrity mode must be 'sample' or 'full' for a tracker, got {mode!r}")
        self.mode, self.where = mode, where
        self.buffers = list(buffers)  # plain list: reading it is not an index-K read
        self.device = self.buffers[0].device
        self.table = torch.full((len(self.buffers), num_keys), ck.NO_MISMATCH, dtype=torch.int64, device=self.device)
        self.state = ck.new_state(self.device)
        self.sample_pages, self.sample_layer_stride = sample_pages, sample_layer_stride
        self.pending: dict[int, _Pending] = {}
        self.loads = 0
        self._layer_turns: dict[int, int] = {}  # layer -> loads of it sample mode verified so far (row rotation)
        self.seq = 0
        self.requests: OrderedDict[int, tuple[str, ...]] = OrderedDict()
        cuda = self.device.type == "cuda"
        self._snapshots = [_Snapshot(cuda) for _ in range(_SNAPSHOTS)]
        self._taken = self._read = 0  # snapshots taken / read so far (ring positions)
        # Forgets of host keys run on a side stream nothing else uses; the table's readers and writers wait for
        # its last one on the device (a forget on a busy stream would make them wait for that stream's work).
        self._forget_stream = torch.cuda.Stream(device=self.device) if cuda else None
        self._forget_done = torch.cuda.Event() if cuda else None
        self._forgotten = False
        self._reported = 0
        # poll() runs on the reader's thread and on the background poller's (poll_in_background): one at a time,
        # and never while verify() adds a snapshot to the ring.
        self._ring_lock = threading.Lock()
        self._polled_at = time.monotonic()
        self.series = series
        self.mismatches = 0  # pages reported so far
        self.pages_checked = 0  # pages whose checksum was compared where they were read
        self.unchecked = dict.fromkeys(UNCHECKED_REASONS, 0)  # pages loaded but not checked, by reason
        self.rows_verified = 0  # pages handed to the verify kernel (checked or without a checksum)

    @property
    def unverified_pages(self) -> int:
        """Loaded pages replaced by the next load before any reader verified them."""
        return self.unchecked[NO_EAGER_READER]

    def _count_unchecked(self, reason: str, pages: int) -> None:
        if pages <= 0:
            return
        self.unchecked[reason] += pages
        if self.series is not None:
            self.series.unchecked[reason].inc(pages)

    def _count_checked(self, pages: int) -> None:
        if pages <= 0:
            return
        self.pages_checked += pages
        if self.series is not None:
            self.series.checked.inc(pages)

    def _after_forgets(self) -> None:
        """The current stream waits (on the device) for the last forget before it touches the table."""
        if self._forgotten:
            # _forget_done is set whenever _forgotten is (a CUDA tracker's forgets).
            torch.cuda.current_stream(self.device).wait_event(self._forget_done)  # type: ignore[arg-type]

    # ---- write side ----
    def record(self, layer: int, src_rows: torch.Tensor, keys: torch.Tensor) -> None:
        """Store the checksums of device page rows ``src_rows`` of ``layer`` under ``keys`` (host rows)."""
        self._after_forgets()
        sums = ck.page_checksums(self.buffers[layer], indices_on(self.device, src_rows))
        self.table[layer].index_copy_(0, indices_on(self.device, keys), sums)

    def record_all_layers(self, src_rows: torch.Tensor, keys: torch.Tensor) -> None:
        src_rows, keys = indices_on(self.device, src_rows), indices_on(self.device, keys)
        for layer in range(len(self.buffers)):
            self.record(layer, src_rows, keys)

    def forget(self, keys: torch.Tensor) -> None:
        """Keys (host rows) freed or handed to a new owner: they no longer hold what was backed up."""
        self._forgetting(lambda: self.table.index_fill_(1, indices_on(self.device, keys), ck.NO_MISMATCH), keys)

    def forget_all(self) -> None:
        """Every host page freed at once (the host pool was cleared)."""
        self._forgetting(lambda: self.table.fill_(ck.NO_MISMATCH))

    def _forgetting(self, fill: Callable[[], object], keys: torch.Tensor | None = None) -> None:
        """Run ``fill`` (a table write) on the side stream and note it for the table's readers and writers.

        Host keys (what every host pool's free and alloc hand over) need nothing from any stream, so the
        side stream runs them at once; device keys were made on the caller's stream, which the side
        stream then waits for.
        """
        if self._forget_stream is None:
            fill()
            return
        if keys is not None and keys.device.type != "cpu":
            self._forget_stream.wait_stream(torch.cuda.current_stream(self.device))
            keys.record_stream(self._forget_stream)
        with torch.cuda.stream(self._forget_stream):
            fill()
            self._forget_done.record(self._forget_stream)  # type: ignore[union-attr]  # made with the stream
        self._forgotten = True

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
        return self.mode == IntegrityMode.FULL or (layer + self.loads) % self.sample_layer_stride == 0

    def expect(self, layer: int, dst_rows: torch.Tensor, keys: torch.Tensor, requests: Sequence[str] = ()) -> None:
        """Device rows ``dst_rows`` of ``layer`` were loaded from ``keys``: verify them where read."""
        n = dst_rows.numel()
        if not self.samples_layer(layer):
            self._count_unchecked(SAMPLING, n)
            return
        dst_rows, keys = indices_on(self.device, dst_rows), indices_on(self.device, keys)
        if self.mode == IntegrityMode.SAMPLE and n > self.sample_pages:
            dst_rows, keys = self._sampled_rows(layer, n, dst_rows, keys)
            self._count_unchecked(SAMPLING, n - dst_rows.numel())
        self._after_forgets()
        expected = self.table[layer].index_select(0, keys)
        self._note_unverified(layer, self.pending.get(layer))
        self.pending[layer] = _Pending(dst_rows, expected, tuple(requests))

    def _sampled_rows(
        self, layer: int, n: int, dst_rows: torch.Tensor, keys: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """At most ``sample_pages`` evenly spaced of ``n`` loaded rows, shifted by one per sampled load of ``layer``.

        The shift counts this layer's own sampled loads, not all loads: a layer is sampled only on every
        ``sample_layer_stride``-th load, so a shift by the load count would take only ``step / stride`` values
        and a prefix loaded again and again would be verified at a fraction of its positions. With
        ``step = ceil(n / sample_pages)`` the ``step`` shifts cover every row of the ``n``, so a prefix
        loaded repeatedly has each position verified within ``step`` sampled loads of each layer
        (``step * sample_layer_stride`` loads). Views only: no index tensor from the host.
        """
        step = -(-n // self.sample_pages)
        turn = self._layer_turns.get(layer, 0)
        self._layer_turns[layer] = turn + 1
        offset = turn % step
        return dst_rows[offset::step], keys[offset::step]

    def _note_unverified(self, layer: int, previous: _Pending | None) -> None:
        """A load replaces pages no reader verified: say so once (never a silent gap in the evidence)."""
        if previous is None:
            return
        if self.unchecked[NO_EAGER_READER] == 0:
            logger.warning(
                "index-K integrity: %d loaded page(s) of c4 layer %d were never verified before the next load: "
                "their reader ran no Python hook (a CUDA-graph replay, e.g. --cuda-graph-backend-prefill "
                "breakable) or did not run; integrity counts cover eagerly run readers only (logged once; "
                "counted in %s{reason=%r})",
                previous.rows.numel(),
                layer,
                UNCHECKED_METRIC_NAME,
                NO_EAGER_READER,
            )
        self._count_unchecked(NO_EAGER_READER, previous.rows.numel())

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
        ck.verify_page_checksums(
            self.buffers[layer],
            pending.rows,
            pending.expected,
            self.state,
            layer=layer,
            seq=self.seq,
            skip_unknown=True,
        )
        with self._ring_lock:
            self.rows_verified += pending.rows.numel()
            self._take_snapshot()
        return True

    def _take_snapshot(self) -> None:
        snapshot = self._snapshots[self._taken % _SNAPSHOTS]
        snapshot.values.copy_(self.state, non_blocking=True)
        snapshot.rows = self.rows_verified
        if snapshot.event is not None:
            snapshot.event.record()
        self._taken += 1
        self._read = max(self._read, self._taken - _SNAPSHOTS)  # older ones were overwritten: the record is cumulative

    def _latest_completed(self) -> _Snapshot | None:
        latest = None
        while self._read < self._taken and self._snapshots[self._read % _SNAPSHOTS].done():
            latest = self._snapshots[self._read % _SNAPSHOTS]
            self._read += 1
        return latest

    def poll(self) -> Mismatch | None:
        """Counts and new mismatches of the newest completed verification (never blocks); None if no new mismatch."""
        with self._ring_lock:
            return self._poll()

    def report_if_idle(self, seconds: float) -> None:
        """Poll and report, unless the reader polled in the last ``seconds`` (the background poller's call).

        The report is made holding the ring lock, so a reader's poll that finds nothing new runs after the
        report it would have made (its log line and counts are there when it returns).
        """
        with self._ring_lock:
            if time.monotonic() - self._polled_at >= seconds:
                report(self._poll())

    def _poll(self) -> Mismatch | None:
        self._polled_at = time.monotonic()
        snapshot = self._latest_completed()
        if snapshot is None:
            return None
        count, code, compared = (int(v) for v in snapshot.values.tolist())
        self._count_checked(compared - self.pages_checked)
        self._count_unchecked(NO_CHECKSUM, snapshot.rows - compared - self.unchecked[NO_CHECKSUM])
        if count <= self._reported:
            return None
        new, self._reported = count - self._reported, count
        self.mismatches = count
        if code == ck.NO_MISMATCH:  # found by verifications that ran between a snapshot and a reset
            return Mismatch(self.where, new, -1, -1, ())
        self.state[1].fill_(ck.NO_MISMATCH)  # the next report names the first page found after this one
        seq, layer, page = ck.decode_mismatch_code(code)
        return Mismatch(self.where, new, layer, page, self.requests.get(seq, ()))

    def drain(self) -> Mismatch | None:
        """Wait for the last snapshot and report (tests, benchmarks, shutdown; synchronises)."""
        if self._taken:
            last = self._snapshots[(self._taken - 1) % _SNAPSHOTS]
            if last.event is not None:
                last.event.synchronize()
        return self.poll()


# ---------------------------------------------------------------------------------------- reporting
_METRICS: dict[str, Counter] = {}
UNKNOWN_LAUNCH = "unknown"
_LAUNCH = [UNKNOWN_LAUNCH]  # the launch label of every series (use_launch)
# What a checked page covers (label ``regions``): the whole page row (fp8's value + scale row, fp4's payload +
# scale row, bf16's row), or the payload only: fp4 index-K in AITER's layout (ROCm) keeps its scales in a second
# host region (``DEEPSEEK_V4_C4_INDEXER_SCALE``) that integrity does not checksum.
WHOLE_PAGE, PAYLOAD_ONLY = "page", "payload only"
_REGIONS = [WHOLE_PAGE]


def use_regions(regions: str) -> None:
    """What the HiCache load series' checked pages cover from now on (the hook decides it at pool creation)."""
    if regions not in (WHOLE_PAGE, PAYLOAD_ONLY):
        raise ValueError(f"integrity regions must be {WHOLE_PAGE!r} or {PAYLOAD_ONLY!r}, got {regions!r}")
    _REGIONS[0] = regions


def use_launch(launch: str) -> None:
    """Label every series with ``launch`` from now on (the hook passes this process's launch at pool creation).

    Why: an operator-set ``PROMETHEUS_MULTIPROC_DIR`` keeps the counter files of earlier launches, and SGLang's
    /metrics aggregates them with the live ones; only the launch label tells a stock server that exports nothing
    from one whose counters an earlier launch left behind (read as "checked 0").
    """
    _LAUNCH[0] = launch


def series_labels(where: str) -> dict[str, str]:
    """The labels of ``where``'s series: the launch, and the regions a check covers (PD's digest: every region)."""
    return {"where": where, "launch": _LAUNCH[0], "regions": WHOLE_PAGE if where == WHERE_PD else _REGIONS[0]}


def _counter(name: str, documentation: str, labelnames: Sequence[str]) -> Counter:
    """SGLang's Prometheus machinery: a counter in the default registry (multiprocess-aware, as
    SGLang's own collectors, when SGLang set PROMETHEUS_MULTIPROC_DIR), created on first use."""
    if name not in _METRICS:
        from prometheus_client import Counter

        _METRICS[name] = Counter(name, documentation, labelnames=list(labelnames))
    return _METRICS[name]


def mismatch_metric() -> Counter:
    return _counter(
        METRIC_NAME,
        "Index-K pages whose checksum differed where they were read (sglang-dsv4-ext integrity mode).",
        ["where", "launch", "regions"],
    )


def checked_metric() -> Counter:
    return _counter(
        CHECKED_METRIC_NAME,
        "Index-K pages whose checksum was compared where they were read (sglang-dsv4-ext integrity mode).",
        ["where", "launch", "regions"],
    )


def unchecked_metric() -> Counter:
    return _counter(
        UNCHECKED_METRIC_NAME,
        "Index-K pages loaded but not compared, by reason: sampling, "
        "no_eager_reader (CUDA-graph replay), no_checksum (sglang-dsv4-ext integrity mode).",
        ["where", "launch", "regions", "reason"],
    )


def export_at_zero(where: str) -> None:
    """Create ``where``'s series at 0: a server that checks and finds nothing reads 0, one that never
    checked reads no series at all, so the two cannot be mistaken for each other."""
    labels = series_labels(where)
    checked_metric().labels(**labels).inc(0)
    for reason in UNCHECKED_REASONS:
        unchecked_metric().labels(**labels, reason=reason).inc(0)
    mismatch_metric().labels(**labels).inc(0)


def report(mismatch: Mismatch | None, seen: list[Mismatch] | None = None) -> None:
    """Log a mismatch once and count it in the metric."""
    if mismatch is None:
        return
    logger.error(mismatch.describe())
    mismatch_metric().labels(**series_labels(mismatch.where)).inc(mismatch.count)
    if seen is not None:
        seen.append(mismatch)


# ------------------------------------------------------------------------------- background polling
POLL_SECONDS = 1.0
_POLLED: weakref.WeakSet[IntegrityTracker] = weakref.WeakSet()
_POLLER: list[threading.Thread] = []
_POLLER_LOCK = threading.Lock()


def poll_in_background(tracker: IntegrityTracker, interval: float = POLL_SECONDS) -> None:
    """Report ``tracker``'s newest completed verifications every ``interval`` seconds, from a daemon thread.

    Why: the reader polls only when it verifies again, so the last verifications of a run would reach the
    counters (and the mismatch log) only at the next load; a reader of /metrics after the run must see them.
    A scrape cannot do it: under SGLang's multiprocess metrics the HTTP process reads the counter files and
    never calls into the schedulers. The poll never blocks (a snapshot is read only once its event completed),
    and skips a tracker whose reader polled within ``interval`` (a busy server polls on its own).
    """
    with _POLLER_LOCK:
        _POLLED.add(tracker)
        if not _POLLER or not _POLLER[0].is_alive():
            thread = threading.Thread(target=_poll_forever, args=(interval,), name="dsv4-integrity-poll", daemon=True)
            _POLLER[:] = [thread]
            thread.start()


def _polled_trackers(attempts: int = 3) -> list[IntegrityTracker]:
    """The trackers to poll now ([] if the set kept changing under every walk: the next round tries again).

    A set walked while another thread changes it raises "Set changed size during iteration", which ended the
    poller. An addition is kept out by the lock (``poll_in_background`` holds it). A removal is not: ``WeakSet``
    defers a collected member's removal while it is walked, but its check and its removal are two steps, so a
    tracker collected on another thread (its pool torn down) between them is discarded under the walk."""
    for _ in range(attempts):
        try:
            with _POLLER_LOCK:
                return list(_POLLED)
        except RuntimeError:  # only "changed size during iteration" comes from list() over a WeakSet
            continue
    return []


def _poll_forever(interval: float) -> None:
    stop = threading.Event()
    while not stop.wait(interval):
        for tracker in _polled_trackers():
            try:
                tracker.report_if_idle(interval)
            except Exception:  # a poll that fails must not stop the others; said once per failure
                logger.exception("index-K integrity: background poll failed")
