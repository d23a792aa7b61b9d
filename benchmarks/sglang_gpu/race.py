"""The HiCache index-K load race in SGLang 0.5.23's own classes on a GPU, with the extension activated.

What is SGLang's own here: ``DeepSeekV4TokenToKVPool`` on cuda (all layers c4, so every layer carries
index-K), a pinned ``DeepSeekV4PagedHostPool`` over its c4 indexer buffers (built from SGLang's own
``_dsv4_indexer_regions``), ``HiCacheController`` (``load`` + ``start_loading``) loading layer by layer
on its ``L2TransferEngine.host_to_device_stream`` with ``LayerDoneCounter`` events and SGLang's delay
knob ``SGLANG_TEST_HICACHE_H2D_DELAY_CYCLES``; the readers' getters; for R3, SGLang's
``BreakableCUDAGraph`` / ``BreakableCUDAGraphCapture`` / ``eager_on_graph`` and
``PrefillCudaGraphRunner.execute``. The extension is activated through ``activation.activate()`` (what
the plugin entry point calls), and its gate mode is chosen per pool: each pool is built under
``config.configured`` with that mode (what ``SGLANG_DSV4_INDEX_K_GATE`` sets in a server).

What is not: the allocator (a duck type handing out the same device pages every trial), the
``sgl_kernel`` transfer op (plain-torch stand-in, :mod:`.standins`), the reader kernels (an exact
int64 checksum of the layer's loaded pages), the runner's model around the replay (stand-in
attributes, as in tests/integration/test_gate_prefill_replay.py), and the segments' model compute (a
matmul of fixed size).

Eager phase, per layer L in order, on the compute stream:
  * ``subpool``: ``pool.c4_indexer_kv_pool.get_index_k_with_scale_buffer(L)`` -- the sub-pool getter,
    which SGLang never gates (R1); with the gate ``off`` it must read stale, ``auto`` waits,
    ``strict`` refuses (``DSV4IndexKGateError``, counted as refused);
  * ``toplevel``: ``pool.get_index_k_with_scale_buffer(L)`` -- the getter SGLang's C4 indexer calls
    (``forward_c4_indexer``), gated upstream: clean in every mode.
R3 phase: one breakable graph per pool; segment L holds layer L's captured index-K reader (through the
top-level getter at capture) and a matmul; the eager break after it (``eager_on_graph``) reads layer
L again through the top-level getter. Stock schedule = gate ``off``; the fix = ``auto`` / ``strict``.

Run (GPU):  PYTHONUNBUFFERED=1 python -m benchmarks.sglang_gpu.race [--trials N]   (--help)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

from sglang_dsv4_ext.config import GateMode, configured, environment_override, load_config

GATE_MODES = (GateMode.OFF, GateMode.AUTO, GateMode.STRICT)  # off first: the row that must read stale
CONTENT_SETS = 7
DELAY_ENV = "SGLANG_TEST_HICACHE_H2D_DELAY_CYCLES"
FULL_PAGE = 256  # full-token page: one index-K page row (64 c4 slots)


@dataclass
class RaceConfig:
    layers: int = 8
    pages: int = 64  # index-K page rows loaded per layer and trial (64 x 8448 B = 528 KiB)
    trials: int = 2000  # per gate mode and phase
    delay_us: float = 40.0  # SGLANG_TEST_HICACHE_H2D_DELAY_CYCLES, converted with the measured _sleep rate
    # The compute stream holds this long while the host enqueues a whole trial (loads and readers), so the
    # two streams start together: measured on the H200, a trial's Python (HiCache submission, hooked getters)
    # takes more than 1.5 ms, after which every load had landed before the readers were even enqueued.
    launch_hold_us: float = 5000.0
    mm: int = 1024  # R3 segment filler: mm x mm x mm bf16 matmul
    phases: tuple = ("eager", "r3")
    progress_every: int = 500

    def validate(self) -> None:
        for name in ("layers", "pages", "trials", "mm"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.layers < 2:
            raise ValueError(f"layers must be >= 2 (R3 needs a next layer), got {self.layers}")
        if self.delay_us <= 0:
            raise ValueError(f"delay_us must be > 0 (the loads must be slower than the readers), got {self.delay_us}")
        bad = [p for p in self.phases if p not in ("eager", "r3")]
        if bad:
            raise ValueError(f"phases: unknown {bad}; allowed: eager, r3")


@dataclass
class Row:
    phase: str
    gate: str
    trials: int = 0
    stale_trials: int = 0
    stale: dict[str, int] = field(default_factory=dict)  # reader kind -> stale layer reads
    torn: int = 0
    refused: int = 0  # strict: sub-pool reads refused with DSV4IndexKGateError
    overruns: int = 0  # trials whose GPU hold ended before the host had enqueued the whole trial
    ms: list[float] = field(default_factory=list)

    def summary(self) -> dict:
        return {
            "phase": self.phase,
            "gate": self.gate,
            "trials": self.trials,
            "stale_trials": self.stale_trials,
            "stale_reads": dict(self.stale),
            "torn_reads": self.torn,
            "refused_reads": self.refused,
            "launch_overruns": self.overruns,
            "median_ms": statistics.median(self.ms) if self.ms else math.nan,
        }


def content_value(content_set: int, layer: int) -> int:
    return (content_set + layer) % CONTENT_SETS + 1


class DuckAllocator:
    """The allocator surface HiCacheController uses; hands out the same device pages every trial."""

    def __init__(self, pool, device_slots):
        self.pool = pool
        self.device_slots = device_slots  # CPU int64: direct io keeps device indices on the host

    def get_kvcache(self):
        return self.pool

    def alloc(self, need_size: int):
        if need_size != self.device_slots.numel():
            raise ValueError(f"DuckAllocator: asked for {need_size} slots, holds {self.device_slots.numel()}")
        return self.device_slots

    def set_hicache_transfer_done_event(self, key, event) -> None:
        pass


def _single_rank_group():
    import tempfile

    import torch.distributed as dist

    if not dist.is_initialized():
        store = tempfile.NamedTemporaryFile(prefix="race-gloo-", delete=False).name
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    return dist.group.WORLD


class Stack:
    """Pool + pinned host pool + HiCacheController for one gate mode."""

    def __init__(self, cfg: RaceConfig, gate: str, device: str = "cuda"):
        import torch
        from sglang.srt.managers.cache_controller import HiCacheController
        from sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler import _dsv4_indexer_regions
        from sglang.srt.mem_cache.memory_pool_host import DeepSeekV4PagedHostPool

        from sglang_dsv4_ext.tools.sglang_cpu import dsv4_model

        self.cfg, self.gate, self.device = cfg, gate, torch.device(device)
        tokens = (cfg.pages + 1) * FULL_PAGE  # page 0 stays the null page
        with configured(dataclasses.replace(load_config(), gate=gate)):  # the gate mode is decided at pool creation
            self.pool = dsv4_model.small_pool([4] * cfg.layers, tokens=tokens, page_size=FULL_PAGE, device=device)
        (region,) = _dsv4_indexer_regions(self.pool, FULL_PAGE)
        pin = self.device.type == "cuda"
        self.host = DeepSeekV4PagedHostPool(
            pool_name=str(region.name),
            device_buffers=region.device_buffers,
            item_bytes=region.item_bytes,
            num_host_pages=CONTENT_SETS * cfg.pages,
            slot_page_size=region.slot_page_size,
            layout="layer_first",
            pin_memory=pin,
            page_aligned_only=region.page_aligned_only,
        )
        self.host_pinned = bool(self.host.kv_buffer[0].is_pinned())  # cudaHostRegister'ed by SGLang
        # Host content: set s, layer l -> every byte is content_value(s, l).
        for layer in range(cfg.layers):
            host_layer = self.host.kv_buffer[layer].view(CONTENT_SETS, cfg.pages, -1)
            for s in range(CONTENT_SETS):
                host_layer[s].fill_(content_value(s, layer))
        self.row_bytes = region.item_bytes
        self.device_pages = torch.arange(1, cfg.pages + 1)  # device page rows 1..pages
        self.page_lo, self.page_hi = 1, cfg.pages + 1
        device_slots = (self.device_pages[:, None] * FULL_PAGE + torch.arange(FULL_PAGE)).flatten()
        self.host_slots = [
            ((s * cfg.pages + torch.arange(cfg.pages))[:, None] * FULL_PAGE + torch.arange(FULL_PAGE)).flatten()
            for s in range(CONTENT_SETS)
        ]
        self.controller = HiCacheController(
            token_to_kv_pool_allocator=DuckAllocator(self.pool, device_slots),
            mem_pool_host=self.host,
            page_size=FULL_PAGE,
            tp_group=_single_rank_group(),
            load_cache_event=threading.Event(),
            write_policy="write_through",
            io_backend="direct",
        )
        self.counter = self.controller.layer_done_counter
        assert self.pool.layer_transfer_counter is self.counter
        self.expected = torch.tensor(
            [
                [content_value(s, layer) * cfg.pages * self.row_bytes for layer in range(cfg.layers)]
                for s in range(CONTENT_SETS)
            ],
            dtype=torch.int64,
        )
        self.device_set: int | None = None
        self.trials_run = 0  # content set = trials_run % CONTENT_SETS: always differs from the last one loaded
        self.res = torch.zeros((2, cfg.layers), dtype=torch.int64, device=self.device)
        self.refused = [False] * cfg.layers
        self.graph = None
        self.runner = None

    # --- readers -------------------------------------------------------------------------------
    def _checksum(self, buf, layer: int, slot: int) -> None:
        import torch

        rows = buf[self.page_lo : self.page_hi]  # a view: the read happens in the sum kernel itself
        torch.sum(rows, dim=(0, 1), dtype=torch.int64, out=self.res[slot, layer])

    def read_subpool(self, layer: int) -> None:
        from sglang_dsv4_ext.errors import DSV4IndexKGateError

        try:
            buf = self.pool.c4_indexer_kv_pool.get_index_k_with_scale_buffer(layer)
        except DSV4IndexKGateError:  # strict mode: an unwaited read is refused, not served
            self.refused[layer] = True
            return
        self._checksum(buf, layer, 0)

    def read_toplevel(self, layer: int, slot: int = 1) -> None:
        self._checksum(self.pool.get_index_k_with_scale_buffer(layer), layer, slot)

    def forward_eager(self) -> None:
        for layer in range(self.cfg.layers):
            self.read_subpool(layer)
            self.read_toplevel(layer)


def sleep_rate_cycles_per_us(rounds: int = 3) -> float:
    """``torch.cuda._sleep`` cycles per microsecond; the last of ``rounds`` (the clock ramps up from idle)."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cycles = 20_000_000
    rate = math.nan
    for _ in range(rounds):
        torch.cuda.synchronize()
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        torch.cuda.synchronize()
        rate = cycles / (start.elapsed_time(end) * 1000.0)
    return rate


