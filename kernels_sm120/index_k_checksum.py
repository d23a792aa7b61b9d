"""Exact per-page checksums of index-K page rows, and a fused verify with a device-side mismatch record.

The checksum of one page row of ``W`` 32-bit words ``w_0 .. w_{W-1}`` (the row's bytes read as
little-endian uint32) is::

    sum_i  w_i * (2 i + 1)        (an int64, no wraparound)

Each product is below ``2**32 * 2**14`` and a row holds at most ``MAX_WORDS = 8192`` words (32 KiB;
fp8 index-K rows are 8448 B, bf16 16384 B, fp4 4352 B), so the sum stays below ``2**63``: the value
is exact, the same in any summation order (Triton's tree reduction, torch's CPU loop), and a bit
flip, a changed word or two swapped words always change it (the odd weights make every word's
contribution distinct and non-zero modulo nothing: there is no modulus).

``verify_page_checksums`` recomputes the checksums of ``rows`` and compares them with ``expected``
in one launch. Mismatches go to a device-side ``state`` tensor (int64 ``[3]``: mismatch count, the
smallest ``code`` of a mismatching page, see :func:`mismatch_code`, and the number of pages compared,
i.e. whose expected checksum was known); nothing is read back, so
the call is asynchronous and CUDA-graph capturable. The caller copies ``state`` to pinned memory
with ``non_blocking=True`` and reads it on a later step.

CUDA tensors go to the Triton kernels, CPU tensors to the torch reference (same integers).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._triton_helpers import interpreted

MAX_WORDS = 8192  # 32 KiB rows: the bound that keeps the int64 sum exact
NO_MISMATCH = 2**63 - 1  # state[1] before any mismatch
_SEQ_BITS, _LAYER_BITS, _POS_BITS = 23, 16, 24  # mismatch code: sequence | layer | position in rows


def new_state(device: torch.device | str) -> torch.Tensor:
    """A fresh device-side record: ``[mismatch count, smallest mismatch code, pages compared]``."""
    return torch.tensor([0, NO_MISMATCH, 0], dtype=torch.int64, device=device)


def mismatch_code(seq: int, layer: int, page_row: int) -> int:
    """Orders mismatches by verify call, then layer, then page row (the first one is the smallest)."""
    return ((seq % (1 << _SEQ_BITS)) << (_LAYER_BITS + _POS_BITS)) | (layer << _POS_BITS) | page_row


def decode_mismatch_code(code: int) -> tuple[int, int, int]:
    """``(seq, layer, page_row)`` of a code made by :func:`mismatch_code`."""
    position = code & ((1 << _POS_BITS) - 1)
    layer = (code >> _POS_BITS) & ((1 << _LAYER_BITS) - 1)
    return code >> (_LAYER_BITS + _POS_BITS), layer, position


def _words(page_rows: torch.Tensor) -> torch.Tensor:
    """View ``[pages, ...]`` page rows as ``[pages, W]`` int32 words (no copy)."""
    if not isinstance(page_rows, torch.Tensor):
        raise TypeError(f"page_rows must be a torch.Tensor, got {type(page_rows).__name__}")
    if page_rows.dim() < 2:
        raise ValueError(f"page_rows must be [pages, ...] (at least 2 dims), got shape {tuple(page_rows.shape)}")
    rows = page_rows.reshape(page_rows.shape[0], -1)
    if rows.stride(-1) != 1:
        raise ValueError(f"page_rows must be contiguous within a page, got strides {tuple(page_rows.stride())}")
    row_bytes = rows.shape[1] * rows.element_size()
    if row_bytes % 4:
        raise ValueError(f"page_rows: a page row must be a whole number of 32-bit words, got {row_bytes} bytes")
    words = rows.view(torch.uint8).view(torch.int32) if rows.element_size() != 4 else rows.view(torch.int32)
    if words.shape[1] > MAX_WORDS:
        raise ValueError(f"page_rows: {row_bytes}-byte rows exceed the exact-checksum bound of {4 * MAX_WORDS} bytes")
    return words


def _check_rows(name: str, rows: torch.Tensor, device: torch.device) -> torch.Tensor:
    if not isinstance(rows, torch.Tensor) or rows.dtype not in (torch.int32, torch.int64) or rows.dim() != 1:
        raise TypeError(f"{name} must be a 1-D int32/int64 tensor of page rows")
    if rows.device != device:
        raise ValueError(f"{name} is on {rows.device}, the page rows on {device}")
    return rows


# --------------------------------------------------------------------------- torch reference (CPU)
def page_checksums_reference(page_rows: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """The checksum of each page row in ``rows``, in torch (int64 ``[len(rows)]``)."""
    words = _words(page_rows)
    w = words.index_select(0, rows.to(torch.int64)).to(torch.int64) & 0xFFFFFFFF
    weights = torch.arange(1, 2 * words.shape[1], 2, dtype=torch.int64, device=words.device)
    return (w * weights).sum(dim=1)


def _verify_reference(
    words: torch.Tensor,
    rows: torch.Tensor,
    expected: torch.Tensor,
    state: torch.Tensor,
    layer: int,
    seq: int,
    skip_unknown: bool,
) -> None:
    got = page_checksums_reference(words, rows)
    bad = got != expected
    compared = expected != NO_MISMATCH if skip_unknown else torch.ones_like(bad)
    bad &= compared
    state[0] += bad.sum()
    state[2] += compared.sum()
    rows64 = rows.to(torch.int64)
    codes = torch.where(bad, mismatch_code(seq, layer, 0) + rows64, torch.full_like(rows64, NO_MISMATCH))
    if codes.numel():
        state[1] = torch.minimum(state[1], codes.min())


# --------------------------------------------------------------------------- Triton kernels (CUDA)
@triton.jit
def _row_checksum(
    words_ptr: tl.tensor, stride_row: tl.tensor, row: tl.tensor, W: tl.tensor, BLOCK: tl.constexpr
) -> tl.tensor:
    acc = tl.zeros([BLOCK], dtype=tl.int64)
    base = words_ptr + row.to(tl.int64) * stride_row
    for start in range(0, W, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < W
        w = tl.load(base + offs, mask=mask, other=0).to(tl.int64) & 0xFFFFFFFF
        acc += w * (2 * offs.to(tl.int64) + 1)
    return tl.sum(acc, axis=0)


@triton.jit
def page_checksum_kernel(
    words_ptr: tl.tensor,
    stride_row: tl.tensor,
    rows_ptr: tl.tensor,
    out_ptr: tl.tensor,
    W: tl.tensor,
    BLOCK: tl.constexpr,
) -> None:
    i = tl.program_id(0)
    row = tl.load(rows_ptr + i)
    tl.store(out_ptr + i, _row_checksum(words_ptr, stride_row, row, W, BLOCK))


@triton.jit
def verify_checksum_kernel(
    words_ptr: tl.tensor,
    stride_row: tl.tensor,
    rows_ptr: tl.tensor,
    expected_ptr: tl.tensor,
    state_ptr: tl.tensor,
    code_base: tl.tensor,
    W: tl.tensor,
    NO_MISMATCH: tl.constexpr,
    SKIP_UNKNOWN: tl.constexpr,
    BLOCK: tl.constexpr,
) -> None:
    i = tl.program_id(0)
    row = tl.load(rows_ptr + i)
    got = _row_checksum(words_ptr, stride_row, row, W, BLOCK)
    expected = tl.load(expected_ptr + i)
    compared = (expected != NO_MISMATCH) | (SKIP_UNKNOWN == 0)
    if compared:
        tl.atomic_add(state_ptr + 2, 1)
    if (got != expected) & compared:
        tl.atomic_add(state_ptr, 1)
        tl.atomic_min(state_ptr + 1, code_base + row.to(tl.int64))


def _block(words: torch.Tensor) -> int:
    return min(1024, triton.next_power_of_2(words.shape[1]))  # type: ignore[no-any-return]  # triton: untyped


# --------------------------------------------------------------------------- launchers
def page_checksums(page_rows: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Checksums of the page rows ``rows`` of ``page_rows`` (int64 ``[len(rows)]``, on their device)."""
    words = _words(page_rows)
    rows = _check_rows("rows", rows, words.device)
    if words.device.type != "cuda" and not interpreted(page_checksum_kernel):
        return page_checksums_reference(words, rows)
    out = torch.empty(rows.numel(), dtype=torch.int64, device=words.device)
    if rows.numel():
        page_checksum_kernel[(rows.numel(),)](words, words.stride(0), rows, out, words.shape[1], BLOCK=_block(words))
    return out


