"""What ``SGLANG_DSV4_INDEX_K_CAPTURE`` costs a call that captures: ``python -m benchmarks.capture_cost`` (GPU).

Runs SGLang 0.5.23's own hooked ``C4IndexerBackendMixin.forward_c4_indexer`` (bf16 index-K pool on cuda, our
Triton kernels, SGLang's torch top-k; the set-up of ``benchmarks/sglang_gpu/indexer_topk.py``) eagerly, no CUDA
graph, with capture off (the pool's decision is None) and on (a fresh capture per call, so every call
captures: ``--requests`` requests of the batch, 16 rows each at most). Also the compressor side: our bf16 store
alone vs the store plus :meth:`IndexKCapture.note_stored` (the float64 transform kept as recall's reference).

Per step, medians over ``--iters`` calls:
  * ``call`` - wall time of the step followed by ``torch.cuda.synchronize()`` (what the forward pass pays);
  * ``host`` - wall time until the step returns, no synchronize (how long it holds the forward thread; a
    capture that waited for the GPU would show here).
The writer thread's file writing is drained between calls, outside the timings.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

from sglang_dsv4_ext.config import IndexKDtype


def _median_ms(step: Callable[[], None], iters: int, sync: bool, after: Callable[[], None]) -> float:
    import torch

    times = []
    for _ in range(iters):
        torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        if sync:
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
        torch.cuda.synchronize()
        after()
    return statistics.median(times)


class _Bench:
    """One decode-shaped indexer call (``rows`` requests of one row each) on a bf16 pool, capture switchable."""

    def __init__(self, requests: int, directory: Path):
        from benchmarks.sglang_gpu import indexer_topk as it
        from sglang_dsv4_ext.config import CaptureConfig
        from sglang_dsv4_ext.runtime.index_k import capture as index_k_capture

        self.it, self.ic = it, index_k_capture
        self.shape = it.SHAPES[0]
        self.pool = it.build_pool(IndexKDtype.BF16, self.shape.pages, "cuda")
        self.inp = it.make_inputs(self.shape, 0, "cuda")
        it.store_bf16(self.pool, self.inp)
        self.config = CaptureConfig(directory=str(directory), requests=requests)
        self.directory = directory
        self.capture = None

    def set_capture(self, on: bool) -> None:
        self.capture = self.ic.IndexKCapture(self.config, frozenset({0}), self.directory) if on else None
        setattr(self.pool, self.ic._ATTR, self.capture)

    def drain(self) -> None:
        if self.capture is not None:
            self.capture.flush()
            for path in self.directory.glob("*.pt"):
                path.unlink()
            # Forget what was captured, so that the next call captures again (same writer thread).
            self.capture.admitted.clear()
            self.capture.done.clear()
            self.capture.queued_bytes, self.capture.stopped = 0, None

    def indexer_call(self) -> None:
        self.it.launch_indexer(self.pool, self.inp, self.shape, IndexKDtype.BF16)

    def store(self) -> None:
        self.it.store_bf16(self.pool, self.inp)
        if self.capture is not None:
            batch = SimpleNamespace(rids=None)
            inp = self.inp
            self.capture.note_stored(
                0, batch, inp.kv, inp.norm_weight, inp.eps, inp.freqs, inp.key_positions, inp.slots
            )


def run(requests: int, iters: int, warmup: int) -> list[dict[str, object]]:
    from sglang_dsv4_ext.runtime import activation

    activation.activate()
    rows = []
    with tempfile.TemporaryDirectory(prefix="capture-cost-") as tmp:
        bench = _Bench(requests, Path(tmp))
        for step_name, step in (("indexer call", bench.indexer_call), ("bf16 store", bench.store)):
            result = {"step": step_name}
            for on in (False, True):  # both warm first: Triton compiles and SGLang imports on first use
                bench.set_capture(on)
                _median_ms(step, warmup, True, bench.drain)
            for on in (False, True):
                bench.set_capture(on)
                for kind, sync in (("call", True), ("host", False)):
                    result[f"{kind}_{'on' if on else 'off'}_ms"] = _median_ms(step, iters, sync, bench.drain)
                if on:  # what the "on" calls produced: files written (and refused) by the writer thread
                    result["files"], result["failed"] = bench.capture.writer.files, bench.capture.writer.failed
            bench.set_capture(False)
            rows.append(result)
    return rows


def format_table(rows, requests: int, iters: int) -> str:
    head = (
        f"{'step':<13} {'call off':>9} {'call on':>9} {'added':>9} {'host off':>9} {'host on':>9} {'added':>9} "
        f"{'files':>6} {'failed':>6}"
    )
    lines = [
        f"capture cost, medians of {iters} eager calls (ms); on = {requests} requests captured per call",
        head,
        "-" * len(head),
    ]
    for r in rows:
        lines.append(
            f"{r['step']:<13} {r['call_off_ms']:>9.3f} {r['call_on_ms']:>9.3f} "
            f"{r['call_on_ms'] - r['call_off_ms']:>+9.3f} {r['host_off_ms']:>9.3f} {r['host_on_ms']:>9.3f} "
            f"{r['host_on_ms'] - r['host_off_ms']:>+9.3f} {r['files']:>6} {r['failed']:>6}"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.capture_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=8, help="requests captured per call (default %(default)s)")
    p.add_argument("--iters", type=int, default=30, help="timed calls per setting (default %(default)s)")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls first (default %(default)s)")
    args = p.parse_args(argv)
    for name in ("requests", "iters", "warmup"):
        if getattr(args, name) < 1:
            print(f"capture_cost: --{name} must be >= 1, got {getattr(args, name)}", file=sys.stderr)
            return 2
    from benchmarks.sglang_gpu import bootstrap

    if not bootstrap.prepare_for_main("capture_cost"):
        return 2
    print(format_table(run(args.requests, args.iters, args.warmup), args.requests, args.iters))
    return 0


if __name__ == "__main__":
    sys.exit(main())
