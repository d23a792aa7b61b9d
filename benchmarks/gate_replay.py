"""GPU replay of the index-K read race R3 and of the wait-ahead fix, in plain torch.

What it replays: SGLang's HiCache loads each layer's KV/index-K host->device on a side stream and
records one CUDA event per layer (``LayerLoadingEvent.complete(i)``).  Readers gate themselves with
``LayerDoneCounter.wait_until(i)``, a GPU-side ``current_stream().wait_event``; the host never blocks.
In a breakable prefill CUDA graph only attention runs eagerly at the breaks.  Layer L's indexer, which
reads layer L's index-K, is captured in the segment that replays right after layer L-1's eager break.
That break waited only for load L-1 (R3).  The fix ("wait ahead"): wait for load 0 before the replay,
and at the eager break of layer L also wait for load L+1.

How: pinned host buffers hold each layer's rows (bf16, index-K page shaped) with content that depends
on the trial id; the device buffer holds the previous trial's content.  A side stream copies layer by
layer with an injected ``torch.cuda._sleep`` before each layer (like SGLANG_TEST_HICACHE_H2D_DELAY_CYCLES)
and records one event per layer through a verbatim mirror of SGLang's classes.  Readers on the compute
stream sum each layer's rows into a device result tensor; after each trial (one sync) every sum is
compared with the sum the trial's content must give.  A mismatch is a stale (or torn) read.

This is the model: it runs with torch alone, so the two classes are mirrored below, unchanged
(tests/integration/test_replay_copy_of_layer_done_counter.py compares them with the installed SGLang).
The same race in SGLang's own pool, host pool, HiCacheController and breakable CUDA graph, with the
extension activated, is benchmarks/sglang_gpu/race.py.

Run:  PYTHONUNBUFFERED=1 python -m benchmarks.gate_replay        (writes CSV + JSON under $OUT or out/gate_replay)
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

# ---------------------------------------------------------------------------------------------------
# Verbatim mirror of sglang/srt/managers/cache_controller.py (sglang 0.5.23, lines 65-110).
# Only the import of device_module differs: SGLang uses torch.get_device_module(), which is torch.cuda
# on an NVIDIA machine.
# ---------------------------------------------------------------------------------------------------
device_module = torch.cuda


class LayerLoadingEvent:
    def __init__(self, num_layers: int):
        self._num_layers = num_layers
        self.load_events = [device_module.Event() for _ in range(num_layers)]
        self.start_event = device_module.Event()  # start event on controller stream

    def complete(self, layer_index: int):
        assert 0 <= layer_index < self._num_layers
        self.load_events[layer_index].record()

    def wait(self, layer_index: int):
        device_module.current_stream().wait_event(self.load_events[layer_index])

    @property
    def finish_event(self):
        return self.load_events[-1]


class LayerDoneCounter:
    def __init__(self, num_layers: int):
        self.num_layers = num_layers
        # extra producer and consumer counters for overlap mode
        self.num_counters = 3
        self.events = [LayerLoadingEvent(num_layers) for _ in range(self.num_counters)]
        self.producer_index = -1
        self.consumer_index = -1

    def update_producer(self):
        self.producer_index = (self.producer_index + 1) % self.num_counters
        assert self.events[self.producer_index].finish_event.query(), (
            "Producer finish event should be ready before being reused."
        )
        return self.producer_index

    def set_consumer(self, index: int):
        self.consumer_index = index

    def wait_until(self, threshold: int):
        if self.consumer_index < 0:
            return
        self.events[self.consumer_index].wait(threshold)

    def reset(self):
        self.producer_index = -1
        self.consumer_index = -1


# ---------------------------------------------------------------------------------------------------
# Schedules
# ---------------------------------------------------------------------------------------------------
# The main phase (each >= 2000 trials, interleaved round-robin).
EAGER_UNGATED = "eager_ungated"  # (1) no waits at all: must read stale (proves the detector)
EAGER_GATED = "eager_gated"  # (2) wait_until(L) before reading L: must read nothing stale
GRAPH_STOCK = "graph_stock_r3"  # (3) breakable replay, break L waits only for L: must read stale
GRAPH_WAIT_AHEAD = "graph_wait_ahead"  # (4) the fix: wait 0 before replay, wait L+1 after attention L
MAIN_SCHEDULES = (EAGER_UNGATED, EAGER_GATED, GRAPH_STOCK, GRAPH_WAIT_AHEAD)

# Extra designs, timed in the sweep so the choice of fix is backed by numbers.
GRAPH_WAIT_AHEAD_FIRST = "graph_wait_ahead_first"  # wait L+1 at break L *before* attention L
GRAPH_WAIT_ALL = "graph_wait_all"  # wait for the last layer before replay (full-graph runner's rule)
SWEEP_SCHEDULES = (GRAPH_STOCK, GRAPH_WAIT_AHEAD, GRAPH_WAIT_AHEAD_FIRST, GRAPH_WAIT_ALL)

MUST_READ_STALE = (EAGER_UNGATED, GRAPH_STOCK)  # in the main (load-bound) phase
MUST_BE_CLEAN = (EAGER_GATED, GRAPH_WAIT_AHEAD, GRAPH_WAIT_AHEAD_FIRST, GRAPH_WAIT_ALL)
ALL_SCHEDULES = MAIN_SCHEDULES + (GRAPH_WAIT_AHEAD_FIRST, GRAPH_WAIT_ALL)

# Number of distinct content sets; trial t loads set t % N.  Any N >= 2 makes consecutive trials differ.
CONTENT_SETS = 7


@dataclass
class ReplayConfig:
    layers: int = 43  # DeepSeek-V4-Flash has 43 layers
    pages_per_layer: int = 64  # index-K pages loaded per layer
    page_tokens: int = 64
    index_head_dim: int = 128  # bf16 index-K row = 128 x 2 bytes
    tokens: int = 1024  # rows of the stand-in activations
    hidden: int = 4096
    mlp_out: int = 4096  # MLP matmul: tokens x hidden x mlp_out (the bulk of a segment)
    small_out: int = 1024  # indexer and attention matmuls: tokens x hidden x small_out
    trials: int = 2000  # per main schedule
    delay_factor: float = 2.0  # injected load delay per layer, in units of one layer's compute time
    sweep_factors: tuple = (0.0, 1.0, 2.0)
    sweep_trials: int = 200  # per sweep schedule and factor
    launch_window_us: float = 3000.0  # GPU holds both streams this long while the host enqueues
    progress_every: int = 250
    seed: int = 0

    def validate(self) -> None:
        positive = (
            "layers",
            "pages_per_layer",
            "page_tokens",
            "index_head_dim",
            "tokens",
            "hidden",
            "mlp_out",
            "small_out",
            "trials",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.layers < 2:
            raise ValueError(f"layers must be >= 2 (a break needs a next layer), got {self.layers}")
        if self.delay_factor <= 0:
            raise ValueError(f"delay_factor must be > 0 (the main phase must be load-bound), got {self.delay_factor}")
        if any(f < 0 for f in self.sweep_factors):
            raise ValueError(f"sweep_factors must all be >= 0, got {self.sweep_factors}")
        if self.sweep_trials < 0 or self.launch_window_us < 0:
            raise ValueError("sweep_trials and launch_window_us must be >= 0")
        max_sum = CONTENT_SETS * self.row_elems
        if max_sum >= 2**24:
            raise ValueError(
                f"pages_per_layer*page_tokens*index_head_dim={self.row_elems} too large: the fp32 checksum "
                f"({max_sum}) must stay below 2**24 to be exact"
            )

    @property
    def row_elems(self) -> int:
        return self.pages_per_layer * self.page_tokens * self.index_head_dim


def content_value(trial_set: int, layer: int) -> int:
    """Value every element of `layer` holds in content set `trial_set` (small ints are exact in bf16)."""
    return (trial_set + layer) % CONTENT_SETS + 1


@dataclass
class Row:
    phase: str
    delay_us: float
    schedule: str
    trials: int = 0
    stale_trials: int = 0  # trials with at least one stale layer read
    stale_indexer: int = 0  # stale layer reads by the pre-attention (indexer, captured in graphs) readers
    stale_attn: int = 0  # stale layer reads by the eager attention-break readers
    torn: int = 0  # stale reads whose sum is neither the new nor the previous content (partial landing)
    # Trials where the GPU had passed the start fence before the host finished enqueueing the whole
    # trial.  Conservative: the GPU only starves if the host falls behind it, which it does not while the
    # host enqueues a layer faster than the GPU runs one (see benchmarks/GPU-NOTES.md).
    overruns: int = 0
    times_ms: list = field(default_factory=list)
    load_ms: list = field(default_factory=list)
    enqueue_ms: list = field(default_factory=list)

    def summary(self) -> dict:
        def pct(xs, q):
            return float(statistics.quantiles(xs, n=100)[q - 1]) if len(xs) >= 2 else (xs[0] if xs else math.nan)

        return {
            "phase": self.phase,
            "delay_us": round(self.delay_us, 2),
            "schedule": self.schedule,
            "trials": self.trials,
            "stale_trials": self.stale_trials,
            "stale_indexer_reads": self.stale_indexer,
            "stale_attn_reads": self.stale_attn,
            "torn_reads": self.torn,
            "launch_overruns": self.overruns,
            "median_ms": statistics.median(self.times_ms) if self.times_ms else math.nan,
            "p10_ms": pct(self.times_ms, 10),
            "p90_ms": pct(self.times_ms, 90),
            "median_load_ms": statistics.median(self.load_ms) if self.load_ms else math.nan,
            "median_enqueue_ms": statistics.median(self.enqueue_ms) if self.enqueue_ms else math.nan,
        }


CSV_FIELDS = (
    "trial",
    "phase",
    "delay_us",
    "schedule",
    "ms",
    "load_ms",
    "enqueue_ms",
    "launch_overrun",
    "stale_indexer",
    "stale_attn",
    "torn",
    "first_stale_layer",
    "stale_mask_indexer_hex",
    "stale_mask_attn_hex",
)


def _mask_hex(flags) -> str:
    return hex(sum(1 << i for i, f in enumerate(flags) if f))


class GateReplay:
    """Owns the buffers, streams, counter and captured graphs; runs trials."""

    def __init__(self, cfg: ReplayConfig, log=print):
        if not torch.cuda.is_available():
            raise RuntimeError(
                "gate_replay needs a CUDA GPU: torch.cuda.is_available() is False "
                f"(torch {torch.__version__}, built for CUDA {torch.version.cuda}). "
                "Run it on a CUDA GPU machine: PYTHONUNBUFFERED=1 python -m benchmarks.gate_replay"
            )
        cfg.validate()
        self.cfg = cfg
        self.log = log
        n, e = cfg.layers, cfg.row_elems
        dev = torch.device("cuda")
        torch.manual_seed(cfg.seed)

        # Host side: CONTENT_SETS x layers x rows, pinned, so non_blocking copies are true async DMA.
        self.host_sets = torch.empty((CONTENT_SETS, n, e), dtype=torch.bfloat16, pin_memory=True)
        for s in range(CONTENT_SETS):
            for layer in range(n):
                self.host_sets[s, layer].fill_(content_value(s, layer))
        assert self.host_sets.is_pinned()
        self.expected = torch.tensor(
            [[content_value(s, layer) * e for layer in range(n)] for s in range(CONTENT_SETS)], dtype=torch.float32
        )
        # Device side: content 0 at first, afterwards whatever the previous trial loaded (stale content).
        self.kdev = torch.zeros((n, e), dtype=torch.bfloat16, device=dev)
        self.device_set = None
        # res[0, L]: checksum of layer L read by the pre-attention (indexer) reader; res[1, L]: by attention.
        self.res = torch.full((2, n), math.nan, dtype=torch.float32, device=dev)

        # Stand-in compute so a segment takes realistic GPU time relative to the loads.
        self.x = torch.randn((cfg.tokens, cfg.hidden), dtype=torch.bfloat16, device=dev)
        self.w_mlp = torch.randn((cfg.hidden, cfg.mlp_out), dtype=torch.bfloat16, device=dev) / 64
        self.w_idx = torch.randn((cfg.hidden, cfg.small_out), dtype=torch.bfloat16, device=dev) / 64
        self.w_attn = torch.randn((cfg.hidden, cfg.small_out), dtype=torch.bfloat16, device=dev) / 64
        self.y_mlp = torch.empty((cfg.tokens, cfg.mlp_out), dtype=torch.bfloat16, device=dev)
        self.y_idx = torch.empty((cfg.tokens, cfg.small_out), dtype=torch.bfloat16, device=dev)
        self.y_attn = torch.empty((cfg.tokens, cfg.small_out), dtype=torch.bfloat16, device=dev)

        self.compute = torch.cuda.Stream()
        self.h2d = torch.cuda.Stream()  # HiCache's host_to_device_stream
        self.counter = LayerDoneCounter(n)
        self.go = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)
        self.load_end = torch.cuda.Event(enable_timing=True)
        self.trial_id = 0
        self.graphs = []
        self.cycles_per_us = math.nan
        self.layer_compute_us = math.nan
        self.window_cycles = 0
        self.forwards = {
            EAGER_UNGATED: lambda: self._forward_eager(gated=False),
            EAGER_GATED: lambda: self._forward_eager(gated=True),
            GRAPH_STOCK: lambda: self._forward_graph(GRAPH_STOCK),
            GRAPH_WAIT_AHEAD: lambda: self._forward_graph(GRAPH_WAIT_AHEAD),
            GRAPH_WAIT_AHEAD_FIRST: lambda: self._forward_graph(GRAPH_WAIT_AHEAD_FIRST),
            GRAPH_WAIT_ALL: lambda: self._forward_graph(GRAPH_WAIT_ALL),
        }

    # ---- the model stand-in: per layer pre-attention (indexer), attention (eager break), post (MLP) ----
    def _pre(self, layer: int) -> None:
        # The C4 indexer of `layer` reads that layer's index-K (captured in breakable graphs).
        torch.sum(self.kdev[layer], dim=0, dtype=torch.float32, out=self.res[0, layer])
        torch.mm(self.x, self.w_idx, out=self.y_idx)

    def _attn(self, layer: int) -> None:
        # Attention of `layer` at the eager break; its getters wait for load `layer` in every graph schedule.
        torch.sum(self.kdev[layer], dim=0, dtype=torch.float32, out=self.res[1, layer])
        torch.mm(self.x, self.w_attn, out=self.y_attn)

    def _post(self, layer: int) -> None:
        torch.mm(self.x, self.w_mlp, out=self.y_mlp)

    def _segment(self, s: int) -> None:
        """Captured segment s: post(s-1) then pre(s).  Segment 0 is pre(0); segment n is post(n-1)."""
        if s > 0:
            self._post(s - 1)
        if s < self.cfg.layers:
            self._pre(s)

    def _forward_eager(self, gated: bool) -> None:
        wait = self.counter.wait_until
        for layer in range(self.cfg.layers):
            if gated:
                wait(layer)
            self._pre(layer)
            self._attn(layer)
            self._post(layer)

    def _forward_graph(self, schedule: str) -> None:
        n = self.cfg.layers
        wait = self.counter.wait_until
        if schedule == GRAPH_WAIT_ALL:
            wait(n - 1)  # loads are recorded in layer order on one stream: the last event covers all
        elif schedule != GRAPH_STOCK:
            wait(0)
        self.graphs[0].replay()
        for layer in range(n):
            wait(layer)  # the attention getter's gate: this is all the stock breakable replay does
            if schedule == GRAPH_WAIT_AHEAD_FIRST and layer + 1 < n:
                wait(layer + 1)
            self._attn(layer)
            if schedule == GRAPH_WAIT_AHEAD and layer + 1 < n:
                wait(layer + 1)  # wait ahead, after attention so attention L does not wait for load L+1
            self.graphs[layer + 1].replay()

    # ---- setup ----
    def capture(self) -> None:
        """Capture one CUDA graph per segment (a breakable graph's captured pieces), sharing one pool."""
        n = self.cfg.layers
        cap = torch.cuda.Stream()
        cap.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(cap):
            for _ in range(3):  # warm-up outside capture (cuBLAS handles and workspaces)
                for s in range(n + 1):
                    self._segment(s)
        torch.cuda.synchronize()
        pool = torch.cuda.graph_pool_handle()
        self.graphs = []
        for s in range(n + 1):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool, stream=cap):
                self._segment(s)
            self.graphs.append(g)
        torch.cuda.synchronize()

    def calibrate(self) -> dict:
        """Measure sleep cycles per microsecond (under matmul load) and one layer's compute time."""
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        probe_cycles = 2_000_000
        rates = []
        for _ in range(5):
            with torch.cuda.stream(self.compute):
                for _ in range(60):
                    self._post(0)
            with torch.cuda.stream(self.h2d):
                s.record()
                torch.cuda._sleep(probe_cycles)
                e.record()
            torch.cuda.synchronize()
            rates.append(probe_cycles / (s.elapsed_time(e) * 1000.0))
        self.cycles_per_us = statistics.median(rates)
        # Compute-only time of one graph forward with no load pending (consumer -1: every wait is a no-op).
        self.counter.set_consumer(-1)
        times = []
        for _ in range(10):
            with torch.cuda.stream(self.compute):
                s.record()
                self._forward_graph(GRAPH_STOCK)
                e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e))
        compute_ms = statistics.median(times)
        self.layer_compute_us = compute_ms * 1000.0 / self.cfg.layers
        self.window_cycles = int(self.cfg.launch_window_us * self.cycles_per_us)
        # One layer's copy on its own (no injected delay).  It loads the last content set, so the device
        # holds content that differs from what trial 0 (set 0) loads: trial 0 can detect stale reads too.
        warm_set = CONTENT_SETS - 1
        with torch.cuda.stream(self.h2d):
            s.record()
            for layer in range(self.cfg.layers):
                self.kdev[layer].copy_(self.host_sets[warm_set, layer], non_blocking=True)
            e.record()
        torch.cuda.synchronize()
        self.device_set = warm_set
        copy_us = s.elapsed_time(e) * 1000.0 / self.cfg.layers
        return {
            "sleep_cycles_per_us": self.cycles_per_us,
            "graph_forward_no_load_ms": compute_ms,
            "layer_compute_us": self.layer_compute_us,
            "layer_copy_us": copy_us,
            "layer_copy_gbps": self.cfg.row_elems * 2 / (copy_us * 1e3),
        }

    # ---- one trial ----
    def run_trial(self, schedule: str, delay_cycles: int) -> dict:
        n = self.cfg.layers
        t = self.trial_id
        self.trial_id += 1
        k = t % CONTENT_SETS
        host_t0 = time.perf_counter()
        # HiCacheController.start_loading: take a producer slot, record its start event on the
        # scheduler's stream; the H2D stream waits for it (L2TransferEngine._submission).
        pid = self.counter.update_producer()
        load = self.counter.events[pid]
        with torch.cuda.stream(self.compute):
            self.res.fill_(math.nan)
            # Hold the GPU while the host enqueues loads and forward, so both streams start together.
            torch.cuda._sleep(self.window_cycles)
            load.start_event.record()
            self.go.record()
        with torch.cuda.stream(self.h2d):
            self.h2d.wait_event(load.start_event)
            # L2TransferEngine.submit_host_to_device: per layer, optional delay, copy, on_layer_done.
            for layer in range(n):
                if delay_cycles > 0:
                    torch.cuda._sleep(delay_cycles)
                self.kdev[layer].copy_(self.host_sets[k, layer], non_blocking=True)
                load.complete(layer)
            self.load_end.record()
        self.counter.set_consumer(pid)  # TpModelWorker.set_hicache_consumer(batch.hicache_consumer_index)
        with torch.cuda.stream(self.compute):
            self.forwards[schedule]()
            self.end.record()
        enqueue_ms = (time.perf_counter() - host_t0) * 1000.0
        overrun = bool(self.go.query())
        torch.cuda.synchronize()
        self.counter.set_consumer(-1)
        res = self.res.cpu()
        if torch.isnan(res).any():
            raise RuntimeError(f"trial {t} ({schedule}): a reader did not run (NaN left in the result tensor)")
        prev = self.expected[self.device_set] if self.device_set is not None else torch.zeros(n)
        self.device_set = k
        stale = res != self.expected[k]
        torn = stale & (res != prev)
        stale_layers = stale.any(dim=0).nonzero()
        return {
            "trial": t,
            "ms": self.go.elapsed_time(self.end),
            "load_ms": self.go.elapsed_time(self.load_end),
            "enqueue_ms": enqueue_ms,
            "launch_overrun": int(overrun),
            "stale_indexer": int(stale[0].sum()),
            "stale_attn": int(stale[1].sum()),
            "torn": int(torn.sum()),
            "first_stale_layer": int(stale_layers[0, 0]) if len(stale_layers) else -1,
            "stale_mask_indexer_hex": _mask_hex(stale[0].tolist()),
            "stale_mask_attn_hex": _mask_hex(stale[1].tolist()),
        }

    def run_phase(self, phase: str, delay_us: float, schedules, trials: int, writer) -> dict:
        delay_cycles = int(delay_us * self.cycles_per_us)
        rows = {s: Row(phase, delay_us, s) for s in schedules}
        t0 = time.perf_counter()
        for r in range(trials):
            # Round-robin, rotated each round, so drift (clocks, heat) hits every schedule alike.
            for i in range(len(schedules)):
                sched = schedules[(i + r) % len(schedules)]
                rec = self.run_trial(sched, delay_cycles)
                row = rows[sched]
                row.trials += 1
                row.stale_trials += int(rec["stale_indexer"] + rec["stale_attn"] > 0)
                row.stale_indexer += rec["stale_indexer"]
                row.stale_attn += rec["stale_attn"]
                row.torn += rec["torn"]
                row.overruns += rec["launch_overrun"]
                row.times_ms.append(rec["ms"])
                row.load_ms.append(rec["load_ms"])
                row.enqueue_ms.append(rec["enqueue_ms"])
                if writer is not None:
                    writer.writerow({"phase": phase, "delay_us": round(delay_us, 2), "schedule": sched, **rec})
            done = r + 1
            if self.cfg.progress_every and (done % self.cfg.progress_every == 0 or done == trials):
                el = time.perf_counter() - t0
                self.log(
                    f"  [{phase} delay={delay_us:.0f}us] round {done}/{trials}  {el:.1f}s elapsed, "
                    f"~{el / done * (trials - done):.0f}s left"
                )
        return rows


