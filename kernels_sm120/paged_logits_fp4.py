"""fp4 paged MQA logits over SGLang's fp4 index-K pool as stored (``--enable-deepseek-v4-fp4-indexer``).

For each query row r and compressed key position t of its page table:

    logits[r, t] = sum_h relu(q[r, h, :] . k[t, :]) * w[r, h]      (fp32)

with q and k the values SGLang's fp4 quantizers stored (``quantize_fp4_indexer_tensor`` for q,
``store_fp4_index_k_cache`` for k): e2m1 codes, two per byte (element 2i in the low nibble,
2i+1 in the high one), times ``2^(e - 127)`` with one ue8m0 exponent e per 32 values.

Layouts, as SGLang 0.5.23 stores and passes them
-----------------------------------------------
* k (``DeepSeekV4IndexerPool``, CUDA layout): per page of 64 keys, 64 x 64 payload bytes, then
  64 x 4 exponent bytes (``get_index_k_fp4`` / ``get_index_k_dequant`` read it so);
  ``forward_c4_indexer`` passes it as uint8 ``[num_pages, 64, 1, 68]``.
* q: ``(q_fp4 [R, 1, H, 64] int8, q_sf [R, 1, H] int32)``; the int32 holds the four exponent
  bytes of the head's four 32-value groups, group g in byte g (little-endian).
* weights ``[R, H]`` fp32 (``forward_c4_indexer`` casts them), no scale folded in for q.

Arithmetic: every value is decoded exactly (e2m1 times a power of two is a bf16 value, built as
bits: no float arithmetic per value), so the products on bf16 tensor cores (mma.sync on SM80/SM120)
are exact and only the fp32 sums round. Exponent bytes must be 2..252 (SGLang's quantizers floor
amax at 1e-4 and write 111 or more); outside that range the values are not SGLang's.
The key axis is split into equal parts of whole tiles (``_part_bounds`` of the bf16/fp8 kernel),
one program per (row, part); the output contract is the bf16 kernel's: columns at or past a
row's length are not written (see ``paged_mqa_logits``).
"""

import torch
import triton
import triton.language as tl

from ._validate import (
    INDEX_HEAD_DIM,
    INDEX_PAGE_SIZE,
    as_index_vector,
    as_quantized_index_k_pages,
    check_same_device,
    check_tensor,
)
from .paged_mqa_logits import _part_bounds, pick_split

FP4_PAYLOAD_BYTES = INDEX_HEAD_DIM // 2  # 64: two e2m1 codes per byte
FP4_SCALE_BYTES = INDEX_HEAD_DIM // 32  # 4: one ue8m0 exponent per 32 values
FP4_KEY_BYTES = FP4_PAYLOAD_BYTES + FP4_SCALE_BYTES  # 68
# one tiling for every arch: 64 keys x 68 B per tile, two bf16 products of K = 64 (AOT: kernels_sm120/aot.py)
BLOCK_N, NUM_WARPS, NUM_STAGES = 64, 4, 2


@triton.jit
def fp4_bf16(code: tl.tensor, e: tl.tensor) -> tl.tensor:
    """bf16 of e2m1 ``code`` times ``2^(e - 127)``, built as bits (no float arithmetic): magnitude
    m = code & 7 is 0 or 2^(m>>1 - 1) * (1 + (m & 1) / 2) for m >= 2 (0.5 for m == 1), so the bf16
    exponent field is e - 1 + (m >> 1) and its top mantissa bit is m & 1 (m >= 2). Exact for
    2 <= e <= 252 (``exact_exponents``); SGLang's quantizers floor amax at 1e-4, so e >= 111."""
    c = code.to(tl.int32)
    m = c & 7
    field = (e.to(tl.int32) - 1 + (m >> 1)) << 7
    mant = tl.where(m >= 2, (m & 1) << 6, 0)
    bits = tl.where(m == 0, 0, field | mant) | ((c & 8) << 12)
    return bits.to(tl.int16).to(tl.bfloat16, bitcast=True)


@triton.jit
def fp4_halves(payload: tl.tensor, exps: tl.tensor) -> tuple[tl.tensor, tl.tensor]:
    """Decoded bf16 values of packed bytes [N, 64] (exps [N, 64]: the exponent byte of each byte's
    group): (even elements, odd elements), each [N, 64]."""
    return fp4_bf16(payload & 0x0F, exps), fp4_bf16((payload >> 4) & 0x0F, exps)


@triton.jit
def group_exponents(four: tl.tensor, N: tl.constexpr) -> tl.tensor:
    """[N, 4] exponent bytes -> [N, 64]: byte i of a row's payload is in group i // 16."""
    return tl.reshape(tl.broadcast_to(four[:, :, None], [N, 4, 16]), [N, 64])


