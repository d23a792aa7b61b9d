"""Decode logits against the limit that holds at each shape (part of ``benchmarks/kernels.py``).

For every decode shape, on the same rotated input sets (so L2 cannot hold them), CUDA-graphed:
  * ``copy``: a device-to-device copy of the key bytes (the ceiling for moving that many bytes at
    that size, launch and ramp included; not measured above 512 MB, see ``timing.SAME_SIZE_COPY_MAX``,
    where the 2 GiB copy rate stands in);
  * ``gather``: the read-only gather of the same pages through the same page table
    (:mod:`benchmarks.page_gather`), every tiling of ``GATHER_TILINGS``, the fastest kept: the limit
    for any kernel that must read those keys;
  * ``ours``: the logits kernel with this GPU's default decode tiling.
Goal per shape: our rate >= 95% of the gather's, and >= 85% of the copy's wherever the
gather reaches 85% of it. Stock SGLang's times (:mod:`benchmarks.kernels_stock`) join the rows by
shape label.
"""

from __future__ import annotations

import torch

from benchmarks import page_gather
from benchmarks.logits_cases import WIDE, timing_logits_case
from benchmarks.timing import SAME_SIZE_COPY_MAX, bench, measure_copy_at, n_sets
from kernels_sm120 import dispatch

GATHER_GOAL = 95.0  # our rate as % of the gather's
COPY_GOAL = 85.0  # % of the same-size copy, where the gather reaches it


def _gather_times(sets, lens, max_len, dev, tilings) -> dict[str, float]:
    sms = dispatch.num_sms(dev)
    partial = torch.empty(max(page_gather.gather_programs(c, len(lens), max_len, sms) for c in tilings), device=dev)
    pages = [s["cache"].view(torch.bfloat16).view(s["cache"].shape[0], -1) for s in sets]
    out = {}
    for cfg in tilings:
        out[cfg.label] = bench(
            lambda i, cfg=cfg: page_gather.page_gather_sum(
                pages[i], sets[i]["seq"], sets[i]["page_table"], max_len, partial, cfg, sms
            ),
            len(sets),
        )
    return out


def time_decode(
    dev,
    ceil,
    label: str,
    rows: int,
    lens: list[int],
    goal: bool,
    cfg: dispatch.LogitsConfig | None = None,
    tilings=page_gather.GATHER_TILINGS,
    copy: bool = True,
) -> dict[str, object]:
    """One decode shape: ours (``cfg``: default tiling if None), every gather tiling, the copy."""
    key_bytes = sum(lens) * 256
    nset = n_sets(key_bytes + rows * 64 * 128 * 2, cap=8)
    sets = [timing_logits_case(rows, lens, WIDE, dev, shared=False) for _ in range(nset)]
    ours = bench(
        lambda i: dispatch.paged_mqa_logits_bf16(
            sets[i]["q"],
            sets[i]["cache"],
            sets[i]["w"],
            sets[i]["seq"],
            sets[i]["page_table"],
            WIDE,
            out=sets[i]["out"],
            config=cfg,
        ),
        nset,
    )
    gathers = _gather_times(sets, lens, WIDE, dev, tilings) if tilings else {}
    sets.clear()
    torch.cuda.empty_cache()
    copy_gbs = measure_copy_at(dev, key_bytes) if copy and key_bytes <= SAME_SIZE_COPY_MAX else None
    r: dict[str, object] = dict(
        kernel="logits",
        shape=label,
        rows=rows,
        keys=sum(lens),
        key_bytes=key_bytes,
        ms=ours,
        gather_ms_by_tiling=gathers,
        copy_ms=key_bytes / (copy_gbs * 1e9) * 1e3 if copy_gbs else None,
        copy_same_size=copy_gbs is not None,
    )
    ceiling_gbs = copy_gbs or ceil["copy_gbs"]  # above 512 MB: the 2 GiB copy
    r["pct_cp"] = 100 * key_bytes / (ours * 1e-3) / 1e9 / ceiling_gbs
    if gathers:
        best = min(gathers, key=gathers.get)
        r.update(gather_ms=gathers[best], gather_tiling=best)
        r["gather_pct_cp"] = 100 * key_bytes / (gathers[best] * 1e-3) / 1e9 / ceiling_gbs
        r["pct_gather"] = 100 * gathers[best] / ours
        if goal:
            r["goal"] = f">={GATHER_GOAL:.0f}% gather" + (
                f", >={COPY_GOAL:.0f}% copy" if r["gather_pct_cp"] >= COPY_GOAL else ""
            )
            r["met"] = r["pct_gather"] >= GATHER_GOAL and (r["gather_pct_cp"] < COPY_GOAL or r["pct_cp"] >= COPY_GOAL)
    return r


