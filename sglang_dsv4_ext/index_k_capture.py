"""``SGLANG_DSV4_INDEX_K_CAPTURE=DIR``: dump what the bf16 c4 indexer reads, for ``sglang-dsv4 recall DIR``.

Why: ``recall`` answers "is bf16 index-K worth its bytes on *this* traffic?" only from real queries
and keys. The bf16 indexer path (:mod:`sglang_dsv4_ext.hooks.indexer`) calls :meth:`IndexKCapture.record`
with the bf16 queries (after RoPE + Hadamard), the head weights, the per-row c4 lengths and page
table, and the layer's index-K buffer; for each sampled (request, layer) it writes one file in the
format ``recall`` reads (:mod:`sglang_dsv4_ext.recall.cli`).

What a file holds (``format_version`` 2; recall still reads version-1 files without the metadata):
``layer``, ``request_id``, ``request_index``, ``index_topk`` (the model's top-k), ``dtype`` ("bf16"),
``page_size``; ``q`` bf16 ``[R, H, D]``, ``weights`` fp32 ``[R, H]``, ``seq_lens`` int64 ``[R]`` (valid
keys per row), ``query_rows`` int64 ``[R]`` (row numbers within the forward call), ``k`` bf16: the
index-K rows read, in order, either ``[T, D]`` shared by every row (the rows of one request read one
prefix; row r reads the first ``seq_lens[r]``) or ``[R, T, D]`` when their page tables differ
(zero past ``seq_lens[r]``); ``slots`` int64 (``[T]`` or ``[R, T]``, -1 = padding): the pool slot of
each key row, so a reader can check the rows against the pool.

Bounds (:class:`sglang_dsv4_ext.config.CaptureConfig`): distinct requests, sampled c4 layers
(validated here against the model's c4 layers when a pool is built), query rows per
request and layer, and MiB queued. Each bound that stops capturing logs one line.

Costs: decided once per pool when it is built (``capture_for``); off, the cost is one
attribute lookup per call. On, a call that captures something costs one device->host sync (the
sampled rows' lengths and page-table rows, a few hundred bytes), a gather of the key rows, and
non-blocking copies into pinned host memory; a background thread waits for the copies and writes
the files. Once the bounds are reached a call returns at the first check. CUDA-graph replays run
no Python, so decode steps served from a graph are not captured (prefill is; capture decode with
``--disable-cuda-graph``). Only attention-TP rank 0 captures (every TP rank holds the same indexer
heads and keys).

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
from pathlib import Path
from typing import Dict, FrozenSet, List, Optional, Sequence, Tuple

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

logger = logging.getLogger("sglang_dsv4_ext.index_k_capture")

FORMAT_VERSION = 2
_ATTR = "_dsv4_index_k_capture"  # the decision, kept on the pool it was made for
_UNDECIDED = object()
MIB = 1 << 20


# --- which layers, which rows -------------------------------------------------------------------

def model_c4_layers(pool) -> List[int]:
    return c4_layer_ids(pool.compression_ratios)


def c4_layer_ids(compression_ratios: Sequence[int]) -> List[int]:
    """Layer ids (model numbering) whose compressor ratio is 4: the layers with a c4 indexer."""
    return [layer for layer, ratio in enumerate(compression_ratios) if ratio == 4]


def selected_layers(spec: str, c4_layers: Sequence[int], stage: Optional[range] = None) -> FrozenSet[int]:
    """The c4 layers ``spec`` (``all`` | ``every:N`` | ``2,4,10``) selects on this pipeline stage."""
    if spec == "all":
        chosen = list(c4_layers)
    elif spec.startswith("every:"):
        chosen = list(c4_layers)[::int(spec.split(":", 1)[1])]
    else:
        chosen = [int(i) for i in spec.split(",")]
        unknown = sorted(set(chosen) - set(c4_layers))
        if unknown:
            raise ConfigError(
                f"{ENV_CAPTURE_LAYERS}={spec!r}: {unknown} are not c4 indexer layers of this model; "
                f"allowed ids: {','.join(map(str, c4_layers))}"
            )
    return frozenset(layer for layer in chosen if stage is None or layer in stage)


def request_row_groups(forward_batch, num_rows: int) -> List[Tuple[str, List[int]]]:
    """``(request id, query rows)`` per request of the batch: extend lengths when SGLang gives
    them (prefill, mixed), else an equal split over the batch (decode, target verify)."""
    lengths = _rows_per_request(forward_batch, num_rows)
    rids = getattr(forward_batch, "rids", None)
    if rids is None or len(rids) != len(lengths):
        rids = [f"batch{id(forward_batch):x}-{i}" for i in range(len(lengths))]
    groups, start = [], 0
    for rid, n in zip(rids, lengths):
        groups.append((str(rid), list(range(start, start + n))))
        start += n
    return [(rid, rows) for rid, rows in groups if rows]


def _rows_per_request(forward_batch, num_rows: int) -> List[int]:
    extend = getattr(forward_batch, "extend_seq_lens_cpu", None)
    if extend is not None and 0 < sum(extend) <= num_rows:
        return [int(n) for n in extend]
    batch_size = int(getattr(forward_batch, "batch_size", 0) or 0)
    if batch_size > 0 and num_rows % batch_size == 0:
        return [num_rows // batch_size] * batch_size
    return [num_rows]


def sample_rows(rows: Sequence[int], limit: int) -> List[int]:
    """At most ``limit`` evenly spaced rows, the last (longest context) always among them."""
    if len(rows) <= limit:
        return list(rows)
    picks = torch.linspace(len(rows) - 1, 0, limit).round().long().unique().tolist()
    return [rows[i] for i in sorted(picks)]


# --- the key rows a request read ----------------------------------------------------------------

def key_slots(table_rows: torch.Tensor, lens: torch.Tensor, page_size: int) -> torch.Tensor:
    """Pool slot of key t of each row ``[R, T]`` (T = the longest row), -1 past the row's length."""
    t = torch.arange(int(lens.max()), dtype=torch.int64)
    slots = table_rows.long()[:, t // page_size] * page_size + t % page_size
    return slots.masked_fill(t.unsqueeze(0) >= lens.unsqueeze(1), -1)


def shared_slots(slots: torch.Tensor) -> Optional[torch.Tensor]:
    """The longest row's slots if every row reads a prefix of them (one request's rows), else None."""
    longest = slots[(slots >= 0).sum(1).argmax()]
    same = (slots < 0) | (slots == longest.unsqueeze(0))
    return longest if bool(same.all()) else None


def gather_keys(cache: torch.Tensor, slots: torch.Tensor, head_dim: int) -> torch.Tensor:
    """bf16 rows at ``slots`` (any shape; -1 gives zeros) of one layer's bf16 index-K page rows."""
    flat = cache.view(torch.bfloat16).reshape(-1, head_dim)
    index = slots.clamp(min=0).to(cache.device)
    rows = flat[index.reshape(-1)].reshape(*slots.shape, head_dim)
    return rows.masked_fill((slots < 0).to(cache.device).unsqueeze(-1), 0)


def _to_host(t: torch.Tensor) -> torch.Tensor:
    """A host copy that does not wait: pinned memory + ``non_blocking`` on CUDA (the writer waits)."""
    if t.device.type == "cpu":
        return t.clone()
    out = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    out.copy_(t, non_blocking=True)
    return out


def _graph_capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


# --- writing --------------------------------------------------------------------------------------

class _Writer:
    """One daemon thread writing queued records; counts what it wrote."""

    def __init__(self):
        self.queue: "queue.Queue" = queue.Queue()
        self.files = 0
        self.bytes = 0
        self.failed = 0
        self._thread: Optional[threading.Thread] = None

    def submit(self, path: Path, record: dict, ready, nbytes: int) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="dsv4-index-k-capture", daemon=True)
            self._thread.start()
        self.queue.put((path, record, ready, nbytes))

    def _run(self) -> None:
        while True:
            path, record, ready, nbytes = self.queue.get()
            try:
                self._write(path, record, ready, nbytes)
            finally:
                self.queue.task_done()

    def _write(self, path: Path, record: dict, ready, nbytes: int) -> None:
        # Written whole under NAME.part, then linked to NAME (os.link never replaces a file): a reader
        # (recall) sees complete files only, and a failed write leaves nothing behind.
        part = path.with_name(path.name + ".part")
        try:
            if ready is not None:
                ready.synchronize()  # the non-blocking device->host copies have landed
            with open(part, "xb") as f:  # never overwrite
                torch.save(record, f)
            os.link(part, path)
        except Exception as exc:  # a full disk must not take the server down
            self.failed += 1
            logger.warning("index-K capture: could not write %s: %s", path, exc)
            return
        finally:
            _unlink_quietly(part)
        self.files += 1
        self.bytes += nbytes

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