@triton.jit
def _row_q(
    q_ptr: tl.tensor,
    stride_q_row: tl.tensor,
    sf_ptr: tl.tensor,
    stride_sf_row: tl.tensor,
    row: tl.tensor,
    H: tl.constexpr,
    HALF_D: tl.constexpr,
) -> tuple[tl.tensor, tl.tensor]:
    """One row's q as (even, odd) bf16 [HALF_D, H] (transposed for the product)."""
    row64 = row.to(tl.int64)
    h = tl.arange(0, H)
    i = tl.arange(0, HALF_D)
    payload = tl.load(q_ptr + row64 * stride_q_row + h[:, None] * HALF_D + i[None, :]).to(tl.uint8)
    sf = tl.load(sf_ptr + row64 * stride_sf_row + h)  # [H] int32: four exponent bytes
    g = tl.arange(0, 4)
    exps = group_exponents((sf[:, None] >> (g[None, :] * 8)) & 0xFF, H)
    even, odd = fp4_halves(payload, exps)
    return tl.trans(even), tl.trans(odd)


@triton.jit
def paged_mqa_logits_fp4_kernel(
    q_ptr: tl.tensor,
    stride_q_row: tl.tensor,
    sf_ptr: tl.tensor,
    stride_sf_row: tl.tensor,
    k_ptr: tl.tensor,
    stride_page: tl.tensor,
    w_ptr: tl.tensor,
    stride_w_row: tl.tensor,
    seq_lens_ptr: tl.tensor,
    page_table_ptr: tl.tensor,
    stride_pt_row: tl.tensor,
    pt_width: tl.tensor,
    out_ptr: tl.tensor,
    stride_out_row: tl.tensor,
    max_len: tl.tensor,
    split: tl.tensor,
    H: tl.constexpr,
    PAGE: tl.constexpr,
    BLOCK_N: tl.constexpr,
) -> None:
    HALF_D: tl.constexpr = 64
    row = tl.program_id(0)
    part = tl.program_id(1)
    n_write = tl.minimum(tl.maximum(tl.load(seq_lens_ptr + row), 0), max_len)
    start, end = _part_bounds(n_write, split, part, 0, BLOCK_N)
    compute_end = tl.minimum(end, pt_width * PAGE)  # past the page table's reach: -inf
    q_even, q_odd = _row_q(q_ptr, stride_q_row, sf_ptr, stride_sf_row, row, H, HALF_D)
    w = tl.load(w_ptr + row.to(tl.int64) * stride_w_row + tl.arange(0, H))
    pt_row = page_table_ptr + row.to(tl.int64) * stride_pt_row
    out_row = out_ptr + row.to(tl.int64) * stride_out_row
    offs_n = tl.arange(0, BLOCK_N)
    i = tl.arange(0, HALF_D)
    g = tl.arange(0, 4)
    for it in range(0, tl.cdiv(end - start, BLOCK_N)):
        t = start + it * BLOCK_N + offs_n
        valid = t < compute_end
        page = tl.load(pt_row + t // PAGE, mask=valid, other=0).to(tl.int64)
        base = k_ptr + page * stride_page
        slot = (t % PAGE)[:, None]
        payload = tl.load(base[:, None] + slot * HALF_D + i[None, :], mask=valid[:, None], other=0)
        four = tl.load(base[:, None] + PAGE * HALF_D + slot * 4 + g[None, :], mask=valid[:, None], other=127)
        exps = group_exponents(four, BLOCK_N)
        k_even, k_odd = fp4_halves(payload, exps)
        s = tl.dot(k_even, q_even) + tl.dot(k_odd, q_odd)  # [BLOCK_N, H] fp32, exact products
        s = tl.maximum(s, 0.0) * w[None, :]
        logit = tl.where(valid, tl.sum(s, axis=1), float("-inf"))
        tl.store(out_row + t, logit, mask=t < end)


AOT_SIGNATURES = {
    "paged_mqa_logits_fp4_kernel": {
        "q_ptr": "*i8:16",
        "stride_q_row": "i32:16",
        "sf_ptr": "*i32:16",
        "stride_sf_row": "i32",
        "k_ptr": "*u8:16",
        "stride_page": "i32:16",
        "w_ptr": "*fp32:16",
        "stride_w_row": "i32:16",
        "seq_lens_ptr": "*i32:16",
        "page_table_ptr": "*i32:16",
        "stride_pt_row": "i32",
        "pt_width": "i32",
        "out_ptr": "*fp32:16",
        "stride_out_row": "i32",
        "max_len": "i32",
        "split": "i32",
    },
}


def as_fp4_index_k_pages(name: str, buffer: torch.Tensor, *, page_size: int = INDEX_PAGE_SIZE) -> torch.Tensor:
    """SGLang's fp4 index-K buffer of one layer -> uint8 view [num_pages, page_size * 68].

    Accepted: uint8 [num_pages, page_size, 1, 68] (what ``forward_c4_indexer`` passes) or
    [num_pages, page_size * 68] (the pool's ``index_k_with_scale_buffer``); each page contiguous."""
    return as_quantized_index_k_pages(
        name,
        buffer,
        page_size,
        FP4_KEY_BYTES,
        f"fp4 index-K: per page {page_size} x {FP4_PAYLOAD_BYTES} payload bytes, "
        f"then {page_size} x {FP4_SCALE_BYTES} ue8m0 exponents",
    )


def _checked_fp4_q(q_fp4: torch.Tensor, q_sf: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(q [R, H, 64] int8, sf [R, H] int32), next_n == 1 folded into rows."""
    check_tensor("q_fp4", q_fp4, dtypes=(torch.int8, torch.uint8), ndim=(3, 4))
    check_tensor("q_sf", q_sf, dtypes=(torch.int32,), ndim=(2, 3))
    if q_fp4.dim() == 4:
        if q_fp4.shape[1] != 1:
            raise ValueError(f"q_fp4 must be [R, H, 64] or [R, 1, H, 64], got {tuple(q_fp4.shape)}")
        q_fp4 = q_fp4[:, 0]
    if q_sf.dim() == 3:
        if q_sf.shape[1] != 1:
            raise ValueError(f"q_sf must be [R, H] or [R, 1, H], got {tuple(q_sf.shape)}")
        q_sf = q_sf[:, 0]
    rows, heads, half = q_fp4.shape
    if half != FP4_PAYLOAD_BYTES or q_fp4.stride(1) != FP4_PAYLOAD_BYTES:
        raise ValueError(f"q_fp4 must be [R, H, 64] packed e2m1 with contiguous heads, got {tuple(q_fp4.shape)}")
    if heads < 16 or heads & (heads - 1):
        raise ValueError(f"q heads must be a power of two >= 16 (tensor-core tile), got {heads}")
    if tuple(q_sf.shape) != (rows, heads) or (heads > 1 and q_sf.stride(1) != 1):
        raise ValueError(f"q_sf must be [{rows}, {heads}] int32 with unit head stride, got {tuple(q_sf.shape)}")
    return q_fp4, q_sf


def paged_mqa_logits_fp4(
    q_fp4: torch.Tensor,
    q_sf: torch.Tensor,
    kvcache_fp4: torch.Tensor,
    weights: torch.Tensor,
    seq_lens: torch.Tensor,
    page_table: torch.Tensor,
    max_seq_len: int,
    *,
    out: torch.Tensor | None = None,
    block_n: int = BLOCK_N,
    target_programs: int = 0,
    max_chunk: int = 4096,
    num_warps: int = NUM_WARPS,
    num_stages: int = NUM_STAGES,
) -> torch.Tensor:
    """fp32 [R, max_seq_len] logits over SGLang's fp4 index-K pool (see the module docstring);
    columns at or past min(seq_lens[r], max_seq_len) are not written. ``target_programs``: about
    how many programs in all (0: 4 per SM of q's device; the parts of a row are at most
    ``max_chunk`` keys whatever it is)."""
    from .paged_mqa_logits import _checked_weights

    q_fp4, q_sf = _checked_fp4_q(q_fp4, q_sf)
    rows, heads, _ = q_fp4.shape
    pages = as_fp4_index_k_pages("kvcache_fp4", kvcache_fp4)
    weights = _checked_weights(weights, rows, heads)
    seq_lens = as_index_vector("seq_lens", seq_lens, rows).to(torch.int32)
    check_tensor("page_table", page_table, dtypes=(torch.int32, torch.int64), ndim=(2,))
    if page_table.shape[0] != rows:
        raise ValueError(f"page_table must have {rows} rows (one per query row), got {tuple(page_table.shape)}")
    if not isinstance(max_seq_len, int) or max_seq_len < 0:
        raise ValueError(f"max_seq_len must be a non-negative python int, got {max_seq_len!r}")
    if out is None:
        out = torch.empty((rows, max_seq_len), dtype=torch.float32, device=q_fp4.device)
    elif out.dtype != torch.float32 or tuple(out.shape) != (rows, max_seq_len) or out.stride(-1) != 1:
        raise ValueError(f"out must be [{rows}, {max_seq_len}] fp32 with unit column stride, got {tuple(out.shape)}")
    check_same_device(q_fp4=q_fp4, q_sf=q_sf, kvcache_fp4=pages, weights=weights, page_table=page_table, out=out)
    if rows == 0 or max_seq_len == 0:
        return out
    if target_programs <= 0:
        target_programs = 4 * _num_sms(q_fp4.device)
    split = pick_split(rows, max_seq_len, block_n, target_programs, max_chunk)
    paged_mqa_logits_fp4_kernel[(rows, split)](
        q_fp4,
        q_fp4.stride(0),
        q_sf,
        q_sf.stride(0),
        pages,
        pages.stride(0),
        weights,
        weights.stride(0),
        seq_lens,
        page_table,
        page_table.stride(0),
        page_table.shape[1],
        out,
        out.stride(0),
        max_seq_len,
        split,
        H=heads,
        PAGE=INDEX_PAGE_SIZE,
        BLOCK_N=block_n,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return out


def _num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 1
    return torch.cuda.get_device_properties(device).multi_processor_count