def join_stock(rows: list[dict[str, object]], stock: dict[str, object]) -> None:
    """Add stock SGLang's times and 'x stock' ratios (stock time / ours) to the decode rows."""
    by_shape = {r["shape"]: r for r in stock.get("rows", [])}
    for r in rows:
        s = by_shape.get(r["shape"])
        if not s:
            continue
        for name in ("sm120_torch", "torch", "tilelang"):
            if s.get(f"{name}_ms"):
                r[f"{name}_ms"] = s[f"{name}_ms"]
                r[f"x_{name}"] = s[f"{name}_ms"] / r["ms"]
            elif s.get(f"{name}_error"):
                r[f"{name}_error"] = s[f"{name}_error"]


def _us(r, key, width=8):
    v = r.get(key)
    return f"{v * 1e3:{width}.2f}" if v else f"{'-':>{width}s}"


def _pct(r, key, width=6, fmt=".1f"):
    v = r.get(key)
    return f"{v:{width}{fmt}}" if v is not None else f"{'-':>{width}s}"


def format_decode(rows: list[dict[str, object]]) -> str:
    head = (
        f"{'shape':38s} {'MB':>7s} {'copy us':>8s} {'gath us':>8s} {'ours us':>8s} {'g%cp@N':>6s} "
        f"{'%cp@N':>6s} {'%gath':>6s} {'sm120t us':>9s} {'x stock':>7s} {'torch us':>9s} {'x torch':>7s} "
        f"{'tl us':>8s} {'x tl':>6s}  goal"
    )
    lines = [head, "-" * (len(head) + 30)]
    for r in rows:
        goal = f"{r['goal']}: {'met' if r.get('met') else 'NOT met'}" if r.get("goal") else ""
        star = "" if r.get("copy_same_size") else "*"
        lines.append(
            f"{r['shape'] + star:38s} {r['key_bytes'] / 1e6:7.1f} {_us(r, 'copy_ms')} {_us(r, 'gather_ms')} "
            f"{_us(r, 'ms')} {_pct(r, 'gather_pct_cp')} {_pct(r, 'pct_cp')} {_pct(r, 'pct_gather')} "
            f"{_us(r, 'sm120_torch_ms', 9)} {_pct(r, 'x_sm120_torch', 7)} {_us(r, 'torch_ms', 9)} "
            f"{_pct(r, 'x_torch', 7)} {_us(r, 'tilelang_ms')} {_pct(r, 'x_tilelang', 6)}  {goal}"
        )
    lines.append(
        "MB: key bytes (rows x keys x 256 B); copy: graphed copy of those bytes; gath: fastest read-only "
        "gather of the same pages (benchmarks/page_gather.py); %cp@N: rate over the same-size copy (* above "
        "512 MB: over the 2 GiB copy); %gath: gather time / ours; sm120t / torch: SGLang's "
        "fp8_paged_mqa_logits_torch_sm120 / fp8_paged_mqa_logits_torch on stock fp8 index-K (132 B/key), "
        "page table and output as wide as the longest row; tl: SGLang's tilelang_fp8_paged_mqa_logits at "
        "the decode width; x: stock time / ours"
    )
    return "\n".join(lines)