def verify_page_checksums(
    page_rows: torch.Tensor,
    rows: torch.Tensor,
    expected: torch.Tensor,
    state: torch.Tensor,
    *,
    layer: int,
    seq: int,
    skip_unknown: bool = False,
) -> None:
    """Add each page of ``rows`` whose checksum differs from ``expected`` to ``state`` (no host sync).

    ``skip_unknown``: rows whose expected value is ``NO_MISMATCH`` (no checksum recorded) pass and are not
    counted as compared (``state[2]``).
    The mismatch code holds the page row itself (see :func:`mismatch_code`)."""
    words = _words(page_rows)
    rows = _check_rows("rows", rows, words.device)
    if expected.shape != rows.shape or expected.dtype != torch.int64:
        raise ValueError(
            f"expected must be int64 of shape {tuple(rows.shape)}, got {expected.dtype} {tuple(expected.shape)}"
        )
    if state.shape != (3,) or state.dtype != torch.int64 or state.device != words.device:
        raise ValueError("state must be new_state(device) on the page rows' device")
    if words.shape[0] > 1 << _POS_BITS or not 0 <= layer < 1 << _LAYER_BITS:
        raise ValueError(f"at most {1 << _POS_BITS} page rows and layer < {1 << _LAYER_BITS}")
    if words.device.type != "cuda" and not interpreted(page_checksum_kernel):
        _verify_reference(words, rows, expected, state, layer, seq, skip_unknown)
        return
    if rows.numel():
        verify_checksum_kernel[(rows.numel(),)](
            words,
            words.stride(0),
            rows,
            expected,
            state,
            mismatch_code(seq, layer, 0),
            words.shape[1],
            NO_MISMATCH=NO_MISMATCH,
            SKIP_UNKNOWN=int(skip_unknown),
            BLOCK=_block(words),
        )
