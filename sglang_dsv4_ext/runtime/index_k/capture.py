"""``SGLANG_DSV4_INDEX_K_CAPTURE=DIR``: dump what the bf16 c4 indexer reads, for ``sglang-dsv4 recall DIR``.

Why: ``recall`` answers "is bf16 index-K worth its bytes on *this* traffic?" only from real queries
and keys. The bf16 indexer path (:mod:`sglang_dsv4_ext.runtime.hooks.indexer`) calls :meth:`IndexKCapture.record`
with the bf16 queries (after RoPE + Hadamard), the head weights, the per-row c4 lengths and page
table, and the layer's index-K buffer; for each sampled (request, layer) it writes one file in the
format :mod:`sglang_dsv4_ext.runtime.index_k.capture_format` defines (format 3, with a content checksum).

The reference: before the indexer reads a layer, the compressor's store for that layer calls
:meth:`IndexKCapture.note_stored` with what the bf16 store receives (the compressed rows, norm weight,
RoPE table, positions, slots). For the sampled layers it keeps those rows transformed (RMSNorm, RoPE,
Hadamard) in float64 and rounded to fp32, i.e. the values the store rounds to bf16, for this forward
pass only. A file carries them as ``k_fp32`` when every key row its request read was stored in the same
forward pass (a fresh prompt's first chunk); keys stored earlier (the prefix cache, an earlier chunk,
decode) have no such values, and the file has no ``k_fp32``: recall then says bf16 is its reference.

Bounds (:class:`sglang_dsv4_ext.config.CaptureConfig`): distinct requests, sampled c4 layers
(validated here against the model's c4 layers when a pool is built), query rows per
request and layer, and MiB queued. Each bound that stops capturing logs one line.

Costs: decided once per pool when it is built (``capture_for``); off, the cost is one
attribute lookup per call. On, a call that captures something never waits for the GPU: the sampled
row numbers go to the device from pinned memory, the number of key rows gathered is bounded from
host-side lengths (``forward_batch.seq_lens_cpu``, else the page-table width), and the queries,
weights, lengths, page-table rows and gathered keys are copied non-blocking into pinned host buffers;
a CUDA event goes with them to a background thread, which waits for it, checks what arrived (every
sampled row read a prefix of the same pool slots, no row read past what was gathered) and trims, checksums
and writes the file; a file that fails a check is not written (logged, counted as failed). The store's
float64 transform runs only on sampled layers while capture still wants a request of the batch. Once
the bounds are reached a call returns at the first check. The measured cost per call is in
docs/proving-on-a-cluster.md (``benchmarks/capture_cost.py``). CUDA-graph replays run no Python, so decode steps
served from a graph are not captured (prefill is; capture decode with ``--disable-cuda-graph``). Only attention-TP
rank 0 captures (every TP rank holds the same indexer heads and keys).

Files are never overwritten: each process writes under its own new subdirectory
``DIR/<host>-pid<pid>-<time>/`` (created with ``exist_ok=False``), files opened with ``"xb"``.
``recall DIR`` reads the subdirectories.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import torch

from sglang_dsv4_ext.config import (
    ENV_CAPTURE,
    ENV_CAPTURE_LAYERS,
    ENV_CAPTURE_MAX_MB,
    ENV_CAPTURE_REQUESTS,
    CaptureConfig,
    load_config,
)
from sglang_dsv4_ext.errors import ConfigError
from sglang_dsv4_ext.runtime.index_k import capture_format

if TYPE_CHECKING:
    from sglang_dsv4_ext.runtime.sglang_types import C4Indexer, DSV4TokenToKVPool, ForwardBatch

logger = logging.getLogger("sglang_dsv4_ext.index_k_capture")

FORMAT_VERSION = capture_format.FORMAT_VERSION
COMPRESS_RATIO = 4  # c4: one index-K row per 4 tokens
_ATTR = "_dsv4_index_k_capture"  # the decision, kept on the pool it was made for
_UNDECIDED = object()
MIB = 1 << 20


# --- which layers, which rows -------------------------------------------------------------------


def model_c4_layers(pool: DSV4TokenToKVPool) -> list[int]:
    return c4_layer_ids(pool.compression_ratios)


def c4_layer_ids(compression_ratios: Sequence[int]) -> list[int]:
    """Layer ids (model numbering) whose compressor ratio is 4: the layers with a c4 indexer."""
    return [layer for layer, ratio in enumerate(compression_ratios) if ratio == 4]


def selected_layers(spec: str, c4_layers: Sequence[int], stage: range | None = None) -> frozenset[int]:
    """The c4 layers ``spec`` (``all`` | ``every:N`` | ``2,4,10``) selects on this pipeline stage."""
    if spec == "all":
        chosen = list(c4_layers)
    elif spec.startswith("every:"):
        chosen = list(c4_layers)[:: int(spec.split(":", 1)[1])]
    else:
        chosen = [int(i) for i in spec.split(",")]
        unknown = sorted(set(chosen) - set(c4_layers))
        if unknown:
            raise ConfigError(
                f"{ENV_CAPTURE_LAYERS}={spec!r}: {unknown} are not c4 indexer layers of this model; "
                f"allowed ids: {','.join(map(str, c4_layers))}"
            )
    return frozenset(layer for layer in chosen if stage is None or layer in stage)


class RequestRows(NamedTuple):
    rid: str
    rows: list[int]  # query rows of the forward call
    key_bound: int  # host-side upper bound of the keys its rows read (0: none yet)


def request_row_groups(forward_batch: ForwardBatch, num_rows: int, width: int) -> list[RequestRows]:
    """The query rows of each request of the batch: extend lengths when SGLang gives them (prefill, mixed), else
    an equal split over the batch (decode, target verify). ``width``: the most keys a page-table row can address."""
    lengths = _rows_per_request(forward_batch, num_rows)
    rids = getattr(forward_batch, "rids", None)
    if rids is None or len(rids) != len(lengths):
        rids = [f"batch{id(forward_batch):x}-{i}" for i in range(len(lengths))]
    bounds = _key_bounds(forward_batch, len(lengths), width)
    groups, start = [], 0
    for rid, n, bound in zip(rids, lengths, bounds):
        groups.append(RequestRows(str(rid), list(range(start, start + n)), bound))
        start += n
    return [group for group in groups if group.rows]


def _rows_per_request(forward_batch: ForwardBatch, num_rows: int) -> list[int]:
    extend = getattr(forward_batch, "extend_seq_lens_cpu", None)
    if extend is not None and 0 < sum(extend) <= num_rows:
        return [int(n) for n in extend]
    batch_size = int(getattr(forward_batch, "batch_size", 0) or 0)
    if batch_size > 0 and num_rows % batch_size == 0:
        return [num_rows // batch_size] * batch_size
    return [num_rows]


def _key_bounds(forward_batch: ForwardBatch, requests: int, width: int) -> list[int]:
    """Per request, at most ``seq_lens_cpu // 4`` keys (host data, no device read), never past the page table."""
    seq_lens_cpu = getattr(forward_batch, "seq_lens_cpu", None)
    if seq_lens_cpu is None or len(seq_lens_cpu) != requests:
        return [width] * requests
    return [min(width, int(n) // COMPRESS_RATIO) for n in seq_lens_cpu]


def sample_rows(rows: Sequence[int], limit: int) -> list[int]:
    """At most ``limit`` evenly spaced rows, the last (longest context) always among them."""
    if len(rows) <= limit:
        return list(rows)
    picks = torch.linspace(len(rows) - 1, 0, limit).round().long().unique().tolist()
    return [rows[i] for i in sorted(picks)]


# --- the key rows a request read (on the device: nothing here waits for it) -----------------------


def read_slots(table_row: torch.Tensor, length: torch.Tensor, bound: int, page_size: int) -> torch.Tensor:
    """Pool slot of key t < ``bound`` of one page-table row ``[W]``, -1 from ``length`` (a 0-d device tensor) on.
    ``bound`` <= W * page_size."""
    t = torch.arange(bound, dtype=torch.int64, device=table_row.device)
    slots = table_row.long()[t // page_size] * page_size + t % page_size
    return slots.masked_fill(t >= length, -1)


def table_slots(table_row: torch.Tensor, length: int, page_size: int) -> torch.Tensor:
    """Host-side: the slots of the first ``length`` keys of a page-table row."""
    t = torch.arange(length, dtype=torch.int64)
    return table_row.long()[t // page_size] * page_size + t % page_size


def gather_keys(cache: torch.Tensor, slots: torch.Tensor, head_dim: int) -> torch.Tensor:
    """bf16 rows at ``slots`` (any shape; -1 gives zeros) of one layer's bf16 index-K page rows."""
    flat = cache.view(torch.bfloat16).reshape(-1, head_dim)
    index = slots.clamp(0, flat.shape[0] - 1)  # past-the-end page-table entries are masked, never read
    rows = flat[index.reshape(-1)].reshape(*slots.shape, head_dim)
    return rows.masked_fill((slots < 0).unsqueeze(-1), 0)


class StoredKeys(NamedTuple):
    """What one forward pass's bf16 store of a layer received, as fp32 values before bf16 rounding."""

    forward_batch: object  # the forward pass they belong to (identity)
    slots: torch.Tensor  # [N] int64, -1: a row the store skipped
    rows: torch.Tensor  # [N, D] fp32

    def lookup(self, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """fp32 rows at ``slots`` ``[T]`` (zeros where not stored) and whether each was stored in this pass."""
        order = self.slots.argsort()
        stored = self.slots[order]
        at = torch.searchsorted(stored, slots).clamp(max=stored.numel() - 1)
        found = (stored[at] == slots) & (slots >= 0)
        return self.rows[order[at]].masked_fill(~found.unsqueeze(-1), 0), found


def prerounding_rows(
    kv: torch.Tensor,
    norm_weight: torch.Tensor,
    norm_eps: float,
    freqs_cis: torch.Tensor,
    positions: torch.Tensor,
    slots: torch.Tensor,
) -> torch.Tensor:
    """fp32 ``[N, D]``: RMSNorm, RoPE and Hadamard of the store's input, in float64 (no TF32 matmul, no kernel's
    rounding order), rounded once to fp32: what the bf16 store rounds, to within a few fp32 ulps."""
    from kernels_sm120 import reference

    positions = positions.long().masked_fill(slots < 0, 0)  # skipped rows may carry any position
    return reference.index_k_transform_reference(kv, norm_weight, norm_eps, freqs_cis, positions).float()


def _host_buffer(t: torch.Tensor) -> torch.Tensor:
    """An empty host tensor like ``t``: pinned when ``t`` lives on a GPU (so the copy into it can be asynchronous)."""
    return torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=t.is_cuda)


def _to_host(t: torch.Tensor) -> torch.Tensor:
    """A host copy that does not wait: non-blocking into a pinned buffer (the writer thread waits)."""
    out = _host_buffer(t)
    out.copy_(t, non_blocking=True)
    return out


def _to_device(values: Sequence[int], device: torch.device) -> torch.Tensor:
    """int64 ``values`` on ``device`` without waiting: from pinned memory, non-blocking."""
    host = torch.tensor(values, dtype=torch.int64)
    if device.type == "cpu":
        return host
    return host.pin_memory().to(device, non_blocking=True)


def _ready_event(device: torch.device) -> torch.cuda.Event | None:
    """A CUDA event after the copies queued so far on this stream (None on CPU: the copies are done)."""
    if device.type != "cuda":
        return None
    ready = torch.cuda.Event()
    ready.record()
    return ready


def _graph_capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


# --- what the writer thread makes of the copies ----------------------------------------------------


class CaptureRefusedError(Exception):
    """What arrived on the host is not a consistent capture; the file is not written."""


def finish_record(meta: dict[str, Any], host: dict[str, torch.Tensor], page_size: int) -> dict[str, Any]:
    """The file's dict, once the copies have landed: checked, trimmed to the keys read, checksummed."""
    lens, slots = host["seq_lens"], host["slots"]
    n = int(lens.max())
    if int(lens.min()) < 0:
        raise CaptureRefusedError(f"negative key count in seq_lens {lens.tolist()}")
    if n > slots.numel():
        raise CaptureRefusedError(f"a row reads {n} keys, more than the {slots.numel()} gathered (bound from the host)")
    for r, length in enumerate(lens.tolist()):
        if not torch.equal(table_slots(host["tables"][r], length, page_size), slots[:length]):
            raise CaptureRefusedError(
                f"query row {meta['query_rows'][r]} reads other pool slots than the request's "
                f"last row (one request's rows share its page table)"
            )
    record = {name: meta[name] for name in capture_format.META_FIELDS}
    record.update({name: meta[name] for name in capture_format.OPTIONAL_META_FIELDS if name in meta})
    record.update(
        q=host["q"],
        weights=host["weights"],
        seq_lens=lens,
        query_rows=torch.tensor(meta["query_rows"], dtype=torch.int64),
        k=host["k"][:n].clone(),
        slots=slots[:n].clone(),
    )  # clone: save the rows read, not the buffer
    if capture_format.PREROUNDING in host and bool(host["k_fp32_found"][:n].all()):
        record[capture_format.PREROUNDING] = host[capture_format.PREROUNDING][:n].clone()
    record[capture_format.CHECKSUM] = capture_format.content_checksum(record)
    return record


# --- writing --------------------------------------------------------------------------------------


class _Writer:
    """One daemon thread writing queued records; counts what it wrote."""

    def __init__(self) -> None:
        # (file, what makes its record, the CUDA event the copies wait for)
        self.queue: queue.Queue[tuple[Path, Callable[[], dict[str, Any]], torch.cuda.Event | None]] = queue.Queue()
        self.files = 0
        self.failed = 0
        self._thread: threading.Thread | None = None

    def submit(self, path: Path, make_record: Callable[[], dict[str, Any]], ready: torch.cuda.Event | None) -> None:
        """``make_record`` runs on the writer thread after ``ready`` (a CUDA event, or None) has completed."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="dsv4-index-k-capture", daemon=True)
            self._thread.start()
        self.queue.put((path, make_record, ready))

    def _run(self) -> None:
        while True:
            path, make_record, ready = self.queue.get()
            try:
                self._write(path, make_record, ready)
            finally:
                self.queue.task_done()

    def _write(self, path: Path, make_record: Callable[[], dict[str, Any]], ready: torch.cuda.Event | None) -> None:
        # Written whole under NAME.part, then linked to NAME (os.link never replaces a file): a reader
        # (recall) sees complete files only, and a failed write leaves nothing behind.
        part = path.with_name(path.name + ".part")
        try:
            if ready is not None:
                ready.synchronize()  # the non-blocking device->host copies have landed (off the forward thread)
            record = make_record()
            with open(part, "xb") as f:  # never overwrite
                torch.save(record, f)
            os.link(part, path)
        except Exception as exc:  # a full disk (or an inconsistent capture) must not take the server down
            self.failed += 1
            logger.warning("index-K capture: did not write %s: %s", path, exc)
            return
        finally:
            _unlink_quietly(part)
        self.files += 1

    def drain(self) -> None:
        if self._thread is not None:
            self.queue.join()


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def new_run_directory(root: str) -> Path:
    """``root/<host>-pid<pid>-<time>[-n]``, created new (never reused)."""
    base = Path(root)
    try:
        base.mkdir(parents=True, exist_ok=True)
        stem = f"{socket.gethostname()}-pid{os.getpid()}-{time.strftime('%Y%m%dT%H%M%S')}"
        for n in range(100):
            run = base / (stem if n == 0 else f"{stem}-{n}")
            try:
                run.mkdir()
                return run
            except FileExistsError:
                continue
    except OSError as exc:
        raise ConfigError(f"{ENV_CAPTURE}={root!r}: cannot create a capture directory there: {exc}") from exc
    raise ConfigError(f"{ENV_CAPTURE}={root!r}: no new capture subdirectory could be created under it")


# --- the capture ----------------------------------------------------------------------------------


class _Call(NamedTuple):
    """One indexer call's device tensors."""

    q: torch.Tensor  # bf16 [N, H, D]
    weights: torch.Tensor  # [N, H]
    lens: torch.Tensor  # [N] c4 lengths
    table: torch.Tensor  # [N, W] page table
    cache: torch.Tensor  # the layer's bf16 index-K pages
    stored: StoredKeys | None  # this pass's store of the layer, if capture kept it


def _queued_bytes(rows: int, heads: int, head_dim: int, keys: int, width: int, prerounding: bool) -> int:
    """Host bytes one capture holds until written: q, weights, lengths, page-table rows, keys, slots (+ fp32 keys)."""
    per_key = head_dim * 2 + 8 + (head_dim * 4 + 1 if prerounding else 0)
    return rows * (heads * (head_dim * 2 + 4) + 8 + width * 4) + keys * per_key


class IndexKCapture:
    """What one process captures; see the module docstring."""

    def __init__(
        self, config: CaptureConfig, layers: frozenset[int], run_dir: Path, c4_layers: Sequence[int] | None = None
    ) -> None:
        self.config, self.layers, self.run_dir = config, layers, run_dir
        # the model's c4 layer ids, recorded in every file: recall refuses a layer that is none of them
        self.c4_layers = None if c4_layers is None else [int(layer) for layer in c4_layers]
        self.max_bytes = config.max_mb * MIB
        self.admitted: dict[str, int] = {}  # request id -> request_index
        self.done: set[tuple[str, int]] = set()  # (request id, layer)
        self.queued_bytes = 0
        self.stopped: str | None = None  # why capture stopped
        self._request_bound_logged = False
        self._stored: dict[int, StoredKeys] = {}  # layer -> this forward pass's store, until its indexer reads it
        self.writer = _Writer()
        atexit.register(self.writer.drain)
        logger.info(
            "index-K capture on: %s (requests <= %d, layers %s, rows <= %d per request and layer, <= %d MiB)",
            run_dir,
            config.requests,
            sorted(layers),
            config.rows,
            config.max_mb,
        )

    def _layer_open(self, layer: int) -> bool:
        return not self.stopped and layer in self.layers and not _graph_capturing()

    # the compressor's bf16 store of one layer, before that layer's indexer call
    def note_stored(
        self,
        layer: int,
        forward_batch: ForwardBatch,
        kv: torch.Tensor,
        norm_weight: torch.Tensor,
        norm_eps: float,
        freqs_cis: torch.Tensor,
        positions: torch.Tensor,
        slots: torch.Tensor,
    ) -> None:
        self._stored.pop(layer, None)
        if kv.shape[0] == 0 or not self._layer_open(layer):
            return
        rids = getattr(forward_batch, "rids", None)
        if rids is not None and not any(self._wants(str(rid), layer, log=False) for rid in rids):
            return
        rows = prerounding_rows(kv, norm_weight, norm_eps, freqs_cis, positions, slots)
        self._stored[layer] = StoredKeys(forward_batch, slots.long(), rows)

    # one indexer call
    def record(
        self,
        c4_indexer: C4Indexer,
        forward_batch: ForwardBatch,
        q: torch.Tensor,
        weights: torch.Tensor,
        c4_seq_lens: torch.Tensor,
        page_table: torch.Tensor,
        cache: torch.Tensor,
    ) -> None:
        layer = int(c4_indexer.layer_id)
        stored = self._stored.pop(layer, None)
        if not self._layer_open(layer):
            return
        if stored is not None and stored.forward_batch is not forward_batch:
            stored = None  # kept from another forward pass: its slots may hold other rows by now
        page_size = cache.shape[1] // (2 * q.shape[-1])
        groups = [
            group._replace(rows=sample_rows(group.rows, self.config.rows))
            for group in request_row_groups(forward_batch, q.shape[0], page_table.shape[1] * page_size)
            if self._wants(group.rid, layer)
        ]
        call = _Call(q, weights, c4_seq_lens, page_table, cache, stored)
        topk = int(getattr(c4_indexer, "index_topk", 0) or 0)
        for group in groups:
            self._capture(group, layer, topk, page_size, call)
            if self.stopped:
                return

    def _wants(self, rid: str, layer: int, log: bool = True) -> bool:
        if (rid, layer) in self.done:
            return False
        if rid in self.admitted or len(self.admitted) < self.config.requests:
            return True
        if log:
            self._log_request_bound()
        return False

    def _capture(self, group: RequestRows, layer: int, topk: int, page_size: int, call: _Call) -> None:
        if group.key_bound <= 0:
            return  # nothing read yet (a prompt shorter than one compressed group)
        if not self._wants(group.rid, layer):  # several new requests in one call: the bound counts admissions
            return
        _, heads, head_dim = call.q.shape
        nbytes = _queued_bytes(
            len(group.rows), heads, head_dim, group.key_bound, call.table.shape[1], call.stored is not None
        )
        if self.queued_bytes + nbytes > self.max_bytes:
            self._stop(f"size cap reached ({ENV_CAPTURE_MAX_MB}={self.config.max_mb})")
            return
        request_index = self.admitted.setdefault(group.rid, len(self.admitted))
        host = self._copy_to_host(group, page_size, call)
        meta = {
            "format_version": FORMAT_VERSION,
            "layer": layer,
            "request_id": group.rid,
            "request_index": request_index,
            "index_topk": topk,
            "dtype": capture_format.STORED_DTYPE,
            "page_size": page_size,
            "query_rows": list(group.rows),
        }
        if self.c4_layers is not None:
            meta["c4_layers"] = list(self.c4_layers)
        ready = _ready_event(call.q.device)
        self.queued_bytes += nbytes
        self.done.add((group.rid, layer))
        self.writer.submit(
            self.run_dir / f"L{layer:03d}-req{request_index:04d}.pt",
            lambda: finish_record(meta, host, page_size),
            ready,
        )
        self._check_complete()

    @staticmethod
    def _copy_to_host(group: RequestRows, page_size: int, call: _Call) -> dict[str, torch.Tensor]:
        """Gather on the device and queue the copies; nothing here reads a device value."""
        index = _to_device(group.rows, call.q.device)
        lens = call.lens.index_select(0, index).long()
        tables = call.table.index_select(0, index)
        # Keys through the last sampled row's page table (the longest context); the writer checks the other rows.
        slots = read_slots(tables[-1], lens[-1], group.key_bound, page_size)
        device = {
            "q": call.q.index_select(0, index),
            "weights": call.weights.index_select(0, index).float(),
            "seq_lens": lens,
            "tables": tables,
            "slots": slots,
            "k": gather_keys(call.cache, slots, call.q.shape[-1]),
        }
        if call.stored is not None:
            device[capture_format.PREROUNDING], device["k_fp32_found"] = call.stored.lookup(slots)
        return {name: _to_host(t) for name, t in device.items()}

    def _check_complete(self) -> None:
        if len(self.admitted) >= self.config.requests and len(self.done) >= len(self.admitted) * len(self.layers):
            self._stop(
                f"every sampled layer of {len(self.admitted)} requests captured ({ENV_CAPTURE_REQUESTS}="
                f"{self.config.requests})"
            )

    def _log_request_bound(self) -> None:
        if not self._request_bound_logged:
            self._request_bound_logged = True
            logger.info(
                "index-K capture: request bound reached (%s=%d): no new requests; %s",
                ENV_CAPTURE_REQUESTS,
                self.config.requests,
                self.summary(),
            )

    def _stop(self, why: str) -> None:
        self.stopped = why
        self._stored.clear()
        logger.info("index-K capture stopped: %s; %s", why, self.summary())

    def summary(self) -> str:
        return (
            f"{len(self.done)} files ({self.queued_bytes / MIB:.1f} MiB) queued for {len(self.admitted)} "
            f"requests, {self.writer.files} written, {self.writer.failed} failed, under {self.run_dir}"
        )

    def flush(self) -> None:
        """Wait until every queued file is written."""
        self.writer.drain()


# --- the decision, once per pool ---------------------------------------------------------------


def capture_for(pool: DSV4TokenToKVPool) -> IndexKCapture | None:
    """This pool's capture (None: capture off here), decided when the pool is built (the pool hook announces
    it, so a bad layer id or directory stops start-up, not a forward pass) or else at its first indexer call."""
    decided = getattr(pool, _ATTR, _UNDECIDED)
    if decided is _UNDECIDED:
        decided = _decide(pool)
        setattr(pool, _ATTR, decided)
    return cast("IndexKCapture | None", decided)  # what _decide answered, kept on the pool


def _decide(pool: DSV4TokenToKVPool) -> IndexKCapture | None:
    config = load_config()
    if not (config.enabled and config.capture.enabled) or not _is_capture_rank():
        return None
    stage = range(getattr(pool, "_stage_start", 0), getattr(pool, "_stage_end", len(pool.compression_ratios)))
    c4_layers = model_c4_layers(pool)
    layers = selected_layers(config.capture.layers, c4_layers, stage)
    return IndexKCapture(config.capture, layers, new_run_directory(config.capture.directory), c4_layers)


def _is_capture_rank() -> bool:
    """Attention-TP rank 0 only: every rank of a TP group holds the same indexer heads and keys."""
    try:
        from sglang.srt.distributed.parallel_state import get_attn_tensor_model_parallel_rank

        return bool(get_attn_tensor_model_parallel_rank() == 0)
    except Exception:  # no distributed groups in this process (tests, tools)
        return True
