"""GPU check + benchmark of the bf16 index-K kernels (one call on a CUDA GPU).

    PYTHONUNBUFFERED=1 python -m benchmarks.kernels --out $OUT

(a) correctness against float64 references on fresh random inputs, outputs poisoned
    first, for every configuration set run here: this GPU's own and, forced, the SM120
    and default tilings (the only way the SM120 tilings execute without an SM120 card),
    decode and prefill logits tilings; the logits' output contract (columns past each
    row's length untouched); plus the ahead-of-time sm_120a build of every kernel
    (shared memory <= 101376 B, mma.sync only);
(b) top-512 set recall against float64 logits for bf16 keys/queries (this path) and for
    SGLang's fp8 quantize-dequantize of the same inputs;
(c) ceilings measured in the same run: device-to-device copy (2 GiB) and the bf16 matrix
    rate (8192^3, random data; and a K=128 product like the logits' own);
(d) timing (``triton.testing.do_bench`` median of CUDA-graph replays that run every input set
    once, the sets rotated so L2 does not serve them; the torch baselines eagerly, as the
    torch fallbacks run): decode logits at 1/8/64/128 rows x 2K..64K keys with SGLang's wide
    decode-graph output (262,144 columns) beside a graphed copy of the same key bytes and the
    read-only gather of the same pages (``benchmarks/kernels_decode.py``,
    ``benchmarks/page_gather.py``), prefill logits, store and index-Q (% of copy, of the
    same-size copy, of the matrix rate, x torch), each issue goal with met / NOT met, the decode
    bytes per request (``sglang_dsv4_ext.tools.plan.decode_reads``) beside the logits time of one request,
    plus sweeps of tilings;
(e) stock SGLang 0.5.23 at the decode shapes (``benchmarks/kernels_stock.py``: its torch
    fallbacks and TileLang kernel, from the GPU bundle, in a subprocess that boots while (a)-(c)
    run and times only after (d)); ``--no-stock`` leaves it out.
Full results go to ``<out>/bench_kernels.json`` (and ``kernels_stock.json``); the tables are
printed last. Needs CUDA; SGLang only in the stock subprocess (from the GPU bundle).
"""

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from collections.abc import Callable

import torch
import triton

from benchmarks.logits_cases import decode_shapes, timing_logits_case
from benchmarks.timing import (
    SAME_SIZE_COPY_MAX,
    bench,
    log,
    measure_copy_at,
    measure_copy_bandwidth,
    measure_matmul_tflops,
    n_sets,
)
from kernels_sm120 import aot, dispatch, index_k_store
from kernels_sm120 import reference as R
from kernels_sm120._validate import as_index_k_pages, as_rope_table

INF = float("inf")
ROPE_POSITIONS = 1 << 16
FAILURES: list[str] = []


def sync(dev) -> None:
    """Wait for the device and surface launch errors (a no-op for the CPU interpreter dry run)."""
    if torch.device(dev).type == "cuda":
        torch.cuda.synchronize()


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm()).item()


def check(name: str, ok: bool, detail: str) -> None:
    status = "ok  " if ok else "FAIL"
    log(f"  [{status}] {name}: {detail}")
    if not ok:
        FAILURES.append(f"{name}: {detail}")


def random_freqs(device, positions: int = ROPE_POSITIONS) -> torch.Tensor:
    ang = torch.rand(positions, 32, device=device, dtype=torch.float64) * (2 * math.pi)
    return torch.polar(torch.ones_like(ang), ang).to(torch.complex64)


# ---------------------------------------------------------------------------
# (a) correctness
# ---------------------------------------------------------------------------


def check_store(cfgs: dispatch.ArchConfigs, dev) -> dict[str, float]:
    n, pages = 3000, 64
    kv = torch.randn(n, 128, device=dev).to(torch.bfloat16) * 3
    w = torch.rand(128, device=dev) + 0.5
    pos = torch.randint(0, ROPE_POSITIONS, (n,), device=dev)
    loc = torch.randperm(pages * 64, device=dev)[:n]
    loc[::7] = -1  # padding rows must be skipped, and their positions never read
    pos[::7] = -7
    freqs = random_freqs(dev)
    cache = torch.full((pages, 64 * 256), 0xFF, dtype=torch.uint8, device=dev)  # bf16 NaN poison
    dispatch.store_index_k_bf16(kv, w, 1e-6, freqs, pos, loc, cache, config=cfgs.store)
    sync(dev)
    rows = R.index_k_cache_as_rows(cache)
    keep = loc >= 0
    ref = R.index_k_transform_reference(kv[keep], w, 1e-6, freqs, pos[keep])
    got = rows[loc[keep]]
    written = torch.zeros(pages * 64, dtype=torch.bool, device=dev)
    written[loc[keep]] = True
    err = rel_err(got, ref)
    off_rn = (got.double() != ref.to(torch.bfloat16).double()).float().mean().item()
    check(
        f"{cfgs.name} store rel err",
        err < 4e-3 and torch.isfinite(got).all().item(),
        f"{err:.2e} (bf16 rounding ~1.6e-3)",
    )
    check(
        f"{cfgs.name} store one rounding",
        off_rn < 2e-3,
        f"{100 * off_rn:.3f}% of elements differ from round-to-nearest(float64)",
    )
    check(
        f"{cfgs.name} store leaves other slots",
        torch.isnan(rows[~written].float()).all().item(),
        "unwritten slots still poisoned",
    )
    # scatter of the already-transformed rows must give the same bytes
    cache2 = torch.full_like(cache, 0xFF)
    dispatch.scatter_index_k_bf16(got, loc[keep], cache2, config=cfgs.scatter)
    sync(dev)
    check(
        f"{cfgs.name} scatter",
        torch.equal(cache2[:, :].view(torch.bfloat16).view(-1, 128)[loc[keep]], got),
        "bitwise equal to the stored rows",
    )
    return {"store_rel_err": err, "store_frac_not_rn": off_rn}


