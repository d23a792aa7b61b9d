"""``sglang-dsv4 recall DIR``: is bf16 index-K worth its bytes on this traffic?

DIR holds capture files (``*.pt``, in it or its subdirectories, e.g. the per-process subdirectories
``SGLANG_DSV4_INDEX_K_CAPTURE=DIR`` writes; format: :mod:`sglang_dsv4_ext.runtime.index_k.capture_format`). For every
format (bf16; fp8 and fp4 exactly as SGLang's own kernels quantize index-K and index-Q,
:mod:`sglang_dsv4_ext.tools.recall.formats`) the indexer logits ``sum_h w_h relu(q_h . k_t)`` are recomputed
in float64 and their top-k set compared with the reference's, for k = 512 and the model's ``index_topk``
(from the file, else the bundled DeepSeek-V4-Flash config).

The reference: the keys as the bf16 store received them (``k_fp32``, fp32 before bf16 rounding) when
the file has them; bf16 is then scored against them like fp8 and fp4. A file without them (its keys were
stored before capture saw them) has the stored bf16 keys as reference: bf16 is reported as "the
reference", never as a recall of 1.0. Queries are the captured bf16 ones for every format.

Refused (exit 2, naming the file and the field): anything inconsistent (format version, checksum, dtype,
shapes, lengths, repeated query rows, slots, a layer that is no c4 layer of the capturing model, a copy of
another file; a file reached twice, through a symbolic or a hard link, is read once). Not scored, counted:
rows without keys or with NaN/inf/all-zero queries, weights or keys; rows with at most k keys (SGLang takes
them all); rows whose reference top-k is not unique (a tie at the k-th logit). Nothing scorable: the verdict says so,
exit 1. Output: a table per layer, format, k and reference, then what was not scored; ``--json`` for
machines.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import torch

from sglang_dsv4_ext.config import IndexKDtype
from sglang_dsv4_ext.errors import CaptureFileError
from sglang_dsv4_ext.tools import exit_codes
from sglang_dsv4_ext.tools.recall import capture_files, formats

FORMATS = (IndexKDtype.BF16, IndexKDtype.FP8, IndexKDtype.FP4)
REFERENCE_FP32 = "fp32"  # the file's k_fp32: the values the bf16 store rounded
REFERENCE_BF16 = "bf16"  # the stored bf16 keys (the file has no k_fp32)
fp4_round_trip = formats.fp4_round_trip  # SGLang's fp4 index-K rule (see formats), float64 out


def round_trip(fmt: str, x: torch.Tensor) -> torch.Tensor:
    if fmt == IndexKDtype.BF16:
        return x.to(torch.bfloat16).to(torch.float64)
    if fmt == IndexKDtype.FP8:
        return formats.fp8_round_trip(x).to(torch.float64)
    if fmt == IndexKDtype.FP4:
        return formats.fp4_round_trip(x)
    raise ValueError(f"format {fmt!r} is not one of {FORMATS}")


def logits(q: torch.Tensor, weights: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``[R, T]`` float64: sum over heads of weight * relu(q . k); ``k`` per row ``[R, T, D]`` or shared ``[T, D]``."""
    pattern = "rhd,td->rth" if k.dim() == 2 else "rhd,rtd->rth"
    scores = torch.relu(torch.einsum(pattern, q.to(torch.float64), k.to(torch.float64)))
    return (scores * weights.to(torch.float64).unsqueeze(1)).sum(-1)


# --- scoring ------------------------------------------------------------------------------------


@dataclass
class _Cell:
    """One (layer, k, reference): recall per format over the rows scored, and the rows not scored."""

    recalls: dict[str, list[float]] = field(default_factory=dict)
    at_most_k_keys: int = 0
    tied_at_k: int = 0


def _format_logits(capture: capture_files.Capture, rows: list[int]) -> dict[str, torch.Tensor]:
    """float64 logits ``[len(rows), T]`` of the reference and of each format scored against it."""
    q, weights = capture.q[rows], capture.weights[rows]

    def keys(t: torch.Tensor) -> torch.Tensor:
        return t if t.dim() == 2 else t[rows]

    reference_keys = keys(capture.k if capture.k_fp32 is None else capture.k_fp32)
    out = {"reference": logits(q, weights, reference_keys)}
    if capture.k_fp32 is not None:
        out[IndexKDtype.BF16] = logits(q, weights, keys(capture.k))  # what the pool held
    for fmt in (IndexKDtype.FP8, IndexKDtype.FP4):
        out[fmt] = logits(round_trip(fmt, q), weights, round_trip(fmt, reference_keys))
    return out