# --- R3: SGLang's breakable graph, replayed through PrefillCudaGraphRunner.execute ----------------


def capture_breakable(stack: Stack, stream) -> object:
    """Segment L: captured reader of layer L + matmul; eager break L: reader of L through the getter."""
    import torch
    from sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph import (
        BreakableCUDAGraph,
        BreakableCUDAGraphCapture,
        eager_on_graph,
    )

    cfg = stack.cfg
    a = torch.randn(cfg.mm, cfg.mm, device=stack.device, dtype=torch.bfloat16)
    b = torch.randn(cfg.mm, cfg.mm, device=stack.device, dtype=torch.bfloat16)
    y = torch.empty(cfg.mm, cfg.mm, device=stack.device, dtype=torch.bfloat16)

    @eager_on_graph(True)
    def attention_break(layer: int) -> None:
        # The eager attention op of layer L: its getters wait for load L (and, with the fix, L+1).
        stack.read_toplevel(layer, slot=1)

    def body() -> None:
        for layer in range(cfg.layers):
            stack.read_toplevel(layer, slot=0)  # layer L's C4 indexer: captured
            torch.mm(a, b, out=y)
            attention_break(layer)

    with torch.cuda.stream(stream):
        body()  # warm-up outside capture (consumer -1: no waits)
    torch.cuda.synchronize()
    graph = BreakableCUDAGraph()
    with BreakableCUDAGraphCapture(cuda_graph=graph, pool=torch.cuda.graph_pool_handle(), stream=stream):
        body()
    torch.cuda.synchronize()
    return graph


