"""Candidate tilings of our fp8 and bf16 logits kernels, ours only (no SGLang, no TileLang): one GPU call.

    PYTHONUNBUFFERED=1 python -m benchmarks.kernels_fp8_tilings --out $OUT      # repository root

Each candidate (``candidates()``) is first checked on the GPU against the float64 reference of the
same inputs (output poisoned with NaN: every written column must match, none past a row's length may
change), then timed at the shapes of its group on the rotated input sets of ``benchmarks.kernels_fp8``
(CUDA-graph medians). The Triton compiles run first in parallel worker processes (one per
candidate and row-count specialisation), which fill Triton's on-disk cache for the timing process.
TileLang's and the read-only gather's times are not measured here: the comparison uses those of the
previous calls on the same card and input generator (kernels_sm120/NOTES.md, "fp8 logits"), which
repeated within 0.5% between calls. Results: ``<out>/kernels_fp8_tilings.json``, written after every
point (a call cut short keeps what it measured).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

WIDE = 262144

# (rows, keys per row): few rows (the few-row tilings) and decode shapes of >= 64 MB of fp8 keys
FEW_SHAPES = ((1, 2048), (1, 8192), (1, 65536), (8, 8192), (8, 32768), (8, 65536))
DECODE_SHAPES = ((64, 2048), (64, 4096), (64, 8192), (128, 4096), (128, 16384), (64, 65536), (128, 65536))
# the shapes where bf16 was over 1.10x TileLang fp8 (64 x 2K, 64 x 4K) and three larger ones where a new
# decode tiling must not lose (64-key tilings were 5-9% slower from 268 MB in earlier sweeps)
BF16_DECODE_SHAPES = ((64, 2048), (64, 4096), (64, 8192), (128, 16384), (128, 65536))
# Two to eight rows, uniform and with one long row beside short ones (a tiling that fixes each row's parts on
# the host leaves the long row 1 / rows of the programs): the bf16 few-row candidates (--few-mixed)
FEW_MIXED_LENS = (
    ("2 x 8K", [8192] * 2),
    ("4 x 8K", [8192] * 4),
    ("4 x 32K", [32768] * 4),
    ("8 x 8K", [8192] * 8),
    ("2 mixed: 1 x 64K + 1 x 2K", [65536, 2048]),
    ("4 mixed: 1 x 64K + 3 x 2K", [65536] + [2048] * 3),
    ("8 mixed: 1 x 64K + 7 x 2K", [65536] + [2048] * 7),
    ("8 mixed: 2 x 32K + 6 x 4K", [32768] * 2 + [4096] * 6),
)
FEW_MIXED_CANDIDATES = (
    "bf16 few: grid bn64 s4 pps2 min64 busy2",
    "bf16 few: interleaved s2 pps4 (2-8 rows until page ids two ahead)",
    "bf16 few: interleaved s2 pps4, page ids two ahead (default, 1-8 rows)",
    "fp8 few: grid + scales ahead",
    "fp8 few: interleaved s3 pps4 (default)",
)


def candidates() -> dict[str, tuple[str, str, object]]:
    """name -> (group, key type, LogitsConfig). Groups: few (FEW_SHAPES), decode (DECODE_SHAPES), bf16
    decode (BF16_DECODE_SHAPES)."""
    from kernels_sm120 import dispatch

    L = dispatch.LogitsConfig
    # the tilings before this sweep (dispatch's sm90 defaults until then), spelled out
    few8 = L(64, 4, 3, programs_per_sm=4, max_chunk=8192, min_chunk=64, page_block=64, busy_per_sm=4, fp8_mma=True)
    dec8 = L(64, 4, 4, min_chunk=128, page_block=64, busy_per_sm=4, item_grid=True, fp8_mma=True)
    few16 = L(64, 4, 4, programs_per_sm=2, max_chunk=8192, min_chunk=64, page_block=64, busy_per_sm=2)
    fp8_dec = _replace(dec8, num_stages=3, scales_ahead=True)  # the sm90 fp8 decode tiling before page tiles
    fp8_few = L(64, 4, 3, programs_per_sm=4, interleaved=True, fp8_mma=True)  # fp8: one to eight rows
    bf16_few = L(64, 4, 2, programs_per_sm=4, interleaved=True)  # bf16: two to eight rows until ids two ahead
    bf16_one = L(64, 4, 4, programs_per_sm=2, interleaved=True)  # bf16: one row until ids two ahead
    dec16 = L(128, 4, 3, programs_per_sm=2, max_chunk=8192, min_chunk=256, page_block=64, busy_per_sm=2, item_grid=True)
    bf16_page_tiles = _replace(dec16, block_n=64, busy_per_sm=3, min_chunk=128, page_block=0)
    return {
        # fp8, few rows
        "fp8 few: grid + scales ahead": ("few", "fp8", _replace(few8, scales_ahead=True)),
        "fp8 few: interleaved s3 pps4 (default)": ("few", "fp8", fp8_few),
        "fp8 few: interleaved s3 pps4, direct store": ("few", "fp8", _replace(fp8_few, direct_store=True)),
        "fp8 few: interleaved s3 pps4, page ids two ahead": ("few", "fp8", _replace(fp8_few, ids_ahead=2)),
        "fp8 few: interleaved s3 pps4, ids three ahead": ("few", "fp8", _replace(fp8_few, ids_ahead=3)),
        "fp8 few: interleaved s2 pps4, page ids two ahead": (
            "few",
            "fp8",
            _replace(fp8_few, num_stages=2, ids_ahead=2),
        ),
        "fp8 few: interleaved s2 pps4": ("few", "fp8", L(64, 4, 2, programs_per_sm=4, interleaved=True, fp8_mma=True)),
        "fp8 few: interleaved s3 pps2": ("few", "fp8", L(64, 4, 3, programs_per_sm=2, interleaved=True, fp8_mma=True)),
        # bf16, few rows
        "bf16 few: grid bn64 s4 pps2 min64 busy2": ("few", "bf16", few16),
        "bf16 few: interleaved s2 pps4, direct store": (
            "few",
            "bf16",
            _replace(bf16_few, direct_store=True),
        ),
        "bf16 few: interleaved s4 pps2, direct store": (
            "few",
            "bf16",
            _replace(bf16_one, direct_store=True),
        ),
        "bf16 few: interleaved s3 pps4": ("few", "bf16", L(64, 4, 3, programs_per_sm=4, interleaved=True)),
        "bf16 few: interleaved s4 pps2, page ids two ahead": (
            "few",
            "bf16",
            _replace(bf16_one, ids_ahead=2),
        ),
        "bf16 few: interleaved s2 pps4, page ids two ahead (default, 1-8 rows)": (
            "few",
            "bf16",
            _replace(bf16_few, ids_ahead=2),
        ),
        "bf16 few: interleaved s4 pps2 (one row until page ids two ahead)": ("few", "bf16", bf16_one),
        "bf16 few: interleaved s2 pps4 (2-8 rows until page ids two ahead)": ("few", "bf16", bf16_few),
        "bf16 few: interleaved s3 pps2": ("few", "bf16", L(64, 4, 3, programs_per_sm=2, interleaved=True)),
        "bf16 few: interleaved s2 pps2": ("few", "bf16", L(64, 4, 2, programs_per_sm=2, interleaved=True)),
        "bf16 few: interleaved s4 pps1": ("few", "bf16", L(64, 4, 4, programs_per_sm=1, interleaved=True)),
        # fp8, decode (item grid): the default (scales ahead, three stages, four busy programs per SM, page ids
        # 64 at a time). More stages or busy programs per SM, page ids 256 at a time and 128-key tiles were all
        # slower or level on the H100 (NOTES.md). Here: one page per tile, its id and scales one tile ahead
        # (page_block 0: two barriers per tile in the sm_90a SASS against six), and the interleaved one-row
        # tiling at these shapes for reference (the same loop; its parts are fixed per row on the host)
        "fp8 decode: items bn64 s3 busy4 min128 scales ahead, page ids 64 at a time": ("decode", "fp8", fp8_dec),
        "fp8 decode: page tiles s3 (default)": ("decode", "fp8", _replace(fp8_dec, page_block=0)),
        "fp8 decode: page tiles s3, direct store": (
            "decode",
            "fp8",
            _replace(fp8_dec, page_block=0, direct_store=True),
        ),
        "fp8 decode: page tiles s4": ("decode", "fp8", _replace(fp8_dec, page_block=0, num_stages=4)),
        "fp8 decode: page tiles s3, ids three ahead": ("decode", "fp8", _replace(fp8_dec, page_block=0, ids_ahead=3)),
        "fp8 decode: page tiles s4, ids three ahead": (
            "decode",
            "fp8",
            _replace(fp8_dec, page_block=0, num_stages=4, ids_ahead=3),
        ),
        "fp8 decode: page tiles s3, page ids two ahead": (
            "decode",
            "fp8",
            _replace(fp8_dec, page_block=0, ids_ahead=2),
        ),
        "fp8 decode: page tiles s4, page ids two ahead": (
            "decode",
            "fp8",
            _replace(fp8_dec, page_block=0, num_stages=4, ids_ahead=2),
        ),
        "fp8 decode: page tiles s3 busy3, page ids two ahead": (
            "decode",
            "fp8",
            _replace(fp8_dec, page_block=0, busy_per_sm=3, ids_ahead=2),
        ),
        "fp8 decode: page tiles s3 busy6": ("decode", "fp8", _replace(fp8_dec, page_block=0, busy_per_sm=6)),
        "fp8 decode: page tiles s3 busy3": ("decode", "fp8", _replace(fp8_dec, page_block=0, busy_per_sm=3)),
        "fp8 decode: interleaved s3 pps4": ("decode", "fp8", fp8_few),
        "fp8 decode: interleaved s3 pps4, direct store": ("decode", "fp8", _replace(fp8_few, direct_store=True)),
        "fp8 decode: interleaved s3 pps4, page ids two ahead": ("decode", "fp8", _replace(fp8_few, ids_ahead=2)),
        # bf16, decode
        "bf16 decode: items bn128 s3 busy2 min256 (default)": ("bf16 decode", "bf16", dec16),
        "bf16 decode: items bn128 s3 busy2 min256 (default), direct store": (
            "bf16 decode",
            "bf16",
            _replace(dec16, direct_store=True),
        ),
        "bf16 decode: pb256": ("bf16 decode", "bf16", _replace(dec16, page_block=256)),
        # one page per tile with scalar page ids (fp8's decode tiling, ``_page_tiles``): 16 KiB key tiles, so three
        # stages fit three programs per SM, two stages four
        "bf16 decode: page tiles s3 busy3": ("bf16 decode", "bf16", bf16_page_tiles),
        "bf16 decode: page tiles s3 busy3, page ids two ahead": (
            "bf16 decode",
            "bf16",
            _replace(bf16_page_tiles, ids_ahead=2),
        ),
        "bf16 decode: page tiles s2 busy4, page ids two ahead": (
            "bf16 decode",
            "bf16",
            _replace(bf16_page_tiles, num_stages=2, busy_per_sm=4, ids_ahead=2),
        ),
        "bf16 decode: page tiles s4 busy2, page ids two ahead": (
            "bf16 decode",
            "bf16",
            _replace(bf16_page_tiles, num_stages=4, busy_per_sm=2, ids_ahead=2),
        ),
        "bf16 decode: interleaved s2 pps4, page ids two ahead": (
            "bf16 decode",
            "bf16",
            _replace(bf16_few, ids_ahead=2),
        ),
        "bf16 decode: bn64 s4 busy4 pb256": (
            "bf16 decode",
            "bf16",
            _replace(dec16, block_n=64, num_stages=4, busy_per_sm=4, min_chunk=128, page_block=256),
        ),
    }


def _replace(cfg, **kw):
    import dataclasses

    return dataclasses.replace(cfg, **kw)


def shapes_of(group: str):
    return {"few": FEW_SHAPES, "decode": DECODE_SHAPES, "bf16 decode": BF16_DECODE_SHAPES}[group]


def log(msg: str) -> None:
    print(msg, flush=True)


def _inputs(torch, kind: str, rows: int, lens: list[int], dev):
    from benchmarks import kernels_fp8

    if kind == "fp8":
        return kernels_fp8.fp8_set(torch, rows, lens, WIDE // 64, dev)
    b = kernels_fp8.bf16_set(torch, rows, lens, WIDE, dev)
    return dict(q=b["q"], kv=b["cache"], w=b["w"], seq=b["seq"], table=b["page_table"], out=b["out"])


def _call(kind: str, s, cfg, out=None) -> None:
    from kernels_sm120 import dispatch

    fn = dispatch.paged_mqa_logits_fp8 if kind == "fp8" else dispatch.paged_mqa_logits_bf16
    fn(s["q"], s["kv"], s["w"], s["seq"], s["table"], WIDE, out=s["out"] if out is None else out, config=cfg)


def _check_lens(group: str, rows: int) -> list[int]:
    import random

    rng = random.Random(rows)
    if group == "few":
        return [0, 1, 63, 64, 65, 2049, 5000, 9000][:rows] if rows > 1 else [4097]
    return [rng.randrange(0, 4097) for _ in range(rows)]


def _representative(rows: int) -> int:
    """A row count with the same Triton specialisation (== 1, multiple of 16, other) among the shapes."""
    return 1 if rows == 1 else 64 if rows % 16 == 0 else rows


def _warm(task) -> str:
    """Worker: compile one candidate for one row count (a call on inputs of that shape)."""
    name, rows = task
    import torch

    group, kind, cfg = candidates()[name]
    dev = torch.device("cuda")
    s = _inputs(torch, kind, rows, _check_lens(group, rows), dev)
    _call(kind, s, cfg)
    torch.cuda.synchronize()
    return f"{name} rows {rows}"


def check(name: str, rows: int, dev) -> dict[str, object]:
    import torch

    from kernels_sm120 import reference as R

    group, kind, cfg = candidates()[name]
    lens = _check_lens(group, rows)
    s = _inputs(torch, kind, rows, lens, dev)
    out = torch.full((rows, WIDE), float("nan"), device=dev)
    _call(kind, s, cfg, out=out)
    torch.cuda.synchronize()
    if kind == "fp8":
        ref = R.fp8_paged_mqa_logits_reference(s["q"], s["kv"], s["w"], s["seq"], s["table"], WIDE)
    else:
        ref = R.paged_mqa_logits_reference(s["q"], s["kv"].view(-1, 128), s["w"], s["seq"], s["table"], WIDE)
    mask = torch.arange(WIDE, device=dev)[None, :] < s["seq"].long()[:, None]
    d = (out.double() - ref)[mask].abs()
    rel = float(d.max() / ref[mask].abs().max()) if d.numel() else 0.0
    untouched = bool(torch.isnan(out[~mask]).all())
    # fp8 tensor cores: Hopper's wgmma keeps fewer accumulator bits (TileLang 2.4e-4 on the same data, NOTES.md)
    tol = 1e-3 if kind == "fp8" and cfg.fp8_mma else 1e-5
    ok = untouched and rel < tol and not torch.isnan(out[mask]).any()
    return dict(candidate=name, rows=rows, max_rel_vs_f64=rel, unwritten_untouched=untouched, ok=bool(ok))


def time_point(name: str, rows: int, keys: int, dev, lens: list[int] | None = None) -> float:
    import torch

    from benchmarks.timing import bench, n_sets

    group, kind, cfg = candidates()[name]
    lens = lens or [keys] * rows
    nbytes = sum(lens) * (132 if kind == "fp8" else 256)
    nset = n_sets(nbytes, cap=8)
    sets = [_inputs(torch, kind, rows, lens, dev) for _ in range(nset)]
    ms = bench(lambda i: _call(kind, sets[i], cfg), nset, rep=100)
    sets.clear()
    torch.cuda.empty_cache()
    return ms


def few_mixed(dev, out_dir: Path, t0: float) -> int:
    """FEW_MIXED_CANDIDATES checked (float64, 8 rows) then timed at FEW_MIXED_LENS."""
    result: dict[str, object] = dict(checks=[check(n, r, dev) for n in FEW_MIXED_CANDIDATES for r in (2, 4, 8)])
    log(f"checks: {sum(c['ok'] for c in result['checks'])}/{len(result['checks'])} ok  [{time.time() - t0:.0f}s]")
    result["points"] = []
    for label, lens in FEW_MIXED_LENS:
        for name in FEW_MIXED_CANDIDATES:
            us = time_point(name, len(lens), max(lens), dev, lens=lens) * 1e3
            result["points"].append(dict(candidate=name, shape=label, us=us))
            log(f"  {label}  {name}: {us:.2f} us  [{time.time() - t0:.0f}s]")
        (out_dir / "kernels_fp8_few_mixed.json").write_text(json.dumps(result, indent=1))
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.kernels_fp8_tilings", description=__doc__)
    p.add_argument("--out", default=os.environ.get("OUT", "bench_out"))
    p.add_argument("--workers", type=int, default=12)
    p.add_argument("--only", default="", help="comma-separated groups (few, decode, bf16 decode)")
    p.add_argument("--match", default="", help="comma-separated parts of candidate names: only those candidates")
    p.add_argument("--few-mixed", action="store_true", help="only FEW_MIXED_CANDIDATES at FEW_MIXED_LENS")
    args = p.parse_args(argv)
    if not args.few_mixed:
        try:
            args.groups, args.candidates = chosen(args.only, args.match)
        except ValueError as err:
            p.error(str(err))
    import torch

    if not torch.cuda.is_available():
        print("benchmarks.kernels_fp8_tilings needs a CUDA GPU", file=sys.stderr)
        return 2
    t0 = time.time()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.few_mixed:
        return few_mixed(torch.device("cuda"), out_dir, t0)
    return sweep(args, out_dir, t0)


def chosen(only: str, match: str) -> tuple[list[str], dict[str, tuple[str, str, object]]]:
    """The groups of ``--only`` (default: all) and their candidates whose names contain a part of ``match`` (default:
    all); ValueError naming the input and the allowed values where a group is unknown or nothing is left."""
    allowed = ["few", "decode", "bf16 decode"]
    groups = [g.strip() for g in only.split(",") if g.strip()] or allowed
    unknown = [g for g in groups if g not in allowed]
    if unknown:
        raise ValueError(f"--only: unknown group(s) {unknown}; allowed: {', '.join(allowed)}")
    parts = [m.strip() for m in match.split(",") if m.strip()]
    cands = {n: c for n, c in candidates().items() if c[0] in groups and (not parts or any(m in n for m in parts))}
    if not cands:
        names = ", ".join(n for n, c in candidates().items() if c[0] in groups)
        raise ValueError(
            f"--match {match!r}: no candidate of the groups {groups} has one of its parts; candidates: {names}"
        )
    return groups, cands


def sweep(args, out_dir: Path, t0: float) -> int:
    """Every candidate of the chosen groups: compiled in workers, checked against float64, timed."""
    import torch

    groups, cands = args.groups, args.candidates
    # one compile per candidate and row count (Triton specialises rows == 1 and multiples of 16)
    tasks = sorted({(n, _representative(r)) for n, (g, _k, _c) in cands.items() for r, _ in shapes_of(g)})
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(min(args.workers, len(tasks))) as pool:
        for done in pool.imap_unordered(_warm, tasks):
            log(f"  compiled {done}  [{time.time() - t0:.0f}s]")
    dev = torch.device("cuda")
    result: dict[str, object] = dict(device=torch.cuda.get_device_properties(dev).name, checks=[], points=[])

    def save():
        (out_dir / "kernels_fp8_tilings.json").write_text(json.dumps(result, indent=1))

    for name, (group, _kind, _cfg) in cands.items():
        for rows in sorted({r for r, _ in shapes_of(group)}):
            c = check(name, rows, dev)
            result["checks"].append(c)
            log(f"  check {name} rows {rows}: rel {c['max_rel_vs_f64']:.1e} untouched {c['unwritten_untouched']}")
    save()
    log(f"checks: {sum(c['ok'] for c in result['checks'])}/{len(result['checks'])} ok  [{time.time() - t0:.0f}s]")
    for group in groups:  # shape-major: every candidate of a group at one shape, then the next shape
        for rows, keys in shapes_of(group):
            for name, (g, _kind, _cfg) in cands.items():
                if g != group:
                    continue
                ms = time_point(name, rows, keys, dev)
                result["points"].append(dict(candidate=name, shape=f"{rows} x {keys // 1024}K", us=ms * 1e3))
                save()
                log(f"  {rows} x {keys // 1024}K  {name}: {ms * 1e3:.2f} us  [{time.time() - t0:.0f}s]")
    log(f"done [{time.time() - t0:.0f}s]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