def _score_row(cell: _Cell, got: dict[str, torch.Tensor], i: int, n: int, k: int) -> bool:
    if n <= k:
        cell.at_most_k_keys += 1
        return False
    ref = got["reference"][i, :n]
    top = ref.topk(k + 1)
    if top.values[k - 1] == top.values[k]:
        cell.tied_at_k += 1  # the reference's top-k set is not unique: any score would be arbitrary
        return False
    want = set(top.indices[:k].tolist())
    for fmt in FORMATS:
        if fmt in got:
            picked = set(got[fmt][i, :n].topk(k).indices.tolist())
            cell.recalls.setdefault(fmt, []).append(len(picked & want) / k)
    return True


def score_capture(capture: capture_files.Capture, ks: list[int], cells: dict[tuple, _Cell]) -> tuple[Counter, int]:
    """Add one file's rows to ``cells``; returns its degenerate rows by reason (never scored) and how many of
    its query rows were scored (at some k)."""
    reasons = [capture_files.degenerate_reason(capture, r) for r in range(capture.q.shape[0])]
    degenerate = Counter(reason for reason in reasons if reason is not None)
    rows = [r for r, reason in enumerate(reasons) if reason is None]
    reference = REFERENCE_BF16 if capture.k_fp32 is None else REFERENCE_FP32
    file_ks = sorted(set(ks) | ({capture.index_topk} if capture.index_topk else set()))
    got = _format_logits(capture, rows) if rows else {}
    scored = set()
    for k in file_ks:
        cell = cells.setdefault((capture.layer, k, reference), _Cell())
        for i, r in enumerate(rows):
            if _score_row(cell, got, i, int(capture.seq_lens[r]), k):
                scored.add(r)
    return degenerate, len(scored)


class Degenerate(TypedDict):
    file: str
    rows: dict[str, int]  # why not scored -> rows


class NotScored(TypedDict):
    degenerate: list[Degenerate]
    by_layer: list[dict[str, Any]]  # _not_scored's rows


class RecallResult(TypedDict):
    """What :func:`analyse` returns (and ``--json`` prints)."""

    directory: str
    files: int
    files_by_reference: dict[str, int]
    rows: list[dict[str, Any]]  # _result_rows's rows
    not_scored: NotScored
    scored_rows: int
    layers_unchecked: int  # files that record no c4 layer ids of their model (older captures): layer not checked
    verdict: str


def analyse(directory: Path, ks: list[int]) -> RecallResult:
    paths = capture_files.find_files(directory)
    if not paths:
        raise FileNotFoundError(f"{directory}: no capture files (*.pt)")
    cells: dict[tuple, _Cell] = {}
    degenerate: list[Degenerate] = []
    references: Counter[str] = Counter()
    first_of: dict[str, Path] = {}
    scored = unchecked = 0
    for path in paths:
        capture = capture_files.load(path)
        if capture.checksum in first_of:
            raise CaptureFileError(
                f"{path}: checksum: same content as {first_of[capture.checksum]} (a copy; each capture is read once)"
            )
        first_of[capture.checksum] = path
        references[REFERENCE_BF16 if capture.k_fp32 is None else REFERENCE_FP32] += 1
        unchecked += capture.c4_layers is None
        counts, file_scored = score_capture(capture, ks, cells)
        scored += file_scored
        if counts:
            degenerate.append({"file": str(path), "rows": dict(sorted(counts.items()))})
    rows = _result_rows(cells)
    result: RecallResult = {
        "directory": str(directory),
        "files": len(paths),
        "files_by_reference": dict(references),
        "rows": rows,
        "not_scored": {"degenerate": degenerate, "by_layer": _not_scored(cells)},
        "scored_rows": scored,
        "layers_unchecked": unchecked,
        "verdict": "",  # decided from the rest, below
    }
    result["verdict"] = verdict(result)
    return result


def _result_rows(cells: dict[tuple, _Cell]) -> list[dict]:
    out = []
    for (layer, k, reference), cell in sorted(cells.items()):
        for fmt in FORMATS:
            row = {"layer": layer, "format": fmt, "k": k, "reference": reference}
            if fmt == IndexKDtype.BF16 and reference == REFERENCE_BF16:
                row.update(rows=0, recall=None, min_recall=None, is_reference=True)
            else:
                v = cell.recalls.get(fmt, [])
                row.update(
                    rows=len(v),
                    recall=(sum(v) / len(v)) if v else None,
                    min_recall=min(v) if v else None,
                    is_reference=False,
                )
            out.append(row)
    return out


