"""bf16 index-K store: RMSNorm + RoPE + Hadamard + scatter into the paged index-K cache.

What it replaces: SGLang's JIT ``fused_norm_rope_indexer`` (``fused_norm_rope_v2.cuh``),
which does the same transform and then quantizes to fp8 with a per-token scale into the
132-byte page rows. Stock SGLang has no bf16 indexer store
(``static_assert(!(kIsIndexer && kBf16Store))``). Here the transform result is rounded
once to bf16 and written to 256-byte rows: slot ``s`` -> page ``s // 64``, row ``s % 64``.

Numerics (all fp32 until the single bf16 rounding, like the JIT kernel):
  x  = kv[r] (bf16 compressor output, [128])
  x  = x * rsqrt(mean(x**2) + eps) * norm_weight
  x[64:] = RoPE, pairs (64+2k, 65+2k) rotated by freqs_cis[positions[r], k]
  y  = Hadamard_128(x) / sqrt(128)
  cache[out_loc[r]] = bf16(y)        (rows with out_loc[r] < 0 are skipped)

Two entry points:
  ``store_index_k_norm_rope_hadamard`` - the fused path for the compressor output.
  ``scatter_index_k_rows``            - rows already transformed (``set_index_fused``-style).
"""

import torch
import triton
import triton.language as tl

from ._triton_helpers import hadamard128, rope_interleaved
from ._validate import (
    INDEX_HEAD_DIM,
    INDEX_PAGE_SIZE,
    INDEX_ROPE_DIM,
    as_index_k_pages,
    as_index_vector,
    as_rope_table,
    check_same_device,
    check_tensor,
)

FLOAT_INPUTS = (torch.bfloat16, torch.float16, torch.float32)


@triton.jit
def _load_k_tile(
    tile: tl.tensor,
    kv_ptr: tl.tensor,
    stride_kv: tl.tensor,
    freqs_ptr: tl.tensor,
    stride_freq: tl.tensor,
    pos_ptr: tl.tensor,
    loc_ptr: tl.tensor,
    n_rows: tl.tensor,
    HALF: tl.constexpr,
    BLOCK_M: tl.constexpr,
    WITH_ROPE_TABLE: tl.constexpr,
) -> tuple[tl.tensor, tl.tensor, tl.tensor, tl.tensor]:
    """One tile's inputs as [BLOCK_M, 64] halves; rows past n_rows (or a tile past the end) load nothing."""
    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    j = tl.arange(0, HALF)
    in_range = rows < n_rows
    # Padding rows (slot < 0) have their kv row read but never stored; their position may
    # be garbage (SGLang's decode rows that close no group of 4), so the RoPE row is only
    # read for live rows.
    loc = tl.load(loc_ptr + rows, mask=in_range, other=-1).to(tl.int64)
    pos = tl.load(pos_ptr + rows, mask=in_range, other=0).to(tl.int64)
    m2 = in_range[:, None]
    row_ptr = kv_ptr + rows.to(tl.int64)[:, None] * stride_kv + j[None, :]
    x0 = tl.load(row_ptr, mask=m2, other=0.0)
    x1 = tl.load(row_ptr + HALF, mask=m2, other=0.0)
    live = (loc >= 0)[:, None]
    if WITH_ROPE_TABLE:
        f = tl.load(freqs_ptr + pos[:, None] * stride_freq + j[None, :], mask=live, other=0.0)
    else:  # benchmark ablation only (wrong output)
        f = tl.zeros([BLOCK_M, HALF], dtype=tl.float32)
    return loc, x0, x1, f