@dataclass
class Report:
    card: dict
    calibration: dict
    main_rows: list
    sweep_rows: list
    ratios: list
    failures: list

    def to_json(self) -> dict:
        return {
            "card": self.card,
            "calibration": self.calibration,
            "main": [r.summary() for r in self.main_rows],
            "sweep": [r.summary() for r in self.sweep_rows],
            "ratios": self.ratios,
            "failures": self.failures,
        }


def card_info() -> dict:
    info = {"torch": torch.__version__, "cuda": torch.version.cuda}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update(name=p.name, sms=p.multi_processor_count, mem_gib=round(p.total_memory / 2**30, 1))
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        info["nvidia_smi"] = out.stdout.strip() or out.stderr.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        info["nvidia_smi"] = f"unavailable: {exc}"
    return info


def check(main_rows, sweep_rows) -> list:
    """The acceptance rules (stale where nothing waits, clean where the fix waits); failures, empty when all hold."""
    failures = []
    for row in main_rows:
        if row.schedule in MUST_READ_STALE and row.stale_trials == 0:
            failures.append(f"main/{row.schedule}: expected stale reads > 0 (detector), got 0")
    for row in list(main_rows) + list(sweep_rows):
        where = f"{row.phase}/{row.schedule}@{row.delay_us:.0f}us"
        if row.schedule in MUST_BE_CLEAN and (row.stale_indexer or row.stale_attn):
            failures.append(
                f"{where}: expected 0 stale reads, got {row.stale_indexer} indexer + {row.stale_attn} attention"
            )
        if row.schedule == GRAPH_STOCK and row.stale_attn:
            failures.append(
                f"{where}: eager-break readers wait for their own layer and must be clean, got {row.stale_attn} stale"
            )
    return failures