def _not_scored(cells: dict[tuple, _Cell]) -> list[dict]:
    return [
        {"layer": layer, "k": k, "reference": reference, "at_most_k_keys": c.at_most_k_keys, "tied_at_k": c.tied_at_k}
        for (layer, k, reference), c in sorted(cells.items())
        if c.at_most_k_keys or c.tied_at_k
    ]


def verdict(result: RecallResult) -> str:
    by_reference = result["files_by_reference"]
    degenerate = sum(sum(d["rows"].values()) for d in result["not_scored"]["degenerate"])
    if not result["scored_rows"]:
        return (
            f"cannot tell: no query row could be scored ({degenerate} degenerate rows; rows with at most k keys "
            f"or a tie at the k-th reference logit are listed above)"
        )
    parts = []
    if by_reference.get(REFERENCE_FP32):
        parts.append(
            f"{by_reference[REFERENCE_FP32]} files: bf16, fp8 and fp4 against the fp32 keys before bf16 rounding"
        )
    if by_reference.get(REFERENCE_BF16):
        parts.append(
            f"{by_reference[REFERENCE_BF16]} files: no fp32 keys (stored before capture saw them), bf16 is "
            f"the reference, only fp8 and fp4 scored"
        )
    tail = f"; {degenerate} degenerate rows not scored" if degenerate else ""
    return f"scored {result['scored_rows']} query rows: " + "; ".join(parts) + tail + _layer_check_note(result)


def _layer_check_note(result: RecallResult) -> str:
    """Whether every file's layer was checked against the c4 layers of the model it was captured from."""
    unchecked = result["layers_unchecked"]
    if not unchecked:
        return ""
    return (
        f"; cannot tell whether the layer ids of {unchecked} files are c4 layers of their model "
        f"(those files record no c4_layers: captured before the capturer recorded them)"
    )


def format_table(result: RecallResult) -> str:
    lines = [f"{'layer':>5} {'format':<6} {'k':>5} {'reference':<9} {'rows':>6} {'recall':>8} {'min':>8}"]
    for r in result["rows"]:
        if r["is_reference"]:
            figures = f"{'-':>6} {'(the reference)':>17}"
        else:
            rec = "n/a" if r["recall"] is None else f"{r['recall']:.4f}"
            mn = "n/a" if r["min_recall"] is None else f"{r['min_recall']:.4f}"
            figures = f"{r['rows']:>6} {rec:>8} {mn:>8}"
        lines.append(f"{r['layer']:>5} {r['format']:<6} {r['k']:>5} {r['reference']:<9} {figures}")
    for c in result["not_scored"]["by_layer"]:
        lines.append(
            f"not scored, layer {c['layer']} k={c['k']} ({c['reference']} reference): "
            f"{c['at_most_k_keys']} rows with at most k keys, {c['tied_at_k']} with a tie at the k-th logit"
        )
    for d in result["not_scored"]["degenerate"]:
        lines.append(f"not scored, {d['file']}: " + ", ".join(f"{n} rows {why}" for why, n in d["rows"].items()))
    lines.append(f"verdict: {result['verdict']}")
    return "\n".join(lines)


def configured_topk() -> int:
    """``index_topk`` of the bundled DeepSeek-V4-Flash config."""
    from importlib.resources import files

    config = json.loads(files("sglang_dsv4_ext.data").joinpath("deepseek-v4-flash-config.json").read_text())
    return int(config["index_topk"])


def _emit(text: str) -> None:
    """Print; a reader that went away (``recall --json | head``) ends the output quietly, not with a traceback."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's final flush must not raise again


def run(args) -> int:
    directory = Path(args.directory)
    if not directory.is_dir():
        print(f"sglang-dsv4 recall: {directory} is not a directory", file=sys.stderr)
        return exit_codes.USAGE
    ks = sorted({512, configured_topk()})
    try:
        result = analyse(directory, ks)
    except (FileNotFoundError, CaptureFileError) as exc:
        print(f"sglang-dsv4 recall: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    _emit(json.dumps(result, indent=2) if args.json else format_table(result))
    return exit_codes.OK if result["scored_rows"] else exit_codes.ATTENTION


def add_subparser(subparsers) -> None:
    p = subparsers.add_parser(
        "recall",
        help="top-k set recall of fp8, fp4 and bf16 index-K against the fp32 keys before bf16 rounding",
        description=__doc__,
    )
    p.add_argument("directory", help="capture directory (*.pt files in it or its subdirectories, see above)")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.set_defaults(func=run)