def check_q(cfgs: dispatch.ArchConfigs, dev) -> dict[str, float]:
    n = 333
    q = torch.randn(n, 64 * 128, device=dev).to(torch.bfloat16)
    w = torch.randn(n, 64, device=dev).to(torch.bfloat16)
    pos = torch.randint(0, ROPE_POSITIONS, (n,), device=dev, dtype=torch.int32)
    freqs = random_freqs(dev)
    q_out = torch.full((n, 64, 128), float("nan"), dtype=torch.bfloat16, device=dev)
    w_out = torch.full((n, 64), float("nan"), device=dev)
    dispatch.index_q_bf16(q, w, 0.0123, freqs, pos, q_out=q_out, weights_out=w_out, config=cfgs.q)
    sync(dev)
    q_ref, w_ref = R.index_q_reference(q, w, 0.0123, freqs, pos)
    eq, ew = rel_err(q_out, q_ref), rel_err(w_out, w_ref)
    off_rn = (q_out.double() != q_ref.to(torch.bfloat16).double()).float().mean().item()
    check(f"{cfgs.name} q rel err", eq < 4e-3 and torch.isfinite(q_out).all().item(), f"{eq:.2e}")
    check(
        f"{cfgs.name} q one rounding",
        off_rn < 2e-3,
        f"{100 * off_rn:.3f}% of elements differ from round-to-nearest(float64)",
    )
    check(f"{cfgs.name} q weights rel err", ew < 1e-6 and torch.isfinite(w_out).all().item(), f"{ew:.2e}")
    return {"q_rel_err": eq, "q_frac_not_rn": off_rn, "w_rel_err": ew}


def make_logits_case(
    rows: int, lens: list[int], max_len: int, dev, shared_table: bool = False, heads: int = 64, k_dtype=torch.bfloat16
):
    """Random q/k/weights and per-row page tables over one index-K pool."""
    pages_per_row = [triton.cdiv(n, 64) for n in lens]
    width = max(triton.cdiv(max_len, 64), 1)
    if shared_table:
        num_pages = width + 3
        perm = torch.randperm(num_pages, device=dev)[:width].to(torch.int32)
        page_table = perm.unsqueeze(0).expand(rows, width).contiguous()
    else:
        num_pages = sum(pages_per_row) + 3
        perm = torch.randperm(num_pages, device=dev).to(torch.int32)
        page_table = torch.full((rows, width), -1, dtype=torch.int32, device=dev)  # padding: -1
        off = 0
        for r, p in enumerate(pages_per_row):
            page_table[r, :p] = perm[off : off + p]
            off += p
    k_exact = torch.randn(num_pages * 64, 128, device=dev, dtype=torch.float64)
    q_exact = torch.randn(rows, heads, 128, device=dev, dtype=torch.float64)
    w = torch.randn(rows, heads, device=dev, dtype=torch.float32)
    seq = torch.tensor(lens, dtype=torch.int32, device=dev)
    return dict(
        k_exact=k_exact,
        q_exact=q_exact,
        w=w,
        seq=seq,
        page_table=page_table,
        max_len=max_len,
        cache=k_exact.to(torch.bfloat16).view(num_pages, 64 * 128).view(torch.uint8),
        q=q_exact.to(torch.bfloat16),
    )


def check_logits(cfgs: dispatch.ArchConfigs, dev) -> dict[str, float]:
    """Both logits tilings of ``cfgs`` (decode; prefill with row groups) on decode-like rows
    (own pages, -1 padding, a wide output) and prefill-like rows (one shared table)."""
    out = {}
    cases = {
        "decode": (
            37,
            [1, 63, 64, 65, 500, 4095, 4096, 0] + [int(x) for x in torch.randint(1, 4096, (29,))],
            64 * 200,
            False,
        ),
        "prefill": (300, [int(x) for x in torch.linspace(1, 3000, 300)], 3000, True),
    }
    for name, (rows, lens, max_len, shared) in cases.items():
        c = make_logits_case(rows, lens, max_len, dev, shared_table=shared)
        ref_same = R.paged_mqa_logits_reference(
            c["q"], R.index_k_cache_as_rows(c["cache"]), c["w"], c["seq"], c["page_table"], max_len
        )
        ref_exact = R.paged_mqa_logits_reference(c["q_exact"], c["k_exact"], c["w"], c["seq"], c["page_table"], max_len)
        written = torch.arange(max_len, device=dev)[None, :] < c["seq"].long().clamp(max=max_len)[:, None]
        tilings = [("decode tiling", cfgs.logits), ("prefill tiling", cfgs.logits_prefill)]
        if cfgs.logits_few_rows is not None:
            tilings.append(("few-row tiling", cfgs.logits_few_rows))
        for tiling, cfg in tilings:
            label = f"{cfgs.name} logits {name} rows, {tiling}"
            logits = torch.full((rows, max_len), float("nan"), device=dev)
            dispatch.paged_mqa_logits_bf16(
                c["q"].unsqueeze(1),
                c["cache"],
                c["w"].unsqueeze(-1),
                c["seq"].unsqueeze(-1),
                c["page_table"],
                max_len,
                out=logits,
                config=cfg,
            )
            sync(dev)
            fin = torch.isfinite(ref_same) & written
            contract = (
                not torch.isnan(logits[written]).any().item()
                and torch.isnan(logits[~written]).all().item()
                and torch.equal(torch.isneginf(logits[written]), ~fin[written])
            )
            e_same, e_exact = rel_err(logits[fin], ref_same[fin]), rel_err(logits[fin], ref_exact[fin])
            check(f"{label}: contract", contract, "every column < seq_len written, every column past it untouched")
            check(f"{label} vs same-bf16 ref", e_same < 1e-4, f"{e_same:.2e} (fp32 accumulation)")
            check(f"{label} vs exact ref", e_exact < 1e-2, f"{e_exact:.2e} (bf16 q,k storage)")
            key = f"logits_{name}_{tiling.split()[0]}"
            out[f"{key}_rel_err_same"], out[f"{key}_rel_err_exact"] = e_same, e_exact
    return out


