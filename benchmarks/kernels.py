"""GPU check + benchmark of the bf16 index-K kernels (one call on the lent H200).

    PYTHONUNBUFFERED=1 python -m kernels_sm120.bench_kernels --out $OUT

(a) correctness against float64 references on fresh random inputs, outputs poisoned
    first, for every configuration set in ``dispatch.CONFIGS`` (tile shapes differ);
(b) top-512 set recall against float64 logits for bf16 keys/queries (this path) and for
    SGLang's fp8 quantize-dequantize of the same inputs;
(c) timing (``triton.testing.do_bench`` median of CUDA-graph replays that run every input set
    once, the sets rotated so L2 does not serve them; the torch baselines eagerly, as the
    torch fallbacks run, since their intermediates would pile up in a graph's memory pool):
    bytes moved, GB/s, % of the measured device-to-device copy bandwidth, speedup over the
    torch baseline, plus a sweep of logits / store / q tilings on this GPU.
Full results go to ``<out>/bench_kernels.json``; the tables are printed last.
Needs CUDA; no SGLang.
"""

import argparse
import functools
import json
import math
import os
import sys
import time
from typing import Callable, Dict, List, Optional

import torch
import triton

from . import dispatch, index_k_store
from . import reference as R
from ._validate import as_index_k_pages, as_rope_table

INF = float("inf")
ROPE_POSITIONS = 1 << 16
FAILURES: List[str] = []


def log(msg: str) -> None:
    print(msg, flush=True)


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


def check_store(cfgs: dispatch.ArchConfigs, dev) -> Dict[str, float]:
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
    check(f"{cfgs.name} store rel err", err < 4e-3 and torch.isfinite(got).all().item(), f"{err:.2e} (bf16 rounding ~1.6e-3)")
    check(f"{cfgs.name} store one rounding", off_rn < 2e-3,
          f"{100 * off_rn:.3f}% of elements differ from round-to-nearest(float64)")
    check(f"{cfgs.name} store leaves other slots", torch.isnan(rows[~written].float()).all().item(), "unwritten slots still poisoned")
    # scatter of the already-transformed rows must give the same bytes
    cache2 = torch.full_like(cache, 0xFF)
    dispatch.scatter_index_k_bf16(got, loc[keep], cache2, config=cfgs.scatter)
    sync(dev)
    check(f"{cfgs.name} scatter", torch.equal(cache2[:, :].view(torch.bfloat16).view(-1, 128)[loc[keep]], got),
          "bitwise equal to the stored rows")
    return {"store_rel_err": err, "store_frac_not_rn": off_rn}


def check_q(cfgs: dispatch.ArchConfigs, dev) -> Dict[str, float]:
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
    check(f"{cfgs.name} q one rounding", off_rn < 2e-3,
          f"{100 * off_rn:.3f}% of elements differ from round-to-nearest(float64)")
    check(f"{cfgs.name} q weights rel err", ew < 1e-6 and torch.isfinite(w_out).all().item(), f"{ew:.2e}")
    return {"q_rel_err": eq, "q_frac_not_rn": off_rn, "w_rel_err": ew}


def make_logits_case(rows: int, lens: List[int], max_len: int, dev, shared_table: bool = False,
                     heads: int = 64, k_dtype=torch.bfloat16):
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
            page_table[r, :p] = perm[off: off + p]
            off += p
    k_exact = torch.randn(num_pages * 64, 128, device=dev, dtype=torch.float64)
    q_exact = torch.randn(rows, heads, 128, device=dev, dtype=torch.float64)
    w = torch.randn(rows, heads, device=dev, dtype=torch.float32)
    seq = torch.tensor(lens, dtype=torch.int32, device=dev)
    return dict(k_exact=k_exact, q_exact=q_exact, w=w, seq=seq, page_table=page_table, max_len=max_len,
                cache=k_exact.to(torch.bfloat16).view(num_pages, 64 * 128).view(torch.uint8),
                q=q_exact.to(torch.bfloat16))