def stand_in_runner(stack: Stack, graph, device_module):
    """SGLang's real ``PrefillCudaGraphRunner`` (breakable backend) around a captured body."""
    from sglang.srt.model_executor.cuda_graph_config import Backend
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    from benchmarks.sglang_gpu.prefill_runner import prefill_runner_without_init

    def replay(shape_key, static_forward_batch, **kwargs):
        graph.replay()
        return None

    runner, static_batch = prefill_runner_without_init(
        stack.pool, backend=Backend.BREAKABLE, replay=replay, tokens=8, device_module=device_module
    )
    batch = SimpleNamespace(
        capture_hidden_mode=CaptureHiddenMode.NULL,
        mm_input_embeds=None,
        attn_tp_sequence_sharded=False,
        input_ids=static_batch.input_ids,
        positions=static_batch.positions,
    )
    return runner, batch


# --- trials ------------------------------------------------------------------------------------


class Race:
    def __init__(self, cfg: RaceConfig, log=print):
        import torch

        cfg.validate()
        self.cfg, self.log = cfg, log
        self.compute = torch.cuda.Stream()
        self.capture_stream = torch.cuda.Stream()
        self.rate = sleep_rate_cycles_per_us()
        self.hold_cycles = int(cfg.launch_hold_us * self.rate)
        self.delay_cycles = int(cfg.delay_us * self.rate)
        self.stacks = {gate: Stack(cfg, gate) for gate in GATE_MODES}
        self.go = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    def prepare_r3(self) -> None:
        import torch

        for stack in self.stacks.values():
            stack.graph = capture_breakable(stack, self.capture_stream)
            stack.runner, stack.batch = stand_in_runner(stack, stack.graph, torch.cuda)

    def trial(self, stack: Stack, phase: str) -> dict:
        import torch

        cfg = stack.cfg
        content_set = stack.trials_run % CONTENT_SETS
        stack.trials_run += 1
        stack.refused = [False] * cfg.layers
        with torch.cuda.stream(self.compute):
            stack.res.fill_(-1)
            torch.cuda._sleep(self.hold_cycles)  # both streams start together after the host enqueued all
            self.go.record()
            stack.controller.load(stack.host_slots[content_set])
            producer = stack.controller.start_loading()  # start event on this stream; H2D on SGLang's stream
            stack.counter.set_consumer(producer)  # TpModelWorker.set_hicache_consumer
            if phase == "eager":
                stack.forward_eager()
            else:
                assert stack.runner.execute(stack.batch) is None
            self.end.record()
        overrun = bool(self.go.query())  # the hold ended before the host finished enqueueing
        torch.cuda.synchronize()
        stack.counter.set_consumer(-1)
        stack.controller.ack_load_queue.clear()
        res = stack.res.cpu()
        want = stack.expected[content_set]
        prev = stack.expected[stack.device_set] if stack.device_set is not None else torch.zeros_like(want)
        stack.device_set = content_set
        refused = torch.tensor(stack.refused)
        unread = res == -1
        if bool((unread[0] & ~refused).any() or unread[1].any()):
            raise RuntimeError(f"{phase}/{stack.gate}: a reader did not run (result still -1)")
        stale = (res != want) & ~unread
        torn = stale & (res != prev)
        return {
            "ms": self.go.elapsed_time(self.end),
            "stale": stale,
            "torn": int(torn.sum()),
            "refused": int(refused.sum()),
            "overrun": overrun,
        }

    def run_phase(self, phase: str) -> list[Row]:
        """Round-robin over the gate modes until each has ``trials`` trials that started only after the
        host had enqueued them (trials that overran the hold are counted too, and reported)."""
        kinds = ("subpool", "toplevel") if phase == "eager" else ("captured", "break")
        rows = {gate: Row(phase, gate, stale={k: 0 for k in kinds}) for gate in GATE_MODES}
        t0 = time.perf_counter()
        r = 0
        with environment_override({DELAY_ENV: str(self.delay_cycles)}):  # SGLang's L2TransferEngine reads it per submit
            while min(row.trials - row.overruns for row in rows.values()) < self.cfg.trials:
                for i in range(len(GATE_MODES)):  # rotated each round: drift hits every mode alike
                    gate = GATE_MODES[(i + r) % len(GATE_MODES)]
                    rec = self.trial(self.stacks[gate], phase)
                    row = rows[gate]
                    row.trials += 1
                    row.stale_trials += int(rec["stale"].any())
                    for k, kind in enumerate(kinds):
                        row.stale[kind] += int(rec["stale"][k].sum())
                    row.torn += rec["torn"]
                    row.refused += rec["refused"]
                    row.overruns += int(rec["overrun"])
                    row.ms.append(rec["ms"])
                r += 1
                done = r
                if self.cfg.progress_every and done % self.cfg.progress_every == 0:
                    el = time.perf_counter() - t0
                    self.log(
                        f"  [{phase}] {done}/{self.cfg.trials} rounds, {el:.1f}s, "
                        f"~{max(0.0, el / done * (self.cfg.trials - done)):.0f}s left"
                    )
        return [rows[g] for g in GATE_MODES]