def check_aot_sm120() -> list[dict[str, object]]:
    """The sm_120a ahead-of-time build of every kernel: shared memory per block and the
    tensor-core instructions in its SASS (SM120 has mma.sync only)."""
    rows = []
    for r in aot.run_aot(archs=(120,)):
        tc = r.tensor_core_ops
        ok = r.fits and tc["HGMMA"] == 0 and tc["UTCMMA"] == 0
        if r.kernel.startswith("paged_mqa_logits_kernel"):
            ok = ok and tc["HMMA"] > 0
        check(
            f"AOT {r.kernel} sm_120a",
            ok,
            f"{r.shared} B shared <= {r.max_shared}, HMMA {tc['HMMA']} HGMMA {tc['HGMMA']} UTCMMA {tc['UTCMMA']}",
        )
        rows.append(
            dict(
                kernel=r.kernel,
                ptx_target=r.ptx_target,
                shared=r.shared,
                limit=r.max_shared,
                warps=r.num_warps,
                stages=r.num_stages,
                **tc,
            )
        )
    return rows


# ---------------------------------------------------------------------------
# (b) recall
# ---------------------------------------------------------------------------


def recall_study(dev, rows: int = 64, max_len: int = 8192, k: int = 512) -> dict[str, float]:
    lens = [int(x) for x in torch.randint(1024, max_len + 1, (rows,))]
    c = make_logits_case(rows, lens, max_len, dev)
    ref = R.paged_mqa_logits_reference(c["q_exact"], c["k_exact"], c["w"], c["seq"], c["page_table"], max_len)
    bf16 = dispatch.paged_mqa_logits_bf16(c["q"], c["cache"], c["w"], c["seq"], c["page_table"], max_len)
    # SGLang's fp8 path: per-token k scale, per-(token, head) q scale, both max(1e-4, amax)/448.
    k_fp8 = R.fp8_quant_dequant_rows(c["k_exact"])
    q_fp8 = R.fp8_quant_dequant_rows(c["q_exact"])
    fp8 = R.paged_mqa_logits_reference(q_fp8, k_fp8, c["w"], c["seq"], c["page_table"], max_len)
    res = {
        "rows": rows,
        "max_len": max_len,
        "k": k,
        "recall_bf16": R.topk_set_recall(bf16, ref, k),
        "recall_fp8": R.topk_set_recall(fp8, ref, k),
        "rel_err_bf16": rel_err(bf16[torch.isfinite(ref)], ref[torch.isfinite(ref)]),
        "rel_err_fp8": rel_err(fp8[torch.isfinite(ref)], ref[torch.isfinite(ref)]),
    }
    check(
        "recall bf16 > fp8",
        res["recall_bf16"] > res["recall_fp8"],
        f"top-{k} recall bf16 {res['recall_bf16']:.4f} vs fp8 {res['recall_fp8']:.4f}",
    )
    return res


# ---------------------------------------------------------------------------
# (c) timing
# ---------------------------------------------------------------------------


def row(
    kind: str,
    shape: str,
    nbytes: float,
    ms: float,
    ceil: dict[str, float],
    torch_ms: float | None,
    flops: float = 0.0,
    copy_bytes: float | None = None,
    goal: str = "",
    met: bool | None = None,
    copy_same_size_gbs: float | None = None,
) -> dict[str, object]:
    """One table row. copy_bytes: the bytes the % of copy counts (logits: key bytes only)."""
    counted = nbytes if copy_bytes is None else copy_bytes
    gbs = counted / (ms * 1e-3) / 1e9
    tflops = flops / (ms * 1e-3) / 1e12 if flops else None
    return dict(
        kernel=kind,
        shape=shape,
        bytes=nbytes,
        counted_bytes=counted,
        ms=ms,
        gbs=gbs,
        pct_copy=100 * gbs / ceil["copy_gbs"],
        tflops=tflops,
        pct_matmul=100 * tflops / ceil["matmul_tflops"] if tflops else None,
        torch_ms=torch_ms,
        speedup=(torch_ms / ms) if torch_ms else None,
        goal=goal,
        met=met,
        pct_copy_same_size=100 * gbs / copy_same_size_gbs if copy_same_size_gbs else None,
    )


def time_logits(
    dev,
    ceil,
    cfg: dispatch.LogitsConfig | None,
    rows,
    lens,
    max_len,
    label,
    shared=False,
    with_torch=True,
    goal: str = "",
) -> dict[str, object]:
    """Prefill-style logits rows of the main table (decode shapes: ``benchmarks.kernels_decode``)."""
    key_bytes = sum(lens) * 256  # what the rows read (shared pages: from L2 after the first row)
    unique = (max(lens) * 256) if shared else key_bytes
    nset = n_sets(unique + rows * 64 * 128 * 2, cap=8)
    sets = [timing_logits_case(rows, lens, max_len, dev, shared) for _ in range(nset)]
    ms = bench(
        lambda i: dispatch.paged_mqa_logits_bf16(
            sets[i]["q"],
            sets[i]["cache"],
            sets[i]["w"],
            sets[i]["seq"],
            sets[i]["page_table"],
            max_len,
            out=sets[i]["out"],
            config=cfg,
        ),
        nset,
    )
    torch_ms = None
    if with_torch:
        torch_ms = bench(
            lambda i: R.paged_mqa_logits_torch(
                sets[i]["q"], sets[i]["cache"], sets[i]["w"], sets[i]["seq"], sets[i]["page_table"], max_len
            ),
            nset,
            graph=False,
        )
    written = sum(min(n, max_len) for n in lens) * 4
    other = rows * 64 * (128 * 2 + 4) + sum(triton.cdiv(n, 64) for n in lens) * 4 + written
    flops = 2.0 * 64 * 128 * sum(lens)
    sets.clear()
    torch.cuda.empty_cache()
    if goal == "matmul60":
        r = row("logits", label, unique + other, ms, ceil, torch_ms, flops, goal=">=60% matmul")
        r["met"] = r["pct_matmul"] >= 60.0
    else:
        r = row("logits", label, unique + other, ms, ceil, torch_ms, flops, copy_bytes=key_bytes)
    return r