def check_logits(cfgs: dispatch.ArchConfigs, dev) -> Dict[str, float]:
    out = {}
    cases = {
        "decode": (37, [1, 63, 64, 65, 500, 4095, 4096, 0] + [int(x) for x in torch.randint(1, 4096, (29,))], 4100, False),
        "prefill": (300, [int(x) for x in torch.linspace(1, 3000, 300)], 3000, True),
    }
    for name, (rows, lens, max_len, shared) in cases.items():
        c = make_logits_case(rows, lens, max_len, dev, shared_table=shared)
        logits = torch.full((rows, max_len), float("nan"), device=dev)
        dispatch.paged_mqa_logits_bf16(c["q"].unsqueeze(1), c["cache"], c["w"].unsqueeze(-1), c["seq"].unsqueeze(-1),
                                       c["page_table"], max_len, out=logits, config=cfgs.logits)
        sync(dev)
        ref_same = R.paged_mqa_logits_reference(c["q"], R.index_k_cache_as_rows(c["cache"]), c["w"], c["seq"],
                                                c["page_table"], max_len)
        ref_exact = R.paged_mqa_logits_reference(c["q_exact"], c["k_exact"], c["w"], c["seq"], c["page_table"], max_len)
        fin = torch.isfinite(ref_same)
        mask_ok = torch.equal(torch.isneginf(logits), ~fin) and not torch.isnan(logits).any().item()
        e_same, e_exact = rel_err(logits[fin], ref_same[fin]), rel_err(logits[fin], ref_exact[fin])
        check(f"{cfgs.name} logits {name} -inf mask", mask_ok, "every element written, -inf exactly past each row")
        check(f"{cfgs.name} logits {name} vs same-bf16 ref", e_same < 1e-4, f"{e_same:.2e} (fp32 accumulation)")
        check(f"{cfgs.name} logits {name} vs exact ref", e_exact < 1e-2, f"{e_exact:.2e} (bf16 q,k storage)")
        out[f"logits_{name}_rel_err_same"] = e_same
        out[f"logits_{name}_rel_err_exact"] = e_exact
    return out


# ---------------------------------------------------------------------------
# (b) recall
# ---------------------------------------------------------------------------


def recall_study(dev, rows: int = 64, max_len: int = 8192, k: int = 512) -> Dict[str, float]:
    lens = [int(x) for x in torch.randint(1024, max_len + 1, (rows,))]
    c = make_logits_case(rows, lens, max_len, dev)
    ref = R.paged_mqa_logits_reference(c["q_exact"], c["k_exact"], c["w"], c["seq"], c["page_table"], max_len)
    bf16 = dispatch.paged_mqa_logits_bf16(c["q"], c["cache"], c["w"], c["seq"], c["page_table"], max_len)
    # SGLang's fp8 path: per-token k scale, per-(token, head) q scale, both max(1e-4, amax)/448.
    k_fp8 = R.fp8_quant_dequant_rows(c["k_exact"])
    q_fp8 = R.fp8_quant_dequant_rows(c["q_exact"])
    fp8 = R.paged_mqa_logits_reference(q_fp8, k_fp8, c["w"], c["seq"], c["page_table"], max_len)
    res = {
        "rows": rows, "max_len": max_len, "k": k,
        "recall_bf16": R.topk_set_recall(bf16, ref, k),
        "recall_fp8": R.topk_set_recall(fp8, ref, k),
        "rel_err_bf16": rel_err(bf16[torch.isfinite(ref)], ref[torch.isfinite(ref)]),
        "rel_err_fp8": rel_err(fp8[torch.isfinite(ref)], ref[torch.isfinite(ref)]),
    }
    check("recall bf16 > fp8", res["recall_bf16"] > res["recall_fp8"],
          f"top-{k} recall bf16 {res['recall_bf16']:.4f} vs fp8 {res['recall_fp8']:.4f}")
    return res


# ---------------------------------------------------------------------------
# (c) timing
# ---------------------------------------------------------------------------