@triton.jit
def index_k_norm_rope_hadamard_store_kernel(
    kv_ptr: tl.tensor,
    stride_kv: tl.tensor,
    norm_w_ptr: tl.tensor,
    freqs_ptr: tl.tensor,
    stride_freq: tl.tensor,
    pos_ptr: tl.tensor,
    loc_ptr: tl.tensor,
    cache_ptr: tl.tensor,
    stride_page: tl.tensor,
    n_rows: tl.tensor,
    eps: tl.tensor,
    D: tl.constexpr,
    ROPE_DIM: tl.constexpr,
    PAGE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    PREFETCH: tl.constexpr,
    WITH_HADAMARD: tl.constexpr = True,
    WITH_ROPE_TABLE: tl.constexpr = True,
) -> None:
    # WITH_HADAMARD / WITH_ROPE_TABLE = False are ablations for benchmarks/kernels.py (they leave a
    # stage out and write wrong rows); the launcher never passes them.
    tl.static_assert(D == 128 and ROPE_DIM == 64, "the halves layout assumes RoPE on dims 64..127 of 128")
    HALF: tl.constexpr = D // 2
    # Persistent over row tiles: the norm weight is loaded once per program. With PREFETCH
    # the next tile's loads are issued before this tile's math.
    j = tl.arange(0, HALF)
    w0 = tl.load(norm_w_ptr + j).to(tl.float32)[None, :]
    w1 = tl.load(norm_w_ptr + HALF + j).to(tl.float32)[None, :]
    n_tiles = tl.cdiv(n_rows, BLOCK_M)
    step = tl.num_programs(0)
    first = tl.program_id(0)
    if PREFETCH:
        loc, x0, x1, f = _load_k_tile(
            first, kv_ptr, stride_kv, freqs_ptr, stride_freq, pos_ptr, loc_ptr, n_rows, HALF, BLOCK_M, WITH_ROPE_TABLE
        )
    for tile in range(first, n_tiles, step):
        if PREFETCH:
            cur_loc, cur_x0, cur_x1, cur_f = loc, x0, x1, f
            loc, x0, x1, f = _load_k_tile(
                tile + step,
                kv_ptr,
                stride_kv,
                freqs_ptr,
                stride_freq,
                pos_ptr,
                loc_ptr,
                n_rows,
                HALF,
                BLOCK_M,
                WITH_ROPE_TABLE,
            )
        else:
            cur_loc, cur_x0, cur_x1, cur_f = _load_k_tile(
                tile,
                kv_ptr,
                stride_kv,
                freqs_ptr,
                stride_freq,
                pos_ptr,
                loc_ptr,
                n_rows,
                HALF,
                BLOCK_M,
                WITH_ROPE_TABLE,
            )
        a = cur_x0.to(tl.float32)
        b = cur_x1.to(tl.float32)
        sum_sq = tl.sum(a * a + b * b, axis=1)
        inv_rms = tl.rsqrt(sum_sq / D + eps)[:, None]
        a = a * w0 * inv_rms
        b = rope_interleaved(b * w1, cur_f, BLOCK_M) * inv_rms
        if WITH_HADAMARD:
            out0, out1 = hadamard128(a, b, BLOCK_M)
        else:
            out0, out1 = a, b
        page = cur_loc // PAGE
        dst = cache_ptr + page[:, None] * stride_page + (cur_loc - page * PAGE)[:, None] * D + j[None, :]
        live = (cur_loc >= 0)[:, None]  # rows past n_rows loaded slot -1
        tl.store(dst, out0.to(tl.bfloat16), mask=live)
        tl.store(dst + HALF, out1.to(tl.bfloat16), mask=live)


@triton.jit
def index_k_scatter_rows_kernel(
    rows_ptr: tl.tensor,
    stride_rows: tl.tensor,
    loc_ptr: tl.tensor,
    cache_ptr: tl.tensor,
    stride_page: tl.tensor,
    n_rows: tl.tensor,
    D: tl.constexpr,
    PAGE: tl.constexpr,
    BLOCK_M: tl.constexpr,
) -> None:
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    in_range = rows < n_rows
    loc = tl.load(loc_ptr + rows, mask=in_range, other=-1).to(tl.int64)
    live = in_range & (loc >= 0)
    d = tl.arange(0, D)
    x = tl.load(
        rows_ptr + rows.to(tl.int64)[:, None] * stride_rows + d[None, :],
        mask=live[:, None],
        other=0.0,
    )
    page = loc // PAGE
    slot_in_page = loc - page * PAGE
    dst = cache_ptr + page[:, None] * stride_page + slot_in_page[:, None] * D + d[None, :]
    tl.store(dst, x, mask=live[:, None])


# AOT signatures (name -> triton type[:16 divisibility hint]); constexprs come from
# the dispatch config. Used by ``kernels_sm120.aot``.
AOT_SIGNATURES = {
    "index_k_norm_rope_hadamard_store_kernel": {
        "kv_ptr": "*bf16:16",
        "stride_kv": "i32:16",
        "norm_w_ptr": "*fp32:16",
        "freqs_ptr": "*fp32:16",
        "stride_freq": "i32:16",
        "pos_ptr": "*i64:16",
        "loc_ptr": "*i64:16",
        "cache_ptr": "*bf16:16",
        "stride_page": "i32:16",
        "n_rows": "i32",
        "eps": "fp32",
    },
    "index_k_scatter_rows_kernel": {
        "rows_ptr": "*bf16:16",
        "stride_rows": "i32:16",
        "loc_ptr": "*i64:16",
        "cache_ptr": "*bf16:16",
        "stride_page": "i32:16",
        "n_rows": "i32",
    },
}


def _check_slots(out_loc: torch.Tensor, rows: int) -> torch.Tensor:
    return as_index_vector("out_loc", out_loc, rows)