def store_ablated(
    kv, w, eps, freqs, pos, loc, cache, *, cfg: dispatch.StoreConfig, with_hadamard: bool, with_rope_table: bool
) -> None:
    """The store kernel with a stage left out (wrong output): how much that stage costs."""
    table = as_rope_table(freqs)
    pages = as_index_k_pages("index_k_cache", cache)
    grid = (max(1, min(triton.cdiv(kv.shape[0], cfg.block_m), cfg.programs_per_sm * dispatch.num_sms(kv.device))),)
    index_k_store.index_k_norm_rope_hadamard_store_kernel[grid](
        kv,
        kv.stride(0),
        w,
        table,
        table.stride(0),
        pos,
        loc,
        pages,
        pages.stride(0),
        kv.shape[0],
        float(eps),
        D=128,
        ROPE_DIM=64,
        PAGE=64,
        BLOCK_M=cfg.block_m,
        PREFETCH=cfg.prefetch,
        WITH_HADAMARD=with_hadamard,
        WITH_ROPE_TABLE=with_rope_table,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )


GOAL_MIN_BYTES = 32 << 20  # store / index-Q goal: >= 85% of copy for >= 32 MiB moved


def with_copy_goal(r: dict[str, object]) -> dict[str, object]:
    """The copy goal: >= 85% of a graphed copy of the same bytes (above 512 MB, where that copy is not
    measured, of the 2 GiB copy)."""
    if r["bytes"] >= GOAL_MIN_BYTES:
        same = r.get("pct_copy_same_size")
        r["goal"], r["met"] = ">=85% copy@N", (same if same is not None else r["pct_copy"]) >= 85.0
    return r


def time_store(
    dev,
    ceil,
    n: int,
    cfg=None,
    with_torch=True,
    with_scatter=True,
    label: str | None = None,
    launch: Callable[..., None] | None = None,
    distinct_positions: bool = False,
    copy_same_size: bool = False,
) -> list[dict[str, object]]:
    pages = triton.cdiv(n, 64) + 16
    per_set = n * (256 + 256 + 256 + 16)  # kv in, rope row in, bf16 row out, pos + slot
    nset = n_sets(per_set, cap=4)
    # distinct_positions: every row reads its own RoPE row (consecutive positions, as a long
    # prefill does), so the table comes from DRAM rather than L2 (the default draws 1M rows
    # from a 64K-position table that the 50 MB L2 mostly holds).
    freqs = random_freqs(dev, n * nset) if distinct_positions else random_freqs(dev)
    sets = []
    for i in range(nset):
        sets.append(
            dict(
                kv=torch.randn(n, 128, device=dev).to(torch.bfloat16),
                pos=(
                    torch.arange(i * n, (i + 1) * n, device=dev)
                    if distinct_positions
                    else torch.randint(0, ROPE_POSITIONS, (n,), device=dev)
                ),
                loc=torch.randperm(pages * 64, device=dev)[:n],
                cache=torch.empty(pages, 64 * 256, dtype=torch.uint8, device=dev),
            )
        )
    w = torch.rand(128, device=dev) + 0.5
    if launch is None:

        def launch(kv, w, eps, freqs, pos, loc, cache):
            dispatch.store_index_k_bf16(kv, w, eps, freqs, pos, loc, cache, config=cfg)

    ms = bench(lambda i: launch(sets[i]["kv"], w, 1e-6, freqs, sets[i]["pos"], sets[i]["loc"], sets[i]["cache"]), nset)
    torch_ms = None
    if with_torch:
        h = R.hadamard_matrix(128, torch.float32, dev)
        torch_ms = bench(
            lambda i: R.store_index_k_torch(
                sets[i]["kv"], w, 1e-6, freqs, sets[i]["pos"], sets[i]["loc"], sets[i]["cache"], h
            ),
            nset,
            graph=False,
        )
    same = measure_copy_at(dev, per_set) if copy_same_size and per_set <= SAME_SIZE_COPY_MAX else None
    out = [with_copy_goal(row("store", label or f"N={n}", per_set, ms, ceil, torch_ms, copy_same_size_gbs=same))]
    if with_scatter:
        rows_bf16 = [torch.randn(n, 128, device=dev).to(torch.bfloat16) for _ in range(nset)]
        ms_scatter = bench(
            lambda i: dispatch.scatter_index_k_bf16(rows_bf16[i], sets[i]["loc"], sets[i]["cache"]), nset
        )
        torch_scatter = (
            bench(lambda i: R.scatter_reference(sets[i]["cache"], rows_bf16[i], sets[i]["loc"]), nset, graph=False)
            if with_torch
            else None
        )
        out.append(row("scatter", f"N={n}", n * (256 + 256 + 8), ms_scatter, ceil, torch_scatter))
        rows_bf16.clear()
    sets.clear()
    torch.cuda.empty_cache()
    return out


def time_q(
    dev, ceil, n: int, cfg=None, with_torch=True, label: str | None = None, copy_same_size: bool = False
) -> dict[str, object]:
    freqs = random_freqs(dev)
    per_set = n * 64 * (256 + 256 + 2 + 4) + n * (256 + 8)  # q in/out, weights in/out, rope row + pos
    nset = n_sets(per_set, cap=4)
    sets = [
        dict(
            q=torch.randn(n, 64 * 128, device=dev).to(torch.bfloat16),
            w=torch.randn(n, 64, device=dev).to(torch.bfloat16),
            pos=torch.randint(0, ROPE_POSITIONS, (n,), device=dev),
        )
        for _ in range(nset)
    ]
    ms = bench(
        lambda i: dispatch.index_q_bf16(sets[i]["q"], sets[i]["w"], 0.01, freqs, sets[i]["pos"], config=cfg), nset
    )
    torch_ms = None
    if with_torch:
        h = R.hadamard_matrix(128, torch.float32, dev)
        torch_ms = bench(
            lambda i: R.index_q_torch(sets[i]["q"], sets[i]["w"], 0.01, freqs, sets[i]["pos"], hadamard=h),
            nset,
            graph=False,
        )
    sets.clear()
    torch.cuda.empty_cache()
    same = measure_copy_at(dev, per_set) if copy_same_size and per_set <= SAME_SIZE_COPY_MAX else None
    return with_copy_goal(row("index_q", label or f"N={n}", per_set, ms, ceil, torch_ms, copy_same_size_gbs=same))