def check(rows: list[Row]) -> list[str]:
    """Gate off must read stale (else the detector is blind); auto and strict never; failures as text."""
    failures = []
    for row in rows:
        where = f"{row.phase}/{row.gate}"
        total = sum(row.stale.values())
        if row.gate == GateMode.OFF:
            if row.stale_trials == 0:
                failures.append(f"{where}: expected stale reads > 0 (else the detector is blind), got 0")
        elif total:
            failures.append(f"{where}: expected 0 stale reads, got {row.stale}")
        if row.phase == "eager" and row.stale.get("toplevel"):
            failures.append(f"{where}: SGLang's own top-level getter read stale: {row.stale['toplevel']}")
        if row.phase == "r3" and row.stale.get("break"):
            failures.append(f"{where}: eager-break readers wait for their layer and must be clean: {row.stale}")
        if row.overruns > 0.01 * row.trials:
            failures.append(
                f"{where}: {row.overruns} of {row.trials} trials started before the host had "
                f"enqueued them (raise launch_hold_us)"
            )
        if row.trials < 1:
            failures.append(f"{where}: no trials ran")
    return failures


def format_table(rows: list[Row]) -> str:
    head = (
        f"{'phase':<6} {'gate':<7} {'trials':>6} {'stale_trials':>12} {'stale reads (by reader)':<36} "
        f"{'torn':>5} {'refused':>8} {'overrun':>7} {'median_ms':>9}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        s = r.summary()
        reads = ", ".join(f"{k}={v}" for k, v in s["stale_reads"].items())
        lines.append(
            f"{s['phase']:<6} {s['gate']:<7} {s['trials']:>6} {s['stale_trials']:>12} {reads:<36} "
            f"{s['torn_reads']:>5} {s['refused_reads']:>8} {s['launch_overruns']:>7} {s['median_ms']:>9.3f}"
        )
    return "\n".join(lines)


def run(cfg: RaceConfig, out_dir=None, log=print) -> dict:
    from sglang_dsv4_ext.runtime import activation

    state = activation.activate()
    race = Race(cfg, log=log)
    log(
        f"race: {cfg}; _sleep {race.rate:.0f} cycles/us; delay {race.delay_cycles} cycles/layer "
        f"({DELAY_ENV}); activation {state.seconds:.2f}s"
    )
    rows: list[Row] = []
    if "r3" in cfg.phases:
        race.prepare_r3()
    for phase in cfg.phases:
        rows += race.run_phase(phase)
    result = {
        "config": cfg.__dict__,
        "sleep_cycles_per_us": race.rate,
        "delay_cycles": race.delay_cycles,
        "host_pool_pinned": {g: s.host_pinned for g, s in race.stacks.items()},
        "rows": [r.summary() for r in rows],
        "failures": check(rows),
    }
    if out_dir is not None:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "sglang_race_summary.json"), "w") as fh:
            json.dump(result, fh, indent=2, default=str)
    result["table"] = format_table(rows)
    return result