def store_index_k_norm_rope_hadamard(
    kv: torch.Tensor,
    norm_weight: torch.Tensor,
    norm_eps: float,
    freqs_cis: torch.Tensor,
    positions: torch.Tensor,
    out_loc: torch.Tensor,
    index_k_cache: torch.Tensor,
    *,
    page_size: int = INDEX_PAGE_SIZE,
    block_m: int,
    max_programs: int,
    prefetch: bool,
    num_warps: int,
    num_stages: int,
) -> None:
    """Launcher; see the module docstring. ``max_programs`` caps the persistent grid
    (dispatch passes a few per SM); ``prefetch`` loads tile i+1 during tile i. Shapes:

    kv [N, 128] bf16/fp16/fp32 (last dim contiguous, any row stride);
    norm_weight [128] fp32/bf16; freqs_cis complex64 [max_pos, 32] or fp32 [max_pos, 64];
    positions [N] int32/int64 (RoPE position of each compressed row, i.e. SGLang's
    ``plan.seq_len - compress_ratio``); out_loc [N] int32/int64 slots, < 0 = skip (the
    position of a skipped row is never read); index_k_cache: see
    ``_validate.as_index_k_pages``. Values are not range-checked (no host sync): live slots
    must be < num_pages * page_size and their positions in [0, max_pos).
    """
    check_tensor("kv", kv, dtypes=FLOAT_INPUTS, ndim=(2,))
    if kv.shape[1] != INDEX_HEAD_DIM:
        raise ValueError(f"kv must be [N, {INDEX_HEAD_DIM}], got {tuple(kv.shape)}")
    rows = kv.shape[0]
    check_tensor("norm_weight", norm_weight, dtypes=FLOAT_INPUTS, ndim=(1,))
    if norm_weight.shape[0] != INDEX_HEAD_DIM:
        raise ValueError(f"norm_weight must be [{INDEX_HEAD_DIM}], got {tuple(norm_weight.shape)}")
    if not isinstance(norm_eps, (int, float)) or not norm_eps > 0:
        raise ValueError(f"norm_eps must be a positive float, got {norm_eps!r}")
    table = as_rope_table(freqs_cis)
    positions = as_index_vector("positions", positions, rows)
    out_loc = _check_slots(out_loc, rows)
    pages = as_index_k_pages("index_k_cache", index_k_cache, page_size=page_size)
    check_same_device(
        kv=kv,
        norm_weight=norm_weight,
        freqs_cis=table,
        positions=positions,
        out_loc=out_loc,
        index_k_cache=pages,
    )
    if rows == 0:
        return
    grid = (max(1, min(triton.cdiv(rows, block_m), max_programs)),)
    index_k_norm_rope_hadamard_store_kernel[grid](
        kv,
        kv.stride(0),
        norm_weight,
        table,
        table.stride(0),
        positions,
        out_loc,
        pages,
        pages.stride(0),
        rows,
        float(norm_eps),
        D=INDEX_HEAD_DIM,
        ROPE_DIM=INDEX_ROPE_DIM,
        PAGE=page_size,
        BLOCK_M=block_m,
        PREFETCH=prefetch,
        num_warps=num_warps,
        num_stages=num_stages,
    )


def scatter_index_k_rows(
    rows_bf16: torch.Tensor,
    out_loc: torch.Tensor,
    index_k_cache: torch.Tensor,
    *,
    page_size: int = INDEX_PAGE_SIZE,
    block_m: int,
    num_warps: int,
    num_stages: int = 1,
) -> None:
    """Write already-transformed bf16 rows [N, 128] to slots out_loc [N] (< 0 = skip)."""
    check_tensor("rows_bf16", rows_bf16, dtypes=(torch.bfloat16,), ndim=(2,))
    if rows_bf16.shape[1] != INDEX_HEAD_DIM:
        raise ValueError(f"rows_bf16 must be [N, {INDEX_HEAD_DIM}], got {tuple(rows_bf16.shape)}")
    rows = rows_bf16.shape[0]
    out_loc = _check_slots(out_loc, rows)
    pages = as_index_k_pages("index_k_cache", index_k_cache, page_size=page_size)
    check_same_device(rows_bf16=rows_bf16, out_loc=out_loc, index_k_cache=pages)
    if rows == 0:
        return
    grid = (triton.cdiv(rows, block_m),)
    index_k_scatter_rows_kernel[grid](
        rows_bf16,
        rows_bf16.stride(0),
        out_loc,
        pages,
        pages.stride(0),
        rows,
        D=INDEX_HEAD_DIM,
        PAGE=page_size,
        BLOCK_M=block_m,
        num_warps=num_warps,
        num_stages=num_stages,
    )