def format_rows(rows: list[dict[str, object]]) -> str:
    head = (
        f"{'kernel':8s} {'shape':40s} {'MB':>8s} {'us':>9s} {'GB/s':>6s} {'%copy':>6s} {'%cp@N':>6s} "
        f"{'TFLOP/s':>7s} {'%mm':>5s} {'torch us':>9s} {'x torch':>8s}  goal"
    )
    lines = [head, "-" * (len(head) + 24)]
    for r in rows:

        def opt(key, fmt, width, r=r):
            v = r.get(key)
            return format(v, fmt) if v is not None else f"{'-':>{width}s}"

        torch_us = format(r["torch_ms"] * 1e3, "9.1f") if r.get("torch_ms") else f"{'-':>9s}"
        goal = r.get("goal") or ""
        if goal:
            goal = f"{goal}: {'met' if r.get('met') else 'NOT met'}"
        lines.append(
            f"{r['kernel']:8s} {r['shape']:40s} {r['counted_bytes'] / 1e6:8.1f} {r['ms'] * 1e3:9.2f} {r['gbs']:6.0f} "
            f"{r['pct_copy']:6.1f} {opt('pct_copy_same_size', '6.1f', 6)} {opt('tflops', '7.1f', 7)} "
            f"{opt('pct_matmul', '5.1f', 5)} {torch_us} "
            f"{opt('speedup', '7.1f', 7)}{'x' if r.get('speedup') else ' '}  {goal}"
        )
    return "\n".join(lines)


def prefill_lens() -> list[int]:
    return [int(x) for x in torch.linspace(4, 8192, 2048)]


_L = dispatch.LogitsConfig
# Decode tilings compared by --sweep logits (busy_per_sm=2, the item grid, page-id
# prefetch depth, fewer and longer programs for few rows, 64-key tiles). The H200 call of
# 2026-12-01 (NOTES.md, logits v3) ran a wider set: the rows-x-split grid with busy 2, page ids 0 /
# 16 at a time, min_chunk 1024 and 8 warps lost everywhere to one of these.
LOGITS_VARIANTS = {
    "grid busy4 (v2.3)": _L(128, 4, 3, programs_per_sm=2, max_chunk=8192, min_chunk=256, page_block=64, busy_per_sm=4),
    "items bn128 s3 busy4": _L(128, 4, 3, min_chunk=256, page_block=64, busy_per_sm=4, item_grid=True),
    "items bn64 s4 busy2": _L(64, 4, 4, min_chunk=256, page_block=64, busy_per_sm=2, item_grid=True),
    "items bn64 s5 busy2": _L(64, 4, 5, min_chunk=256, page_block=64, busy_per_sm=2, item_grid=True),
    "items bn64 s6 busy2": _L(64, 4, 6, min_chunk=256, page_block=64, busy_per_sm=2, item_grid=True),
    "items bn64 s6 busy3": _L(64, 4, 6, min_chunk=256, page_block=64, busy_per_sm=3, item_grid=True),
    "items bn64 s6 busy4": _L(64, 4, 6, min_chunk=256, page_block=64, busy_per_sm=4, item_grid=True),
    "items bn64 s5 busy4": _L(64, 4, 5, min_chunk=256, page_block=64, busy_per_sm=4, item_grid=True),
}
SWEEP_DECODE = (
    (1, [2048]),
    (1, [65536]),
    (8, [8192] * 8),
    (64, [2048] * 64),
    (64, [8192] * 64),
    (64, [32768] * 64),
    (128, [4096] * 128),
    (128, [65536] * 128),
    (128, [65536] + [2048] * 127),
)


def _sweep_logits(dev, ceil, note) -> None:
    from benchmarks.kernels_decode import time_decode

    for rows, lens in SWEEP_DECODE:
        for name, cfg in LOGITS_VARIANTS.items():
            shape = f"{rows}x{lens[0] // 1024}K{'mix' if len(set(lens)) > 1 else ''} {name}"
            note(time_decode(dev, ceil, shape, rows, lens, goal=False, cfg=cfg, tilings=(), copy=False))


FEW_ROWS_VARIANTS = {
    "grid bn64 s4 busy2 (few-row default)": _L(
        64, 4, 4, programs_per_sm=2, max_chunk=8192, min_chunk=256, page_block=64, busy_per_sm=2
    ),
    "items bn64 s4 busy2": _L(64, 4, 4, min_chunk=256, page_block=64, busy_per_sm=2, item_grid=True),
    "items bn128 s3 busy2 (decode default)": _L(128, 4, 3, min_chunk=256, page_block=64, busy_per_sm=2, item_grid=True),
    "grid busy4 (v2.3)": LOGITS_VARIANTS["grid busy4 (v2.3)"],
}


def _sweep_few_rows(dev, ceil, note) -> None:
    from benchmarks.kernels_decode import time_decode

    for rows, lens in ((1, [2048]), (1, [65536]), (8, [8192] * 8), (8, [65536] * 8)):
        for name, cfg in FEW_ROWS_VARIANTS.items():
            note(
                time_decode(
                    dev,
                    ceil,
                    f"{rows}x{lens[0] // 1024}K {name}",
                    rows,
                    lens,
                    goal=False,
                    cfg=cfg,
                    tilings=(),
                    copy=False,
                )
            )


