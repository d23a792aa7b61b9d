"""Finding, loading and checking capture files for ``sglang-dsv4 recall`` (format: ``capture_format``).

Every inconsistency is a :class:`~sglang_dsv4_ext.errors.CaptureFileError` naming the file and the field: a file is
scored whole or the run stops, never partly. Finding files never follows a path twice (real paths), never opens
what is not a regular file (a FIFO named ``*.pt`` would block ``open``), and stops at a directory it cannot list.
Rows that are well formed but carry nothing to rank (no keys; NaN, inf or all-zero queries, weights or keys) are
named by :func:`degenerate_reason`; recall counts them and never scores them.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import torch

from sglang_dsv4_ext.errors import CaptureFileError
from sglang_dsv4_ext.runtime.index_k import capture_format as fmt

SUFFIX = ".pt"


@dataclass(frozen=True)
class Capture:
    """One checked capture file."""

    path: Path
    layer: int
    index_topk: int  # 0: not known
    c4_layers: tuple[int, ...] | None  # the capturing model's c4 layer ids; None: not recorded (an older file)
    checksum: str
    q: torch.Tensor  # bf16 [R, H, D]
    weights: torch.Tensor  # fp32 [R, H]
    seq_lens: torch.Tensor  # int64 [R]
    k: torch.Tensor  # bf16 [T, D] (shared) or [R, T, D]
    k_fp32: torch.Tensor | None  # fp32, k's shape: the values k was rounded from, when captured

    def keys_of(self, row: int, keys: torch.Tensor) -> torch.Tensor:
        """The ``seq_lens[row]`` key rows query row ``row`` read, from ``keys`` (``k`` or ``k_fp32``)."""
        n = int(self.seq_lens[row])
        return keys[:n] if keys.dim() == 2 else keys[row, :n]


# --- finding ------------------------------------------------------------------------------------


def _file_identity(path: str) -> tuple[int, int] | str:
    """(device, inode): one file however it is reached (a symbolic or a hard link); the real path where it
    cannot be stat'ed (loading it then names the problem)."""
    try:
        info = os.stat(path)
    except OSError:
        return os.path.realpath(path)
    return info.st_dev, info.st_ino


def find_files(directory: Path) -> list[Path]:
    """Every ``*.pt`` under ``directory`` (symlinks followed, each file and directory once, by device and
    inode: a hard link to a file is that file), sorted."""
    found: dict[tuple[int, int] | str, Path] = {}
    seen_dirs = set()

    def refuse(exc: OSError) -> None:
        raise CaptureFileError(
            f"{exc.filename}: cannot list this directory ({exc.strerror or exc}); "
            f"recall reads every subdirectory or none"
        )

    for top, dirs, files in os.walk(directory, onerror=refuse, followlinks=True):
        real = _file_identity(top)
        if real in seen_dirs:
            dirs[:] = []  # reached again through a link: read once
            continue
        seen_dirs.add(real)
        dirs.sort()
        for name in sorted(files):
            if name.endswith(SUFFIX):
                path = Path(top) / name
                found.setdefault(_file_identity(str(path)), path)
    return sorted(found.values())


def _check_regular(path: Path) -> None:
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise CaptureFileError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    if not stat.S_ISREG(mode):
        raise CaptureFileError(f"{path}: not a regular file (a capture file is one; this was not opened)")


# --- loading and checking -----------------------------------------------------------------------


def load(path: Path) -> Capture:
    """The checked capture in ``path``; :class:`CaptureFileError` naming the field on any inconsistency."""
    _check_regular(path)
    try:
        rec = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch.load / unpickling: name the file, never a traceback
        raise CaptureFileError(f"{path}: not a readable capture file ({type(exc).__name__}: {exc})") from exc
    where = f"{path}: "
    _check_fields(where, rec)
    _check_types(where, rec)
    if rec[fmt.CHECKSUM] != fmt.content_checksum(rec):
        raise CaptureFileError(f"{where}checksum: does not match the content (changed or corrupted after capture)")
    _check_meta(where, rec)
    _check_shapes(where, rec)
    _check_lengths(where, rec)
    _check_query_rows(where, rec)
    _check_slots(where, rec)
    if fmt.PREROUNDING in rec:
        _check_prerounding(where, rec)
    return Capture(
        path=path,
        layer=rec["layer"],
        index_topk=rec["index_topk"],
        c4_layers=tuple(rec["c4_layers"]) if "c4_layers" in rec else None,
        checksum=rec[fmt.CHECKSUM],
        q=rec["q"],
        weights=rec["weights"],
        seq_lens=rec["seq_lens"],
        k=rec["k"],
        k_fp32=rec.get(fmt.PREROUNDING),
    )