def ratios(rows) -> list:
    """Median time of each fixed graph schedule against the stock (unsafe) one, per (phase, delay)."""
    out = []
    keyed = {(r.phase, r.delay_us, r.schedule): r for r in rows}
    for (phase, delay, sched), row in keyed.items():
        base = keyed.get((phase, delay, GRAPH_STOCK))
        if sched == GRAPH_STOCK or not sched.startswith("graph") or base is None:
            continue
        b, f = statistics.median(base.times_ms), statistics.median(row.times_ms)
        out.append(
            {
                "phase": phase,
                "delay_us": round(delay, 2),
                "schedule": sched,
                "stock_median_ms": b,
                "median_ms": f,
                "ratio": f / b,
                "extra_pct": (f / b - 1) * 100,
            }
        )
    return out


def format_table(rows) -> str:
    head = (
        f"{'phase':<6} {'delay_us':>8} {'schedule':<23} {'trials':>6} {'stale_trials':>12} "
        f"{'stale_idx':>9} {'stale_attn':>10} {'torn':>5} {'median_ms':>9} {'p90_ms':>7} {'load_ms':>7} "
        f"{'overrun':>7}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        s = r.summary()
        lines.append(
            f"{s['phase']:<6} {s['delay_us']:>8.0f} {s['schedule']:<23} {s['trials']:>6} "
            f"{s['stale_trials']:>12} {s['stale_indexer_reads']:>9} {s['stale_attn_reads']:>10} "
            f"{s['torn_reads']:>5} {s['median_ms']:>9.3f} {s['p90_ms']:>7.3f} {s['median_load_ms']:>7.3f} "
            f"{s['launch_overruns']:>7}"
        )
    return "\n".join(lines)


def run_replay(cfg: ReplayConfig, out_dir=None, log=print) -> Report:
    """Run calibration, the main phase (4 required schedules) and the timing sweep; write files."""
    replay = GateReplay(cfg, log=log)
    card = card_info()
    log(f"card: {card}")
    log(f"config: {cfg}")
    replay.capture()
    cal = replay.calibrate()
    main_delay_us = cfg.delay_factor * replay.layer_compute_us
    cal["main_delay_us"] = main_delay_us
    log("calibration: " + ", ".join(f"{k}={v:.3f}" for k, v in cal.items()))
    est_trial_ms = cfg.launch_window_us / 1000 + cfg.layers * (main_delay_us + cal["layer_copy_us"]) / 1000 + 0.5
    n_trials = cfg.trials * len(MAIN_SCHEDULES) + cfg.sweep_trials * len(SWEEP_SCHEDULES) * len(cfg.sweep_factors)
    log(f"estimate: <= {n_trials} trials x ~{est_trial_ms:.1f} ms = ~{n_trials * est_trial_ms / 1000:.0f}s")

    writer, fh = None, None
    if out_dir is not None:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        fh = open(out_dir / "gate_replay_trials.csv", "w", newline="")
        writer = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        writer.writeheader()
    try:
        log(f"main phase: {cfg.trials} trials x {len(MAIN_SCHEDULES)} schedules, delay {main_delay_us:.0f} us/layer")
        main = replay.run_phase("main", main_delay_us, MAIN_SCHEDULES, cfg.trials, writer)
        sweep = {}
        for factor in cfg.sweep_factors:
            if cfg.sweep_trials == 0:
                break
            delay_us = factor * replay.layer_compute_us
            log(
                f"sweep: {cfg.sweep_trials} trials x {len(SWEEP_SCHEDULES)} graph schedules, "
                f"delay {delay_us:.0f} us/layer ({factor:g} x layer compute)"
            )
            rows = replay.run_phase("sweep", delay_us, SWEEP_SCHEDULES, cfg.sweep_trials, writer)
            sweep.update({(delay_us, s): r for s, r in rows.items()})
    finally:
        if fh is not None:
            fh.close()
    main_rows = [main[s] for s in MAIN_SCHEDULES]
    sweep_rows = list(sweep.values())
    report = Report(card, cal, main_rows, sweep_rows, ratios(main_rows + sweep_rows), check(main_rows, sweep_rows))
    if out_dir is not None:
        (out_dir / "gate_replay_summary.json").write_text(json.dumps(report.to_json(), indent=2))
    return report


def parse_args(argv=None) -> argparse.Namespace:
    d = ReplayConfig()
    p = argparse.ArgumentParser(
        description="Replay HiCache's layer-wise async index-K load against eager and breakable-CUDA-graph "
        "readers on a GPU; count stale reads per schedule and time the wait-ahead fix. "
        "Exits 1 when a required stale/clean result does not hold, 2 when no CUDA GPU is present."
    )
    p.add_argument("--trials", type=int, default=d.trials, help="trials per main schedule (default %(default)s)")
    p.add_argument(
        "--sweep-trials",
        type=int,
        default=d.sweep_trials,
        help="trials per graph schedule per sweep delay; 0 skips the sweep (default %(default)s)",
    )
    p.add_argument(
        "--sweep-factors",
        type=str,
        default=",".join(str(f) for f in d.sweep_factors),
        help="comma-separated load delays per layer for the timing sweep, in units of one layer's "
        "measured compute time (default %(default)s)",
    )
    p.add_argument(
        "--delay-factor",
        type=float,
        default=d.delay_factor,
        help="main phase load delay per layer, in units of one layer's compute time; > 1 makes the "
        "loads the bottleneck so the race window is open (default %(default)s)",
    )
    p.add_argument("--layers", type=int, default=d.layers, help="layers (default %(default)s)")
    p.add_argument(
        "--pages-per-layer",
        type=int,
        default=d.pages_per_layer,
        help="64x128 bf16 index-K pages copied per layer (default %(default)s)",
    )
    p.add_argument("--tokens", type=int, default=d.tokens, help="rows of the stand-in matmuls (default %(default)s)")
    p.add_argument(
        "--launch-window-us",
        type=float,
        default=d.launch_window_us,
        help="GPU-side hold at trial start while the host enqueues everything (default %(default)s)",
    )
    p.add_argument(
        "--out",
        type=str,
        default=None,
        help="output folder for the per-trial CSV and the JSON summary (default: $OUT, else out/gate_replay)",
    )
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print(
            f"gate_replay.py: needs a CUDA GPU, but torch.cuda.is_available() is False (torch {torch.__version__}, "
            f"CUDA build {torch.version.cuda}). Run it on a CUDA GPU machine: "
            "PYTHONUNBUFFERED=1 python -m benchmarks.gate_replay",
            file=sys.stderr,
        )
        return 2
    try:
        factors = tuple(float(f) for f in args.sweep_factors.split(",") if f.strip())
    except ValueError:
        print(f"--sweep-factors: expected comma-separated numbers, got {args.sweep_factors!r}", file=sys.stderr)
        return 2
    cfg = ReplayConfig(
        trials=args.trials,
        sweep_trials=args.sweep_trials,
        sweep_factors=factors,
        delay_factor=args.delay_factor,
        layers=args.layers,
        pages_per_layer=args.pages_per_layer,
        tokens=args.tokens,
        launch_window_us=args.launch_window_us,
    )
    try:
        cfg.validate()
    except ValueError as exc:
        print(f"gate_replay.py: bad option: {exc}", file=sys.stderr)
        return 2
    out_dir = Path(args.out or os.environ.get("OUT") or "out/gate_replay")
    t0 = time.perf_counter()
    report = run_replay(cfg, out_dir=out_dir)
    print()
    print(format_table(report.main_rows + report.sweep_rows))
    print()
    for r in report.ratios:
        print(
            f"fix cost [{r['phase']} delay={r['delay_us']:.0f}us] {r['schedule']:<23} "
            f"{r['median_ms']:.3f} ms vs stock {r['stock_median_ms']:.3f} ms: ratio {r['ratio']:.4f} "
            f"({r['extra_pct']:+.2f}%)"
        )
    print(
        f"\nfiles: {out_dir / 'gate_replay_trials.csv'}, {out_dir / 'gate_replay_summary.json'}; "
        f"total {time.perf_counter() - t0:.0f}s"
    )
    if report.failures:
        print("\nFAILED:\n  " + "\n  ".join(report.failures))
        return 1
    print("\nOK: ungated and stock-R3 rows read stale; gated and wait-ahead rows read nothing stale")
    return 0


if __name__ == "__main__":
    sys.exit(main())