def _sweep_prefill(dev, ceil, note) -> None:
    for bn, warps, stages, per_sm, rpp in [
        (128, 4, 3, 2, 1),
        (128, 4, 3, 1, 2),
        (128, 8, 3, 1, 2),
        (128, 8, 3, 1, 4),
        (128, 8, 2, 1, 4),
        (64, 4, 3, 1, 4),
        (128, 8, 3, 2, 4),
    ]:
        cfg = dispatch.LogitsConfig(
            block_n=bn, num_warps=warps, num_stages=stages, programs_per_sm=per_sm, rows_per_program=rpp
        )
        note(
            time_logits(
                dev,
                ceil,
                cfg,
                2048,
                prefill_lens(),
                8192,
                f"prefill bn{bn} w{warps} s{stages} {per_sm}/SM rows{rpp}",
                shared=True,
                with_torch=False,
            )
        )


# (block_m, num_warps, programs per SM, prefetch); the default first and last (repeat spread).
# Small sizes (goal: >= 85% of the same-size copy at 33.7 MB): fewer or more, smaller programs.
TILE_VARIANTS = [
    (16, 2, 8, True),
    (16, 2, 4, True),
    (16, 2, 12, False),
    (16, 1, 16, True),
    (8, 1, 16, True),
    (32, 4, 4, True),
    (32, 2, 8, False),
    (16, 2, 8, True),
]


def _sweep_store(dev, ceil, note) -> None:
    for n in (43008,):
        for bm, warps, per_sm, prefetch in TILE_VARIANTS:
            cfg = dispatch.StoreConfig(block_m=bm, num_warps=warps, programs_per_sm=per_sm, prefetch=prefetch)
            for r in time_store(
                dev,
                ceil,
                n,
                cfg,
                with_torch=False,
                with_scatter=False,
                label=f"N={n} bm{bm} w{warps} {per_sm}/SM pf{int(prefetch)}",
                copy_same_size=True,
            ):
                note(r)


def _sweep_q(dev, ceil, note) -> None:
    # (block_m, warps, programs per SM, prefetch, streaming cache hints)
    for n in (1024, 32768):
        for bm, warps, per_sm, prefetch, stream in (
            (16, 2, 8, True, False),
            (16, 2, 8, True, True),
            (16, 2, 12, False, False),
            (16, 2, 12, False, True),
            (32, 2, 8, False, True),
            (16, 2, 8, True, False),
        ):
            cfg = dispatch.QConfig(
                block_m=bm, num_warps=warps, programs_per_sm=per_sm, prefetch=prefetch, streaming=stream
            )
            note(
                time_q(
                    dev,
                    ceil,
                    n,
                    cfg,
                    with_torch=False,
                    copy_same_size=n == 1024,
                    label=f"N={n} bm{bm} w{warps} {per_sm}/SM pf{int(prefetch)} stream{int(stream)}",
                )
            )


SWEEPS = {
    "logits": _sweep_logits,
    "few": _sweep_few_rows,
    "prefill": _sweep_prefill,
    "store": _sweep_store,
    "q": _sweep_q,
}


def run_sweeps(dev, ceil, sweeps, t0) -> list[dict[str, object]]:
    sweep: list[dict[str, object]] = []

    def note(r):
        sweep.append(r)
        log(f"  sweep {r['kernel']} {r['shape']}: {r['ms'] * 1e3:.2f} us  [{time.time() - t0:.0f}s]")

    for name, fn in SWEEPS.items():
        if name in sweeps:
            fn(dev, ceil, note)
    return sweep


def run_decode(dev, ceil, t0: float) -> list[dict[str, object]]:
    from benchmarks.kernels_decode import time_decode

    decode = []
    for label, rows_, lens, goal in decode_shapes():
        r = time_decode(dev, ceil, label, rows_, lens, goal=goal == "copy85")
        if goal == "10us":
            r["goal"], r["met"] = "<=10 us", r["ms"] * 1e3 <= 10.0
        decode.append(r)
        log(
            f"  {label}: ours {r['ms'] * 1e3:.2f} us, gather {r['gather_ms'] * 1e3:.2f} us ({r['gather_tiling']}), "
            f"copy {r['copy_ms'] * 1e3 if r['copy_ms'] else float('nan'):.2f} us  [{time.time() - t0:.0f}s]"
        )
    return decode


def run_timing(dev, ceil, skip_torch: bool, t0: float) -> list[dict[str, object]]:
    timing: list[dict[str, object]] = []
    timing.append(
        time_logits(
            dev,
            ceil,
            None,
            2048,
            prefill_lens(),
            8192,
            "prefill 2048 rows x <=8K, shared pages",
            shared=True,
            with_torch=not skip_torch,
            goal="matmul60",
        )
    )
    log(f"  prefill: {timing[-1]['ms'] * 1e3:.2f} us  [{time.time() - t0:.0f}s]")
    for n in (43008, 65536, 1 << 18, 1 << 20):
        timing.extend(
            time_store(
                dev, ceil, n, with_torch=not skip_torch and n == 1 << 20, with_scatter=n == 1 << 20, copy_same_size=True
            )
        )
        log(f"  store N={n}: {timing[-1]['ms'] * 1e3:.2f} us  [{time.time() - t0:.0f}s]")
    timing.extend(
        time_store(
            dev,
            ceil,
            1 << 20,
            with_torch=False,
            with_scatter=False,
            label="N=1M distinct pos (RoPE rows from DRAM)",
            distinct_positions=True,
        )
    )
    for n in (1024, 4096, 32768):
        timing.append(time_q(dev, ceil, n, with_torch=not skip_torch and n == 32768, copy_same_size=True))
        log(f"  q N={n}: {timing[-1]['ms'] * 1e3:.2f} us  [{time.time() - t0:.0f}s]")
    return timing