def _fail(where: str, field: str, problem: str):
    raise CaptureFileError(f"{where}{field}: {problem}")


def _check_fields(where: str, rec) -> None:
    required = [*fmt.META_FIELDS, *fmt.TENSOR_FIELDS, fmt.CHECKSUM]
    if not isinstance(rec, dict):
        raise CaptureFileError(
            f"{where}not a capture file: holds a {type(rec).__name__}, not a dict of {', '.join(required)}"
        )
    version = rec.get("format_version", "missing")
    if version != fmt.FORMAT_VERSION or type(version) is not int:
        _fail(
            where,
            "format_version",
            f"{version!r} is not supported; allowed: {fmt.FORMAT_VERSION} (files of "
            f"earlier versions carry no checksum: capture again with this version)",
        )
    missing = [name for name in required if name not in rec]
    if missing:
        raise CaptureFileError(
            f"{where}not a capture file: lacks {', '.join(missing)} (a capture file holds {', '.join(required)})"
        )
    unknown = sorted(set(rec) - set(required) - set(fmt.OPTIONAL_TENSOR_FIELDS) - set(fmt.OPTIONAL_META_FIELDS))
    if unknown:
        _fail(where, unknown[0], "not a field of a capture file (format 3)")


def _check_types(where: str, rec) -> None:
    for name, kind in fmt.META_FIELDS.items():
        if type(rec[name]) is not kind:  # bool is not an int here
            _fail(where, name, f"{type(rec[name]).__name__} {rec[name]!r}, expected {kind.__name__}")
    if "c4_layers" in rec:
        _check_layer_list(where, rec["c4_layers"])
    for name, dtype in {**fmt.TENSOR_FIELDS, **fmt.OPTIONAL_TENSOR_FIELDS}.items():
        value = rec.get(name)
        if name in rec and not isinstance(value, torch.Tensor):
            _fail(where, name, f"a {type(value).__name__}, expected a tensor")
        if name in rec and value.dtype != dtype:
            _fail(where, name, f"dtype {value.dtype}, expected {dtype}")
    if not isinstance(rec[fmt.CHECKSUM], str):
        _fail(where, fmt.CHECKSUM, f"a {type(rec[fmt.CHECKSUM]).__name__}, expected 'sha256:<hex>'")


def _check_meta(where: str, rec) -> None:
    if rec["dtype"] != fmt.STORED_DTYPE:
        _fail(
            where,
            "dtype",
            f"{rec['dtype']!r}: recall compares formats against what bf16 index-K stored; "
            f"allowed: {fmt.STORED_DTYPE!r}",
        )
    for name, low in (("layer", 0), ("request_index", 0), ("index_topk", 0), ("page_size", 1)):
        if rec[name] < low:
            _fail(where, name, f"{rec[name]}, expected >= {low}")
    c4_layers = rec.get("c4_layers")
    if c4_layers is not None and rec["layer"] not in c4_layers:
        _fail(
            where,
            "layer",
            f"{rec['layer']} is not a c4 indexer layer of the model the capture came from; "
            f"allowed: {','.join(map(str, c4_layers))} (c4_layers)",
        )


def _check_layer_list(where: str, layers) -> None:
    """``c4_layers``: the capturing model's c4 layer ids, each a whole number once, in order."""
    if (
        type(layers) is not list
        or not layers
        or any(type(x) is not int or x < 0 for x in layers)
        or list(layers) != sorted(set(layers))
    ):
        _fail(where, "c4_layers", f"{layers!r}, expected a non-empty increasing list of layer ids >= 0")


def _check_shapes(where: str, rec) -> None:
    q, k = rec["q"], rec["k"]
    if q.dim() != 3 or q.shape[0] == 0 or q.shape[-1] % 32:
        _fail(where, "q", f"shape {tuple(q.shape)}, expected [R >= 1, H, D] with D a multiple of 32")
    rows, heads, dim = q.shape
    expected = {"weights": (rows, heads), "seq_lens": (rows,), "query_rows": (rows,)}
    for name, shape in expected.items():
        if tuple(rec[name].shape) != shape:
            _fail(where, name, f"shape {tuple(rec[name].shape)}, expected {shape} (q is {tuple(q.shape)})")
    if not (k.dim() == 2 or (k.dim() == 3 and k.shape[0] == rows)) or k.shape[-1] != dim:
        _fail(where, "k", f"shape {tuple(k.shape)}, expected [T, {dim}] or [{rows}, T, {dim}]")
    for name, shape in (("slots", k.shape[:-1]), (fmt.PREROUNDING, k.shape)):
        if name in rec and rec[name].shape != shape:
            _fail(where, name, f"shape {tuple(rec[name].shape)}, expected {tuple(shape)} (k is {tuple(k.shape)})")


