"""``sglang-dsv4 recall DIR``: is bf16 index-K worth its bytes on this traffic?

A capture directory holds ``*.pt`` files (in it or its subdirectories, e.g. the per-process
subdirectories ``SGLANG_DSV4_INDEX_K_CAPTURE=DIR`` writes, see :mod:`sglang_dsv4_ext.index_k_capture`),
each a dict with ``layer`` (int), ``q`` ``[R, H, 128]``, ``weights`` ``[R, H]``, ``k`` (the index-K
rows each query row read, in order: ``[R, T, 128]``, or ``[T, 128]`` shared by every row),
``seq_lens`` ``[R]`` (valid rows of ``k`` per query row), and optionally ``index_topk`` (the model's
top-k; files of format version 1 have none). For every format (bf16; fp8 and fp4 exactly as SGLang's
own kernels quantize index-K and index-Q, :mod:`sglang_dsv4_ext.recall.formats`) q and k are rounded
through the format, the indexer logits ``sum_h w_h relu(q_h . k_t)`` recomputed, and the top-k set
compared with the float64 logits' top-k, for k = 512 and the model's ``index_topk`` (from the file,
else the bundled DeepSeek-V4-Flash config). Rows with no more than k valid keys are skipped (SGLang
takes them all). Output: a table per layer and format, and ``--json`` for machines.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Dict, List

import torch

from sglang_dsv4_ext.errors import CaptureFileError
from sglang_dsv4_ext.recall import formats

FORMATS = ("bf16", "fp8", "fp4")
fp4_round_trip = formats.fp4_round_trip  # SGLang's fp4 index-K rule (see formats), float64 out


def round_trip(fmt: str, x: torch.Tensor) -> torch.Tensor:
    if fmt == "bf16":
        return x.to(torch.bfloat16).to(torch.float64)
    if fmt == "fp8":
        return formats.fp8_round_trip(x).to(torch.float64)
    if fmt == "fp4":
        return formats.fp4_round_trip(x)
    raise ValueError(f"format {fmt!r} is not one of {FORMATS}")


def logits(q: torch.Tensor, weights: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``[R, T]`` float64: sum over heads of weight * relu(q . k); ``k`` per row ``[R, T, D]`` or shared ``[T, D]``."""
    pattern = "rhd,td->rth" if k.dim() == 2 else "rhd,rtd->rth"
    scores = torch.relu(torch.einsum(pattern, q.to(torch.float64), k.to(torch.float64)))
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


CAPTURE_FIELDS = ("layer", "q", "weights", "k", "seq_lens")


def _add_file(acc: Dict[tuple, List[float]], path: Path, ks: List[int]) -> None:
    rec = torch.load(path, map_location="cpu", weights_only=True)
    missing = [f for f in CAPTURE_FIELDS if not isinstance(rec, dict) or f not in rec]
    if missing:
        raise CaptureFileError(f"{path}: not a capture file: lacks {', '.join(missing)} "
                               f"(a capture file holds {', '.join(CAPTURE_FIELDS)})")
    file_ks = sorted(set(ks) | ({int(rec["index_topk"])} if rec.get("index_topk") else set()))
    ref = logits(rec["q"], rec["weights"], rec["k"])
    for fmt in FORMATS:
        got = logits(round_trip(fmt, rec["q"]), rec["weights"], round_trip(fmt, rec["k"]))
        for k in file_ks:
            acc.setdefault((int(rec["layer"]), fmt, k), []).extend(set_recall(got, ref, rec["seq_lens"], k))


def analyse(directory: Path, ks: List[int]) -> Dict[str, object]:
    files = sorted(directory.rglob("*.pt"))
    if not files:
        raise FileNotFoundError(f"{directory}: no capture files (*.pt)")
    acc: Dict[tuple, List[float]] = {}
    for path in files:
        try:
            _add_file(acc, path, ks)
        except CaptureFileError:
            raise
        except Exception as exc:  # torch.load / pickle / shape errors: name the file, never a traceback
            raise CaptureFileError(f"{path}: not a readable capture file ({type(exc).__name__}: {exc})") from exc
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
    except (FileNotFoundError, CaptureFileError) as exc:
        print(f"sglang-dsv4 recall: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2) if args.json else format_table(result))
    return 0


def add_subparser(subparsers) -> None:
    p = subparsers.add_parser(
        "recall", help="top-k set recall of fp8, fp4 and bf16 index-K against float64, per layer",
        description=__doc__)
    p.add_argument("directory", help="capture directory (*.pt files in it or its subdirectories, see above)")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.set_defaults(func=run)