def per_step_rows(dev, ceil) -> list[dict[str, object]]:
    """``plan``'s decode bytes per request beside the measured logits time of one request per c4
    layer and per step (every c4 layer of the stage), bf16 index-K, this GPU's default tiling."""
    from benchmarks.kernels_decode import time_decode
    from sglang_dsv4_ext.config import IndexKDtype
    from sglang_dsv4_ext.tools.plan import decode_reads
    from sglang_dsv4_ext.tools.sglang_cpu import dsv4_model

    model = dsv4_model.load_model()
    c4_layers = model.compress_ratios[: model.num_hidden_layers].count(4)
    out = []
    for n in decode_reads.DEFAULT_CONTEXTS:
        keys = n // 4
        r = time_decode(dev, ceil, f"1 request, {n // 1024}K context", 1, [keys], goal=False, tilings=(), copy=False)
        reads = {d: decode_reads.decode_read_bytes(model, n, d) for d in IndexKDtype}
        out.append(
            dict(
                context=n,
                c4_keys=keys,
                c4_layers=c4_layers,
                logits_us_per_layer=r["ms"] * 1e3,
                logits_us_per_step=r["ms"] * 1e3 * c4_layers,
                **{f"{d}_bytes": v["total"] for d, v in reads.items()},
                bf16_indexer_share=reads[IndexKDtype.BF16]["indexer"] / reads[IndexKDtype.BF16]["total"],
            )
        )
    return out


def format_per_step(rows: list[dict[str, object]]) -> str:
    head = (
        f"{'context':>8s} {'fp8 MB':>8s} {'bf16 MB':>8s} {'fp4 MB':>8s} {'bf16/fp8':>8s} {'bf16 idx%':>9s} "
        f"{'c4 keys':>8s} {'us/layer':>9s} {'us/step':>9s}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['context']:>8,d} {r['fp8_bytes'] / 1e6:8.1f} {r['bf16_bytes'] / 1e6:8.1f} "
            f"{r['fp4_bytes'] / 1e6:8.1f} {r['bf16_bytes'] / r['fp8_bytes']:8.3f} "
            f"{100 * r['bf16_indexer_share']:9.1f} {r['c4_keys']:>8,d} {r['logits_us_per_layer']:9.2f} "
            f"{r['logits_us_per_step']:9.1f}"
        )
    lines.append(
        "MB: KV bytes one decode step reads per request (sglang_dsv4_ext.tools.plan.decode_reads, as "
        "`sglang-dsv4 plan --context` prints them); us: our bf16 logits for that one request, per c4 layer "
        "(CUDA-graph median) and x the c4 layers of a step"
    )
    return "\n".join(lines)


def _print_stock_status(stock: dict[str, object]) -> None:
    if not stock:
        log("stock SGLang side-by-side: not run (--no-stock, or no GPU bundle: python -m benchmarks.sglang_gpu.bundle)")
        return
    log(f"stock SGLang side-by-side: {stock.get('status')}; tilelang: {stock.get('tilelang', 'not tried')}")
    if stock.get("traceback"):
        log(stock["traceback"])


def print_summary(results, info, own, ceil) -> None:
    from benchmarks.kernels_decode import format_decode

    sweep, timing = results["sweep"], results["timing"]
    log("")
    if sweep:
        log("sweep:")
        decode_sweep = [r for r in sweep if "key_bytes" in r]
        if decode_sweep:
            log(format_decode(decode_sweep))
        if len(decode_sweep) < len(sweep):
            log(format_rows([r for r in sweep if "key_bytes" not in r]))
    for a in results.get("aot_sm120", []):
        log(
            f"sm_120a AOT {a['kernel']}: {a['shared']} B shared (<= {a['limit']}), HMMA {a['HMMA']} "
            f"HGMMA {a['HGMMA']} UTCMMA {a['UTCMMA']}"
        )
    rc = results["recall"]
    log(
        f"top-{rc['k']} recall vs float64 ({rc['rows']} rows, <= {rc['max_len']} keys): bf16 {rc['recall_bf16']:.4f}, "
        f"fp8 q/k quant-dequant {rc['recall_fp8']:.4f}"
    )
    if results.get("per_step"):
        log("decode bytes per request (plan --context) and the measured logits time:")
        log(format_per_step(results["per_step"]))
    _print_stock_status(results.get("stock", {}))
    log(
        f"{info['device']} ({info['capability']}, {info['sms']} SMs), torch {info['torch']}, triton {info['triton']}, "
        f"config {own.name}; copy {ceil['copy_gbs']:.0f} GB/s; bf16 matmul {ceil['matmul_tflops']:.0f} TFLOP/s "
        f"(8192^3; K=128 shape {ceil['matmul_k128_tflops']:.0f}). %copy: logits on key bytes, others on all bytes; "
        f"%cp@N: over a graphed copy of the same bytes; %mm: over the 8192^3 rate; us: CUDA-graph median per call"
    )
    log(format_rows(timing))
    log(format_decode(results["decode"]))
    goals = [r for r in results["decode"] + timing if r.get("goal")]
    log(
        f"goals met: {sum(bool(r['met']) for r in goals)} / {len(goals)}; correctness failures: {len(FAILURES)}"
        + "".join(f"\n  {x}" for x in FAILURES)
    )


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.kernels", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out",
        default=os.environ.get("OUT", "bench_out"),
        help="folder for bench_kernels.json (default: $OUT, else ./bench_out)",
    )
    parser.add_argument(
        "--sweep",
        default="",
        help="comma-separated tiling sweeps to add: logits, few (few-row decode), prefill, "
        "store, q, or all (default: none)",
    )
    parser.add_argument("--skip-torch", action="store_true", help="skip the torch baselines (no 'x torch' column)")
    parser.add_argument("--skip-aot", action="store_true", help="skip the sm_120a ahead-of-time build check")
    parser.add_argument(
        "--no-stock",
        action="store_true",
        help="skip stock SGLang's side-by-side (benchmarks.kernels_stock; needs the GPU bundle)",
    )
    args = parser.parse_args(argv)
    sweeps = {x.strip() for x in args.sweep.split(",") if x.strip()}
    if sweeps == {"all"}:
        sweeps = set(SWEEPS)
    if not sweeps <= set(SWEEPS):
        parser.error(f"--sweep takes a comma-separated subset of {','.join(SWEEPS)} or 'all', got {args.sweep!r}")
    args.sweeps = sweeps
    return args


