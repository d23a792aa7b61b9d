"""How the kernel benchmarks time, shared by ``kernels.py``, ``kernels_decode.py``, ``kernels_stock.py`` and
``store_gap.py``: CUDA-graphed medians over rotated input sets, and the copy and matrix-rate ceilings.

A module of its own so that the benchmarks that time import it, never each other.
"""

from collections.abc import Callable

import torch
import triton


def log(msg: str) -> None:
    print(msg, flush=True)


def bench(fn: Callable[[int], None], sets: int, graph: bool = True, rep: int = 150) -> float:
    """Median ms of one fn(i), i cycling over the input sets.

    With ``graph`` (our kernels, which are capturable), one CUDA graph runs every set once
    and its replays are timed, so host launch overhead (Python validation, Triton's
    launcher: tens of microseconds, more on a slow host) is not counted; SGLang replays
    decode in CUDA graphs too. Falls back to eager timing if capture fails. ``rep``: ms of replays.
    """
    if graph:
        try:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for i in range(sets):  # warm up: compile and autotune outside the capture
                    fn(i)
            torch.cuda.current_stream().wait_stream(stream)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for i in range(sets):
                    fn(i)
            return triton.testing.do_bench(g.replay, warmup=25, rep=rep, return_mode="median") / sets
        except Exception as err:  # noqa: BLE001  report and time eagerly
            log(f"    (graph capture failed: {type(err).__name__}: {err}; timing eagerly)")
    state = {"i": 0}

    def call():
        fn(state["i"] % sets)
        state["i"] += 1

    return triton.testing.do_bench(call, warmup=25, rep=rep, return_mode="median")


def n_sets(bytes_per_set: int, target: int = 512 << 20, cap: int = 8) -> int:
    return max(2, min(cap, triton.cdiv(target, max(bytes_per_set, 1))))


def measure_copy_bandwidth(dev) -> float:
    src = torch.randn(1 << 29, device=dev, dtype=torch.float32)  # 2 GiB
    dst = torch.empty_like(src)
    ms = triton.testing.do_bench(lambda: dst.copy_(src), warmup=25, rep=200, return_mode="median")
    return 2 * src.numel() * 4 / (ms * 1e-3) / 1e9


def measure_matmul_tflops(dev, m: int, n: int, k: int) -> float:
    """bf16 torch.matmul rate on random data (cuBLAS), TFLOP/s."""
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
    c = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
    ms = triton.testing.do_bench(lambda: torch.matmul(a, b, out=c), warmup=25, rep=150, return_mode="median")
    a = b = c = None
    torch.cuda.empty_cache()
    return 2.0 * m * n * k / (ms * 1e-3) / 1e12


# Graphed copies of >= 1 GB measured ~2.7 TB/s against 4.2 TB/s at 0.5 GB (2026-12-01, H200; not
# understood), so the same-size column stops at 512 MB, where the 2 GiB copy is the ceiling anyway.
SAME_SIZE_COPY_MAX = 512 << 20


def measure_copy_at(dev, nbytes: int) -> float:
    """GB/s (read + write) of a device-to-device copy of nbytes / 2 each way, CUDA-graph timed
    like the kernels (the ceiling at that size: launch and ramp included)."""
    n = max(1, nbytes // 2 // 4)
    nset = n_sets(nbytes, cap=8)
    src = [torch.randn(n, device=dev) for _ in range(nset)]
    dst = [torch.empty_like(x) for x in src]
    ms = bench(lambda i: dst[i].copy_(src[i]), nset)
    gbs = 2 * n * 4 / (ms * 1e-3) / 1e9
    log(f"    copy of {2 * n * 4 / 1e6:.1f} MB (graphed, {nset} sets): {ms * 1e3:.2f} us, {gbs:.0f} GB/s")
    return gbs
