"""``sglang-dsv4 recall DIR``: is bf16 index-K worth its bytes on this traffic?

A capture directory holds ``*.pt`` files, each a dict with ``layer`` (int), ``q`` ``[R, H, 128]``,
``weights`` ``[R, H]`` and ``k`` ``[R, T, 128]`` (the index-K rows each query row read, in order),
``seq_lens`` ``[R]`` (valid rows of ``k`` per query row). For every format (bf16, SGLang's fp8 format:
per-row fp32 scale ``max(1e-4, amax)/448`` + e4m3, and fp4: e2m1 with one power-of-two scale per 32
values) q and k are rounded through the format, the indexer logits ``sum_h w_h relu(q_h . k_t)``
recomputed, and the top-k set compared with the float64 logits' top-k, for k = 512 and the model's
configured ``index_topk``. Rows with no more than k valid keys are skipped (SGLang takes them all).
Output: a table per layer and format, and ``--json`` for machines.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Dict, List

import torch

FORMATS = ("bf16", "fp8", "fp4")
_E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)


def fp4_round_trip(x: torch.Tensor) -> torch.Tensor:
    """e2m1 values with one power-of-two (ue8m0) scale per 32 values, rounded to nearest, back to float64."""
    g = x.to(torch.float64).reshape(*x.shape[:-1], -1, 32)
    amax = g.abs().amax(-1, keepdim=True).clamp(min=2.0**-126)
    scale = torch.exp2(torch.ceil(torch.log2(amax / 6.0)))
    mag = (g.abs() / scale).clamp(max=6.0)
    nearest = _E2M1[(mag.unsqueeze(-1) - _E2M1).abs().argmin(-1)]
    return (torch.sign(g) * nearest * scale).reshape(x.shape)


def round_trip(fmt: str, x: torch.Tensor) -> torch.Tensor:
    if fmt == "bf16":
        return x.to(torch.bfloat16).to(torch.float64)
    if fmt == "fp8":
        from kernels_sm120.reference import fp8_quant_dequant_rows

        return fp8_quant_dequant_rows(x).to(torch.float64)
    if fmt == "fp4":
        return fp4_round_trip(x)
    raise ValueError(f"format {fmt!r} is not one of {FORMATS}")


def logits(q: torch.Tensor, weights: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``[R, T]`` float64: sum over heads of weight * relu(q . k)."""
    scores = torch.relu(torch.einsum("rhd,rtd->rth", q.to(torch.float64), k.to(torch.float64)))
    return (scores * weights.to(torch.float64).unsqueeze(1)).sum(-1)


def set_recall(got: torch.Tensor, ref: torch.Tensor, seq_lens: torch.Tensor, k: int):
    """Per query row with more than k valid keys: |topk(got) & topk(ref)| / k."""
    out = []
    for r in range(ref.shape[0]):
        n = int(seq_lens[r])
        if n <= k:
            continue
        a = set(got[r, :n].topk(k).indices.tolist())
        b = set(ref[r, :n].topk(k).indices.tolist())
        out.append(len(a & b) / k)
    return out


def analyse(directory: Path, ks: List[int]) -> Dict[str, object]:
    files = sorted(directory.glob("*.pt"))
    if not files:
        raise FileNotFoundError(f"{directory}: no capture files (*.pt)")
    acc: Dict[tuple, List[float]] = {}
    for path in files:
        rec = torch.load(path, map_location="cpu", weights_only=True)
        ref = logits(rec["q"], rec["weights"], rec["k"])
        for fmt in FORMATS:
            got = logits(round_trip(fmt, rec["q"]), rec["weights"], round_trip(fmt, rec["k"]))
            for k in ks:
                acc.setdefault((int(rec["layer"]), fmt, k), []).extend(set_recall(got, ref, rec["seq_lens"], k))
    rows = [{"layer": layer, "format": fmt, "k": k, "rows": len(v),
             "recall": (sum(v) / len(v)) if v else None, "min_recall": min(v) if v else None}
            for (layer, fmt, k), v in sorted(acc.items())]
    return {"directory": str(directory), "files": len(files), "rows": rows}


def format_table(result: Dict[str, object]) -> str:
    lines = [f"{'layer':>5} {'format':<6} {'k':>5} {'rows':>6} {'recall':>8} {'min':>8}"]
    for r in result["rows"]:
        rec = "n/a" if r["recall"] is None else f"{r['recall']:.4f}"
        mn = "n/a" if r["min_recall"] is None else f"{r['min_recall']:.4f}"
        lines.append(f"{r['layer']:>5} {r['format']:<6} {r['k']:>5} {r['rows']:>6} {rec:>8} {mn:>8}")
    return "\n".join(lines)


def configured_topk() -> int:
    """``index_topk`` of the bundled DeepSeek-V4-Flash config."""
    from importlib.resources import files

    config = json.loads(files("sglang_dsv4_ext.data").joinpath("deepseek-v4-flash-config.json").read_text())
    return int(config["index_topk"])


def run(args) -> int:
    directory = Path(args.directory)
    if not directory.is_dir():
        print(f"sglang-dsv4 recall: {directory} is not a directory", file=sys.stderr)
        return 2
    ks = sorted({512, configured_topk()})
    try:
        result = analyse(directory, ks)
    except (FileNotFoundError, KeyError, RuntimeError) as exc:
        print(f"sglang-dsv4 recall: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2) if args.json else format_table(result))
    return 0


def add_subparser(subparsers) -> None:
    p = subparsers.add_parser(
        "recall", help="top-k set recall of fp8, fp4 and bf16 index-K against float64, per layer",
        description=__doc__)
    p.add_argument("directory", help="capture directory (*.pt files, see above)")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.set_defaults(func=run)