def _start_stock(args):
    """The stock SGLang side (a subprocess booting the bundle while we check correctness), or None.
    A thread queues its output lines (None at its end)."""
    if args.no_stock:
        return None
    import queue
    import threading

    from benchmarks import kernels_stock
    from benchmarks.sglang_gpu import bootstrap

    try:
        bootstrap.find_carry()
    except bootstrap.BundleError as exc:
        log(f"stock side-by-side skipped: {exc}")
        return None
    proc = kernels_stock.start(args.out)
    proc.lines, proc.stock_ready = queue.Queue(), False

    def pump():
        for line in proc.stdout:
            proc.lines.put(line)
        proc.lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return proc


def _wait_stock(proc, phase: str, timeout_s: float, go: bool = False) -> None:
    """Relay the subprocess's lines until it says ``ready`` (phase "setup") or ends. A setup that
    outlasts the wait is left running (it compiles TileLang kernels: CPU work and a few tiny launches);
    a timing phase that does is stopped."""
    import queue

    if proc is None or (phase == "setup" and proc.stock_ready):
        return
    if go:
        try:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        except OSError as exc:  # it ended already (its JSON says why)
            log(f"  [stock] ended before it was told to go: {exc}")
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            line = proc.lines.get(timeout=max(0.01, deadline - time.time()))
        except queue.Empty:
            break
        if line is None:  # it ended
            return
        if line.strip() == "ready":
            proc.stock_ready = True
            if phase == "setup":
                return
            continue
        log(f"  [stock] {line.rstrip()}")
    if phase == "setup":
        log(f"  [stock] setup not done within {timeout_s:.0f}s; timing goes on beside it")
        return
    log(f"  [stock] {phase}: no answer within {timeout_s:.0f}s; stopped")
    proc.kill()


def _correctness(own, dev) -> dict[str, object]:
    """Every configuration set run here, plus the other decode grid of the own and SM120 tilings."""
    sets = {name: dispatch.CONFIGS[name] for name in dict.fromkeys([own.name, "sm120", "default"])}
    for name in dict.fromkeys([own.name, "sm120"]):
        c = dispatch.CONFIGS[name]
        other = dataclasses.replace(c.logits, item_grid=not c.logits.item_grid, busy_per_sm=c.logits.busy_per_sm or 2)
        sets[f"{name}+{'rows-x-split' if c.logits.item_grid else 'item-grid'}"] = dataclasses.replace(
            c, name=f"{name}+other-grid", logits=other
        )
    return {name: {**check_store(c, dev), **check_q(c, dev), **check_logits(c, dev)} for name, c in sets.items()}


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks.kernels needs a CUDA GPU (run it on a CUDA GPU machine)", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    torch.manual_seed(1234)
    t0 = time.time()
    stock_proc = _start_stock(args)
    props = torch.cuda.get_device_properties(dev)
    own = dispatch.configs_for(dev)
    info = dict(
        device=props.name,
        capability=f"{props.major}.{props.minor}",
        sms=props.multi_processor_count,
        torch=torch.__version__,
        triton=triton.__version__,
        config=own.name,
    )
    log(f"device {info}")
    results: dict[str, object] = dict(info=info)
    log("(a) correctness vs float64 (outputs poisoned first); SM120 and default tilings forced on this GPU")
    results["correctness"] = _correctness(own, dev)
    if not args.skip_aot:
        results["aot_sm120"] = check_aot_sm120()
    log(f"  [{time.time() - t0:.0f}s]")
    log("(b) top-512 recall vs float64 logits")
    results["recall"] = recall_study(dev)
    log(f"  {results['recall']}  [{time.time() - t0:.0f}s]")
    _wait_stock(stock_proc, "setup", 120)  # it times nothing until told to
    ceil = dict(
        copy_gbs=measure_copy_bandwidth(dev),
        matmul_tflops=measure_matmul_tflops(dev, 8192, 8192, 8192),
        matmul_k128_tflops=measure_matmul_tflops(dev, 8192, 2048 * 64, 128),
    )
    log(
        f"ceilings: copy {ceil['copy_gbs']:.0f} GB/s (read + write, 2 GiB); bf16 matmul 8192^3 "
        f"{ceil['matmul_tflops']:.0f} TFLOP/s; K=128 (8192 x 131072 x 128) {ceil['matmul_k128_tflops']:.0f} TFLOP/s"
    )
    results["ceilings"] = ceil
    log("(d) timing (CUDA-graph replays, medians)")
    results["decode"] = run_decode(dev, ceil, t0)
    results["timing"] = run_timing(dev, ceil, args.skip_torch, t0)
    results["per_step"] = per_step_rows(dev, ceil)
    results["sweep"] = run_sweeps(dev, ceil, args.sweeps, t0)
    torch.cuda.empty_cache()
    if stock_proc is not None and stock_proc.poll() is None:
        log(f"(e) stock SGLang at the decode shapes  [{time.time() - t0:.0f}s]")
        _wait_stock(stock_proc, "setup", 240)
        _wait_stock(stock_proc, "timing", 300, go=True)
        stock_proc.wait(timeout=30)
    stock_json = os.path.join(args.out, "kernels_stock.json")
    results["stock"] = json.load(open(stock_json)) if stock_proc is not None and os.path.exists(stock_json) else {}
    from benchmarks.kernels_decode import join_stock

    join_stock(results["decode"], results["stock"])
    results["failures"] = FAILURES
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench_kernels.json"), "w") as f:
        json.dump(results, f, indent=1)
    print_summary(results, info, own, ceil)
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
