"""Where the store and index-Q lose against a copy of the same bytes at mid sizes (the store and index-Q goal).

    PYTHONUNBUFFERED=1 python -m benchmarks.store_gap --out $OUT

``benchmarks.kernels`` measures the bf16 index-K store at 76-79% and index-Q at 77-83% of a
CUDA-graphed device-to-device copy of the same bytes at 34-67 MB / 1.1 GB, against a goal of 85%.
This script puts three kernels beside each of those sizes, all CUDA-graph medians over rotating
input sets (``benchmarks.timing.bench``), to tell where the rest goes:

* ``copy``: ``Tensor.copy_`` of the same bytes (the limit the goal names);
* ``triton copy``: the plainest Triton streaming kernel over the same bytes (contiguous read,
  contiguous write, best of a small sweep of block sizes and warps): what any Triton kernel of
  this shape can reach at that size;
* ``movement``: our kernel's memory traffic without its arithmetic (store: the bf16 scatter of the
  same rows into the same pages, ``dispatch.scatter_index_k_bf16``; index-Q: a Triton copy of q and
  the weights);
* ``ours``: the kernel itself.

If ``triton copy`` and ``movement`` sit where ``ours`` sits, the gap is not the kernel's math. Prints
one table; full results in ``<out>/store_gap.json``. Needs CUDA; no SGLang.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import triton
import triton.language as tl

from benchmarks.kernels import ROPE_POSITIONS, random_freqs
from benchmarks.timing import bench, n_sets
from kernels_sm120 import dispatch

STORE_SIZES = (43008, 65536, 262144)
Q_SIZES = (1024, 32768)
COPY_SWEEP = ((1024, 4), (2048, 4), (4096, 4), (4096, 8), (8192, 8), (16384, 16))


@triton.jit
def _stream_copy(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)


def triton_copy_ms(nbytes: int, dev) -> dict[str, float]:
    """Best graphed median (ms) of ``_stream_copy`` over ``nbytes`` (read + write), and its tiling."""
    n = max(1, nbytes // 2 // 4)
    nset = n_sets(nbytes, cap=8)
    src = [torch.randn(n, device=dev) for _ in range(nset)]
    dst = [torch.empty_like(x) for x in src]
    best = None
    for block, warps in COPY_SWEEP:
        grid = (triton.cdiv(n, block),)
        ms = bench(lambda i, b=block, w=warps, g=grid: _stream_copy[g](src[i], dst[i], n, BLOCK=b, num_warps=w), nset)
        if best is None or ms < best["ms"]:
            best = {"ms": ms, "block": block, "warps": warps}
    return best


def copy_ms(nbytes: int, dev) -> float:
    n = max(1, nbytes // 2 // 4)
    nset = n_sets(nbytes, cap=8)
    src = [torch.randn(n, device=dev) for _ in range(nset)]
    dst = [torch.empty_like(x) for x in src]
    return bench(lambda i: dst[i].copy_(src[i]), nset)


def store_case(n: int, dev) -> dict[str, object]:
    pages = triton.cdiv(n, 64) + 16
    nbytes = n * (256 + 256 + 256 + 16)  # as benchmarks.kernels.time_store counts it
    nset = n_sets(nbytes, cap=4)
    freqs = random_freqs(dev)
    w = torch.rand(128, device=dev) + 0.5
    sets = [
        dict(
            kv=torch.randn(n, 128, device=dev).to(torch.bfloat16),
            pos=torch.randint(0, ROPE_POSITIONS, (n,), device=dev),
            loc=torch.randperm(pages * 64, device=dev)[:n],
            cache=torch.empty(pages, 64 * 256, dtype=torch.uint8, device=dev),
        )
        for _ in range(nset)
    ]
    ours = bench(
        lambda i: dispatch.store_index_k_bf16(
            sets[i]["kv"], w, 1e-6, freqs, sets[i]["pos"], sets[i]["loc"], sets[i]["cache"]
        ),
        nset,
    )
    movement = bench(lambda i: dispatch.scatter_index_k_bf16(sets[i]["kv"], sets[i]["loc"], sets[i]["cache"]), nset)
    sets.clear()
    return {
        "kernel": "store",
        "shape": f"N={n}",
        "bytes": nbytes,
        "ours_ms": ours,
        "movement_ms": movement,
        "movement_bytes": n * (256 + 256 + 8),
    }


def q_case(n: int, dev) -> dict[str, object]:
    nbytes = n * 64 * (256 + 256 + 2 + 4) + n * (256 + 8)
    nset = n_sets(nbytes, cap=4)
    freqs = random_freqs(dev)
    sets = [
        dict(
            q=torch.randn(n, 64 * 128, device=dev).to(torch.bfloat16),
            w=torch.randn(n, 64, device=dev).to(torch.bfloat16),
            pos=torch.randint(0, ROPE_POSITIONS, (n,), device=dev),
        )
        for _ in range(nset)
    ]
    ours = bench(lambda i: dispatch.index_q_bf16(sets[i]["q"], sets[i]["w"], 0.01, freqs, sets[i]["pos"]), nset)
    sets.clear()
    return {
        "kernel": "index_q",
        "shape": f"N={n}",
        "bytes": nbytes,
        "ours_ms": ours,
        "movement_ms": None,
        "movement_bytes": None,
    }


def measure(dev) -> list[dict[str, object]]:
    rows = [store_case(n, dev) for n in STORE_SIZES] + [q_case(n, dev) for n in Q_SIZES]
    for r in rows:
        torch.cuda.empty_cache()
        r["copy_ms"] = copy_ms(r["bytes"], dev)
        r["triton_copy"] = triton_copy_ms(r["bytes"], dev)
        print(f"  {r['kernel']} {r['shape']} measured", file=sys.stderr, flush=True)
    return rows


def _pct(ms_limit: float, ms: float) -> str:
    return f"{100 * ms_limit / ms:5.1f}"


def format_table(rows: list[dict[str, object]]) -> str:
    head = (
        f"{'kernel':<8} {'shape':<10} {'MB':>7} {'copy us':>8} {'tcopy us':>9} {'move us':>8} {'ours us':>8} "
        f"{'tcopy %cp':>9} {'move %cp':>9} {'ours %cp':>9} {'ours %tcopy':>11}"
    )
    out = [head]
    for r in rows:
        move = r["movement_ms"]
        # movement moves fewer bytes than the kernel counts (no RoPE table / positions): rated on its own bytes
        move_pct = _pct(copy_ms_for(r, r["movement_bytes"]), move) if move else "    -"
        out.append(
            f"{r['kernel']:<8} {r['shape']:<10} {r['bytes'] / 1e6:7.1f} {r['copy_ms'] * 1e3:8.2f} "
            f"{r['triton_copy']['ms'] * 1e3:9.2f} {(move * 1e3 if move else float('nan')):8.2f} "
            f"{r['ours_ms'] * 1e3:8.2f} {_pct(r['copy_ms'], r['triton_copy']['ms']):>9} {move_pct:>9} "
            f"{_pct(r['copy_ms'], r['ours_ms']):>9} {_pct(r['triton_copy']['ms'], r['ours_ms']):>11}"
        )
    out.append(
        "%cp: over a graphed Tensor.copy_ of the same bytes; tcopy: the best plain Triton streaming copy of "
        "them; move: the store's data movement alone (bf16 scatter of the same rows), rated on its own bytes"
    )
    return "\n".join(out)


def copy_ms_for(r: dict[str, object], nbytes: int) -> float:
    """The copy time scaled to ``nbytes`` at the rate measured for the row's size."""
    return r["copy_ms"] * nbytes / r["bytes"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."), help="directory for store_gap.json")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("store_gap: needs a CUDA GPU", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    rows = measure(dev)
    with open(os.path.join(args.out, "store_gap.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    print(format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