class IndexKCapture:
    """What one process captures; see the module docstring."""

    def __init__(self, config: CaptureConfig, layers: FrozenSet[int], run_dir: Path):
        self.config, self.layers, self.run_dir = config, layers, run_dir
        self.max_bytes = config.max_mb * MIB
        self.admitted: Dict[str, int] = {}  # request id -> request_index
        self.done: set = set()  # (request id, layer)
        self.queued_bytes = 0
        self.stopped: Optional[str] = None  # why capture stopped
        self._request_bound_logged = False
        self.writer = _Writer()
        atexit.register(self.writer.drain)
        logger.info("index-K capture on: %s (requests <= %d, layers %s, rows <= %d per request and layer, "
                    "<= %d MiB)", run_dir, config.requests, sorted(layers), config.rows, config.max_mb)

    # one indexer call
    def record(self, c4_indexer, forward_batch, q, weights, c4_seq_lens, page_table, cache) -> None:
        layer = int(c4_indexer.layer_id)
        if self.stopped or layer not in self.layers or _graph_capturing():
            return
        groups = [(rid, sample_rows(rows, self.config.rows))
                  for rid, rows in request_row_groups(forward_batch, q.shape[0]) if self._wants(rid, layer)]
        if not groups:
            return
        rows = [r for _, group in groups for r in group]
        index = torch.tensor(rows, dtype=torch.int64, device=q.device)
        # The one sync of a capturing call: the sampled rows' lengths and page-table rows.
        host = torch.cat([c4_seq_lens.index_select(0, index).unsqueeze(1).to(page_table.dtype),
                          page_table.index_select(0, index)], dim=1).cpu().long()
        at = dict(zip(rows, range(len(rows))))
        topk = int(getattr(c4_indexer, "index_topk", 0) or 0)
        for rid, group in groups:
            picked = [at[r] for r in group]
            self._capture(rid, layer, topk, group, q, weights, host[picked], cache)
            if self.stopped:
                return

    def _wants(self, rid: str, layer: int) -> bool:
        if (rid, layer) in self.done:
            return False
        if rid in self.admitted or len(self.admitted) < self.config.requests:
            return True
        self._log_request_bound()
        return False

    def _capture(self, rid, layer, topk, rows, q, weights, host, cache) -> None:
        lens, table = host[:, 0], host[:, 1:]
        if int(lens.max()) <= 0:
            return  # nothing read yet (a prompt shorter than one compressed group)
        if not self._wants(rid, layer):  # several new requests in one call: the bound counts admissions
            return
        head_dim = q.shape[-1]
        page_size = cache.shape[1] // (2 * head_dim)
        slots = key_slots(table, lens, page_size)
        shared = shared_slots(slots)
        slots = shared if shared is not None else slots
        nbytes = len(rows) * q.shape[1] * (head_dim * 2 + 4) + slots.numel() * (head_dim * 2 + 8) + len(rows) * 16
        if self.queued_bytes + nbytes > self.max_bytes:
            self._stop(f"size cap reached ({ENV_CAPTURE_MAX_MB}={self.config.max_mb})")
            return
        request_index = self.admitted.setdefault(rid, len(self.admitted))
        index = torch.tensor(rows, dtype=torch.int64, device=q.device)
        record = {
            "format_version": FORMAT_VERSION, "layer": layer, "request_id": rid, "request_index": request_index,
            "index_topk": topk, "dtype": "bf16", "page_size": page_size,
            "q": _to_host(q.index_select(0, index)), "weights": _to_host(weights.index_select(0, index).float()),
            "k": _to_host(gather_keys(cache, slots, head_dim)), "slots": slots, "seq_lens": lens.clone(),
            "query_rows": torch.tensor(rows, dtype=torch.int64),
        }
        ready = None
        if q.is_cuda:
            ready = torch.cuda.Event()
            ready.record()
        self.queued_bytes += nbytes
        self.done.add((rid, layer))
        self.writer.submit(self.run_dir / f"L{layer:03d}-req{request_index:04d}.pt", record, ready, nbytes)
        self._check_complete()

    def _check_complete(self) -> None:
        if len(self.admitted) >= self.config.requests and len(self.done) >= len(self.admitted) * len(self.layers):
            self._stop(f"every sampled layer of {len(self.admitted)} requests captured ({ENV_CAPTURE_REQUESTS}="
                       f"{self.config.requests})")

    def _log_request_bound(self) -> None:
        if not self._request_bound_logged:
            self._request_bound_logged = True
            logger.info("index-K capture: request bound reached (%s=%d): no new requests; %s",
                        ENV_CAPTURE_REQUESTS, self.config.requests, self.summary())

    def _stop(self, why: str) -> None:
        self.stopped = why
        logger.info("index-K capture stopped: %s; %s", why, self.summary())

    def summary(self) -> str:
        return (f"{len(self.done)} files ({self.queued_bytes / MIB:.1f} MiB) queued for {len(self.admitted)} "
                f"requests, {self.writer.files} written, {self.writer.failed} failed, under {self.run_dir}")

    def flush(self) -> None:
        """Wait until every queued file is written."""
        self.writer.drain()