def bench(fn: Callable[[int], None], sets: int, graph: bool = True) -> float:
    """Median ms of one fn(i), i cycling over the input sets.

    With ``graph`` (our kernels, which are capturable), one CUDA graph runs every set once
    and its replays are timed, so host launch overhead (Python validation, Triton's
    launcher: tens of microseconds, more on a slow host) is not counted; SGLang replays
    decode in CUDA graphs too. Falls back to eager timing if capture fails.
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
            return triton.testing.do_bench(g.replay, warmup=25, rep=150, return_mode="median") / sets
        except Exception as err:  # noqa: BLE001  report and time eagerly
            log(f"    (graph capture failed: {type(err).__name__}: {err}; timing eagerly)")
    state = {"i": 0}

    def call():
        fn(state["i"] % sets)
        state["i"] += 1

    return triton.testing.do_bench(call, warmup=25, rep=150, return_mode="median")


def n_sets(bytes_per_set: int, target: int = 512 << 20, cap: int = 8) -> int:
    return max(2, min(cap, triton.cdiv(target, max(bytes_per_set, 1))))


def measure_copy_bandwidth(dev) -> float:
    src = torch.randn(1 << 29, device=dev, dtype=torch.float32)  # 2 GiB
    dst = torch.empty_like(src)
    ms = triton.testing.do_bench(lambda: dst.copy_(src), warmup=25, rep=200, return_mode="median")
    return 2 * src.numel() * 4 / (ms * 1e-3) / 1e9


def row(kind: str, shape: str, nbytes: float, ms: float, copy_gbs: float, torch_ms: Optional[float],
        flops: float = 0.0) -> Dict[str, object]:
    gbs = nbytes / (ms * 1e-3) / 1e9
    return dict(kernel=kind, shape=shape, bytes=nbytes, ms=ms, gbs=gbs, pct_copy=100 * gbs / copy_gbs,
                torch_ms=torch_ms, speedup=(torch_ms / ms) if torch_ms else None,
                tflops=flops / (ms * 1e-3) / 1e12 if flops else None)


def time_logits(dev, copy_gbs, cfg: Optional[dispatch.LogitsConfig], rows, lens, max_len, label,
                shared=False, with_torch=True) -> Dict[str, object]:
    sets = []
    per_set = (sum(lens) * 256) if not shared else max_len * 256
    nset = n_sets(per_set)
    for _ in range(nset):
        c = make_logits_case(rows, lens, max_len, dev, shared_table=shared)
        del c["k_exact"], c["q_exact"]
        c["out"] = torch.empty(rows, max_len, device=dev)
        sets.append(c)
    ms = bench(lambda i: dispatch.paged_mqa_logits_bf16(
        sets[i]["q"], sets[i]["cache"], sets[i]["w"], sets[i]["seq"], sets[i]["page_table"], max_len,
        out=sets[i]["out"], config=cfg), nset)
    torch_ms = None
    if with_torch:
        torch_ms = bench(lambda i: R.paged_mqa_logits_torch(
            sets[i]["q"], sets[i]["cache"], sets[i]["w"], sets[i]["seq"], sets[i]["page_table"], max_len), nset,
            graph=False)
    heads = 64
    k_bytes = per_set
    other = rows * heads * 128 * 2 + rows * heads * 4 + sum(triton.cdiv(n, 64) for n in lens) * 4 + rows * max_len * 4
    flops = 2.0 * heads * 128 * sum(lens)
    del sets
    torch.cuda.empty_cache()
    return row("logits", label, k_bytes + other, ms, copy_gbs, torch_ms, flops)


def store_ablated(kv, w, eps, freqs, pos, loc, cache, *, cfg: dispatch.StoreConfig, with_hadamard: bool,
                  with_rope_table: bool) -> None:
    """The store kernel with a stage left out (wrong output): how much that stage costs."""
    table = as_rope_table(freqs)
    pages = as_index_k_pages("index_k_cache", cache)
    grid = (max(1, min(triton.cdiv(kv.shape[0], cfg.block_m), cfg.programs_per_sm * dispatch.num_sms(kv.device))),)
    index_k_store.index_k_norm_rope_hadamard_store_kernel[grid](
        kv, kv.stride(0), w, table, table.stride(0), pos, loc, pages, pages.stride(0), kv.shape[0], float(eps),
        D=128, ROPE_DIM=64, PAGE=64, BLOCK_M=cfg.block_m, PREFETCH=cfg.prefetch,
        WITH_HADAMARD=with_hadamard, WITH_ROPE_TABLE=with_rope_table,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )


def time_store(dev, copy_gbs, n: int, cfg=None, with_torch=True, with_scatter=True,
               label: Optional[str] = None, launch: Optional[Callable[..., None]] = None,
               distinct_positions: bool = False) -> List[Dict[str, object]]:
    pages = triton.cdiv(n, 64) + 16
    per_set = n * (256 + 256 + 256 + 16)  # kv in, rope row in, bf16 row out, pos + slot
    nset = n_sets(per_set, cap=4)
    # distinct_positions: every row reads its own RoPE row (consecutive positions, as a long
    # prefill does), so the table comes from DRAM rather than L2 (the default draws 1M rows
    # from a 64K-position table that the 50 MB L2 mostly holds).
    freqs = random_freqs(dev, n * nset) if distinct_positions else random_freqs(dev)
    sets = []
    for i in range(nset):
        sets.append(dict(
            kv=torch.randn(n, 128, device=dev).to(torch.bfloat16),
            pos=(torch.arange(i * n, (i + 1) * n, device=dev) if distinct_positions
                 else torch.randint(0, ROPE_POSITIONS, (n,), device=dev)),
            loc=torch.randperm(pages * 64, device=dev)[:n],
            cache=torch.empty(pages, 64 * 256, dtype=torch.uint8, device=dev),
        ))
    w = torch.rand(128, device=dev) + 0.5
    if launch is None:
        def launch(kv, w, eps, freqs, pos, loc, cache):
            dispatch.store_index_k_bf16(kv, w, eps, freqs, pos, loc, cache, config=cfg)
    ms = bench(lambda i: launch(sets[i]["kv"], w, 1e-6, freqs, sets[i]["pos"], sets[i]["loc"], sets[i]["cache"]), nset)
    torch_ms = None
    if with_torch:
        h = R.hadamard_matrix(128, torch.float32, dev)
        torch_ms = bench(lambda i: R.store_index_k_torch(sets[i]["kv"], w, 1e-6, freqs, sets[i]["pos"], sets[i]["loc"],
                                                         sets[i]["cache"], h), nset, graph=False)
    out = [row("store", label or f"N={n}", per_set, ms, copy_gbs, torch_ms)]  # butterfly Hadamard: no matrix FLOPs
    if with_scatter:
        rows_bf16 = [torch.randn(n, 128, device=dev).to(torch.bfloat16) for _ in range(nset)]
        ms_scatter = bench(lambda i: dispatch.scatter_index_k_bf16(rows_bf16[i], sets[i]["loc"], sets[i]["cache"]), nset)
        torch_scatter = bench(lambda i: R.scatter_reference(sets[i]["cache"], rows_bf16[i], sets[i]["loc"]), nset,
                              graph=False) if with_torch else None
        out.append(row("scatter", f"N={n}", n * (256 + 256 + 8), ms_scatter, copy_gbs, torch_scatter))
        del rows_bf16
    del sets
    torch.cuda.empty_cache()
    return out


def time_q(dev, copy_gbs, n: int, cfg=None, with_torch=True, label: Optional[str] = None) -> Dict[str, object]:
    freqs = random_freqs(dev)
    per_set = n * 64 * (256 + 256 + 2 + 4) + n * (256 + 8)  # q in/out, weights in/out, rope row + pos
    nset = n_sets(per_set, cap=4)
    sets = [dict(q=torch.randn(n, 64 * 128, device=dev).to(torch.bfloat16),
                 w=torch.randn(n, 64, device=dev).to(torch.bfloat16),
                 pos=torch.randint(0, ROPE_POSITIONS, (n,), device=dev)) for _ in range(nset)]
    ms = bench(lambda i: dispatch.index_q_bf16(sets[i]["q"], sets[i]["w"], 0.01, freqs, sets[i]["pos"], config=cfg), nset)
    torch_ms = None
    if with_torch:
        h = R.hadamard_matrix(128, torch.float32, dev)
        torch_ms = bench(lambda i: R.index_q_torch(sets[i]["q"], sets[i]["w"], 0.01, freqs, sets[i]["pos"], hadamard=h), nset,
                         graph=False)
    del sets
    torch.cuda.empty_cache()
    return row("index_q", label or f"N={n}", per_set, ms, copy_gbs, torch_ms)


def format_rows(rows: List[Dict[str, object]]) -> str:
    head = f"{'kernel':10s} {'shape':34s} {'MB moved':>9s} {'ms':>8s} {'GB/s':>7s} {'%copy':>6s} {'TFLOP/s':>8s} {'torch ms':>9s} {'speedup':>8s}"
    lines = [head, "-" * len(head)]
    for r in rows:
        tf = f"{r['tflops']:8.1f}" if r.get("tflops") else f"{'':8s}"
        tm = f"{r['torch_ms']:9.3f}" if r.get("torch_ms") else f"{'-':>9s}"
        sp = f"{r['speedup']:7.1f}x" if r.get("speedup") else f"{'-':>8s}"
        lines.append(f"{r['kernel']:10s} {r['shape']:34s} {r['bytes'] / 1e6:9.1f} {r['ms']:8.4f} {r['gbs']:7.0f} "
                     f"{r['pct_copy']:6.1f} {tf} {tm} {sp}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernels_sm120.bench_kernels", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.environ.get("OUT", "bench_out"), help="folder for bench_kernels.json (default: $OUT)")
    parser.add_argument("--skip-sweep", action="store_true", help="skip the tiling sweep")
    parser.add_argument("--sweep", default="logits,store,q",
                        help="comma-separated sweeps to run: logits, store (incl. stage ablations), q "
                             "(default: all three)")
    parser.add_argument("--skip-torch", action="store_true", help="skip the torch baselines (no speedup column)")
    args = parser.parse_args(argv)
    sweeps = {x.strip() for x in args.sweep.split(",") if x.strip()}
    if not sweeps <= {"logits", "store", "q"}:
        parser.error(f"--sweep takes a comma-separated subset of logits,store,q, got {args.sweep!r}")
    if not torch.cuda.is_available():
        print("bench_kernels needs a CUDA GPU", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    torch.manual_seed(1234)
    t0 = time.time()
    props = torch.cuda.get_device_properties(dev)
    own = dispatch.configs_for(dev)
    info = dict(device=props.name, capability=f"{props.major}.{props.minor}", sms=props.multi_processor_count,
                torch=torch.__version__, triton=triton.__version__, config=own.name)
    log(f"device {info}")
    copy_gbs = measure_copy_bandwidth(dev)
    log(f"device-to-device copy: {copy_gbs:.0f} GB/s (read + write)")
    results: Dict[str, object] = dict(info=info, copy_gbs=copy_gbs)

    log("(a) correctness vs float64 (outputs poisoned first)")
    corr = {}
    for name in dict.fromkeys([own.name, "sm120", "default"]):
        cfgs = dispatch.CONFIGS[name]
        corr[name] = {**check_store(cfgs, dev), **check_q(cfgs, dev), **check_logits(cfgs, dev)}
    results["correctness"] = corr
    log(f"  [{time.time() - t0:.0f}s]")

    log("(b) top-512 recall vs float64 logits")
    results["recall"] = recall_study(dev)
    log(f"  {results['recall']}  [{time.time() - t0:.0f}s]")

    log("(c) timing")
    timing: List[Dict[str, object]] = []
    logits_shapes = [
        ("decode 64 req x 32K keys", 64, [32768] * 64, 32768, False),
        ("decode 64 req x 4K keys", 64, [4096] * 64, 4096, False),
        ("decode 1 req x 32K keys", 1, [32768], 32768, False),
        ("decode 256 req x 8K keys", 256, [8192] * 256, 8192, False),
        ("prefill 2048 rows x <=8K shared", 2048, [int(x) for x in torch.linspace(4, 8192, 2048)], 8192, True),
    ]
    for label, rows_, lens, max_len, shared in logits_shapes:
        timing.append(time_logits(dev, copy_gbs, None, rows_, lens, max_len, label, shared,
                                  with_torch=not args.skip_torch))
        log(f"  {label}: {timing[-1]['ms']:.4f} ms  [{time.time() - t0:.0f}s]")
    for n in (4096, 65536, 1 << 20):
        timing.extend(time_store(dev, copy_gbs, n, with_torch=not args.skip_torch))
        log(f"  store N={n}: {timing[-2]['ms']:.4f} ms  [{time.time() - t0:.0f}s]")
    timing.extend(time_store(dev, copy_gbs, 1 << 20, with_torch=False, with_scatter=False,
                             label="N=1M distinct pos", distinct_positions=True))
    log(f"  store N=1M distinct positions: {timing[-1]['ms']:.4f} ms  [{time.time() - t0:.0f}s]")
    for n in (64, 4096, 32768):
        timing.append(time_q(dev, copy_gbs, n, with_torch=not args.skip_torch))
        log(f"  q N={n}: {timing[-1]['ms']:.4f} ms  [{time.time() - t0:.0f}s]")
    results["timing"] = timing

    sweep = []
    if args.skip_sweep:
        sweeps = set()
    if "logits" in sweeps:
        log("tiling sweep: logits")
        for bn, chunk, warps, stages in [(128, 2048, 4, 3), (128, 1024, 4, 3), (64, 1024, 4, 3), (128, 4096, 4, 3)]:
            cfg = dispatch.LogitsConfig(block_n=bn, max_chunk=chunk, num_warps=warps, num_stages=stages)
            sweep.append(time_logits(dev, copy_gbs, cfg, 64, [32768] * 64, 32768,
                                     f"64x32K bn{bn} chunk{chunk} w{warps} s{stages}", with_torch=False))
            log(f"  {sweep[-1]['shape']}: {sweep[-1]['ms']:.4f} ms  [{time.time() - t0:.0f}s]")
        for bn, chunk in [(128, 2048), (128, 512), (64, 512)]:
            cfg = dispatch.LogitsConfig(block_n=bn, max_chunk=chunk, num_warps=4, num_stages=3)
            sweep.append(time_logits(dev, copy_gbs, cfg, 64, [4096] * 64, 4096, f"64x4K bn{bn} chunk{chunk} w4 s3",
                                     with_torch=False))
            log(f"  {sweep[-1]['shape']}: {sweep[-1]['ms']:.4f} ms  [{time.time() - t0:.0f}s]")
    # (block_m, num_warps, programs per SM, prefetch); the first is the H200 default, timed
    # twice (first and last) for the repeat spread.
    tile_variants = [(16, 2, 8, True), (16, 2, 16, True), (16, 2, 8, False), (16, 2, 64, False), (32, 4, 4, True),
                     (32, 2, 8, False), (64, 4, 4, False), (16, 1, 16, True), (16, 2, 8, True)]
    if "store" in sweeps:
        log("tiling sweep: store")
        for bm, warps, per_sm, prefetch in tile_variants:
            cfg = dispatch.StoreConfig(block_m=bm, num_warps=warps, programs_per_sm=per_sm, prefetch=prefetch)
            sweep.extend(time_store(dev, copy_gbs, 1 << 20, cfg, with_torch=False, with_scatter=False,
                                    label=f"1M bm{bm} w{warps} {per_sm}/SM pf{int(prefetch)}"))
            log(f"  {sweep[-1]['shape']}: {sweep[-1]['ms']:.4f} ms  [{time.time() - t0:.0f}s]")
        own_store = own.store
        for with_h, with_rope, what in [(False, True, "no Hadamard"), (False, False, "no Hadamard, no RoPE row")]:
            launch = functools.partial(store_ablated, cfg=own_store, with_hadamard=with_h, with_rope_table=with_rope)
            sweep.extend(time_store(dev, copy_gbs, 1 << 20, with_torch=False, with_scatter=False,
                                    label=f"1M default, ablation: {what}", launch=launch))
            log(f"  {sweep[-1]['shape']}: {sweep[-1]['ms']:.4f} ms  [{time.time() - t0:.0f}s]")
    if "q" in sweeps:
        log("tiling sweep: q")
        for bm, warps, per_sm, prefetch in tile_variants:
            cfg = dispatch.QConfig(block_m=bm, num_warps=warps, programs_per_sm=per_sm, prefetch=prefetch)
            sweep.append(time_q(dev, copy_gbs, 32768, cfg, with_torch=False,
                                label=f"32K bm{bm} w{warps} {per_sm}/SM pf{int(prefetch)}"))
            log(f"  {sweep[-1]['shape']}: {sweep[-1]['ms']:.4f} ms  [{time.time() - t0:.0f}s]")
    results["sweep"] = sweep
    results["failures"] = FAILURES

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench_kernels.json"), "w") as f:
        json.dump(results, f, indent=1)

    log("")
    log(f"{info['device']} ({info['capability']}, {info['sms']} SMs), torch {info['torch']}, triton {info['triton']}, "
        f"config {own.name}; copy bandwidth {copy_gbs:.0f} GB/s")
    rc = results["recall"]
    log(f"top-{rc['k']} recall vs float64 ({rc['rows']} rows, <= {rc['max_len']} keys): bf16 {rc['recall_bf16']:.4f}, "
        f"fp8 q/k quant-dequant {rc['recall_fp8']:.4f}; logits rel err bf16 {rc['rel_err_bf16']:.2e}, fp8 {rc['rel_err_fp8']:.2e}")
    log(format_rows(timing))
    if sweep:
        log("sweep (logits at 64 req x 32K / 4K keys, store at 1M rows, q at 32K tokens):")
        log(format_rows(sweep))
    log(f"correctness failures: {len(FAILURES)}" + "".join(f"\n  {x}" for x in FAILURES))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