def main(argv=None) -> int:
    d = RaceConfig()
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.sglang_gpu.race",
        description="Replay the HiCache index-K load race in SGLang's own pool, host pool, HiCacheController "
        "and breakable CUDA graph on a GPU, for gate modes off/auto/strict. Exits 1 when a required "
        "result does not hold, 2 on bad options or without a GPU.",
    )
    p.add_argument("--trials", type=int, default=d.trials, help="trials per gate mode and phase (default %(default)s)")
    p.add_argument("--layers", type=int, default=d.layers, help="c4 layers (default %(default)s)")
    p.add_argument("--pages", type=int, default=d.pages, help="index-K page rows per layer (default %(default)s)")
    p.add_argument(
        "--delay-us",
        type=float,
        default=d.delay_us,
        help=f"{DELAY_ENV} per layer, in microseconds (default %(default)s)",
    )
    p.add_argument("--phases", default=",".join(d.phases), help="eager,r3 (default %(default)s)")
    p.add_argument("--out", default=os.environ.get("OUT"), help="folder for the JSON summary (default $OUT)")
    args = p.parse_args(argv)
    cfg = RaceConfig(
        trials=args.trials,
        layers=args.layers,
        pages=args.pages,
        delay_us=args.delay_us,
        phases=tuple(x for x in args.phases.split(",") if x),
    )
    try:
        cfg.validate()
    except ValueError as exc:
        print(f"race: bad option: {exc}", file=sys.stderr)
        return 2
    import torch

    from benchmarks.sglang_gpu import bootstrap

    if not torch.cuda.is_available():
        print("race: needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    print("\n".join(bootstrap.prepare().lines()), flush=True)
    result = run(cfg, out_dir=args.out)
    print(result["table"])
    if result["failures"]:
        print("FAILED:\n  " + "\n  ".join(result["failures"]))
        return 1
    print("OK: gate off reads stale; auto and strict read nothing stale")
    return 0


if __name__ == "__main__":
    sys.exit(main())