# --- the decision, once per pool ---------------------------------------------------------------

def capture_for(pool) -> Optional[IndexKCapture]:
    """This pool's capture (None: capture off here), decided when the pool is built (the pool hook announces
    it, so a bad layer id or directory stops start-up, not a forward pass) or else at its first indexer call."""
    decided = getattr(pool, _ATTR, _UNDECIDED)
    if decided is _UNDECIDED:
        decided = _decide(pool)
        setattr(pool, _ATTR, decided)
    return decided


def _decide(pool) -> Optional[IndexKCapture]:
    config = load_config()
    if not (config.enabled and config.capture.enabled) or not _is_capture_rank():
        return None
    stage = range(getattr(pool, "_stage_start", 0), getattr(pool, "_stage_end", len(pool.compression_ratios)))
    layers = selected_layers(config.capture.layers, model_c4_layers(pool), stage)
    return IndexKCapture(config.capture, layers, new_run_directory(config.capture.directory))


def _is_capture_rank() -> bool:
    """Attention-TP rank 0 only: every rank of a TP group holds the same indexer heads and keys."""
    try:
        from sglang.srt.distributed.parallel_state import get_attn_tensor_model_parallel_rank

        return get_attn_tensor_model_parallel_rank() == 0
    except Exception:  # no distributed groups in this process (tests, tools)
        return True