def _check_lengths(where: str, rec) -> None:
    lens, keys = rec["seq_lens"], rec["k"].shape[-2]
    for r, n in enumerate(lens.tolist()):
        if n < 0 or n > keys:
            _fail(where, "seq_lens", f"row {r} reads {n} keys; the file holds {keys} (k): allowed 0..{keys}")


def _check_query_rows(where: str, rec) -> None:
    """Each captured query row is a distinct row of the forward call: a row twice would be scored twice."""
    rows = rec["query_rows"].tolist()
    negative = [r for r in rows if r < 0]
    if negative:
        _fail(where, "query_rows", f"row {negative[0]} is negative; allowed: row numbers >= 0")
    repeated = sorted({r for r in rows if rows.count(r) > 1})
    if repeated:
        _fail(
            where, "query_rows", f"row {repeated[0]} appears {rows.count(repeated[0])} times; each row is captured once"
        )


def _check_slots(where: str, rec) -> None:
    """A key row has a pool slot (>= 0) exactly where a query row reads it, -1 elsewhere."""
    slots, lens = rec["slots"], rec["seq_lens"]
    t = torch.arange(slots.shape[-1])
    if slots.dim() == 1:
        read = t < int(lens.max())
    else:
        read = t.unsqueeze(0) < lens.unsqueeze(1)
    if not torch.equal(slots >= 0, read) or bool((slots < -1).any()):
        _fail(where, "slots", "not a pool slot (>= 0) exactly at the keys read and -1 elsewhere (seq_lens)")


def _check_prerounding(where: str, rec) -> None:
    """``k`` must be ``k_fp32`` rounded to bf16, to within one bf16 step plus a row-scale allowance.

    The capture recomputes the fp32 values in float64 from what the store received; the store kernel
    computed them in fp32 (RMSNorm, RoPE, a 128-point Hadamard). Where a value sits near a bf16 rounding
    boundary the two may round apart (one step); where the Hadamard cancels a row to near zero the kernel's
    fp32 error (~1e-6 of the row's largest value, measured on the H200) is many bf16 steps of that tiny
    value. So each value may differ by one bf16 step at its own size plus 2**-14 of its row's largest
    magnitude: 60x the fp32 error, 64x below a bf16 step at that largest value, so ``k_fp32`` of other data
    (or corrupted bytes, which the checksum catches first) still fails.
    """
    k, pre = rec["k"], rec[fmt.PREROUNDING]
    rounded = pre.to(torch.bfloat16)
    same = (rounded == k) | (rounded.isnan() & k.isnan())
    if bool(same.all()):
        return
    _, exponent = torch.frexp(pre.abs().clamp(min=2.0**-126))
    step = torch.ldexp(torch.ones_like(pre), exponent - 8)  # bf16 spacing at |k_fp32|: 8 significant bits
    row_scale = pre.abs().nan_to_num(0.0, 0.0, 0.0).amax(dim=-1, keepdim=True) * 2.0**-14
    near = (rounded.float() - k.float()).abs() <= step + row_scale
    if not bool((same | near).all()):
        bad = int((~(same | near)).sum())
        _fail(
            where,
            fmt.PREROUNDING,
            f"{bad} values are not what k was rounded from (more than one bf16 step "
            "plus 2**-14 of their row's largest value)",
        )


# --- rows with nothing to rank ------------------------------------------------------------------


def degenerate_reason(capture: Capture, row: int) -> str | None:
    """Why query row ``row`` cannot be ranked (None: it can)."""
    if int(capture.seq_lens[row]) == 0:
        return "no keys (seq_lens 0)"
    parts = [("q", capture.q[row]), ("weights", capture.weights[row]), ("keys", capture.keys_of(row, capture.k))]
    if capture.k_fp32 is not None:
        parts.append(("k_fp32", capture.keys_of(row, capture.k_fp32)))
    for name, values in parts:
        if not bool(torch.isfinite(values).all()):
            return f"{name} not finite"
        if not bool((values != 0).any()):
            return f"{name} all zero"
    return None
