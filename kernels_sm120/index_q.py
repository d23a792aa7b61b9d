"""bf16 indexer query: RoPE + Hadamard, no quantization, plus the head weights.

What it replaces: SGLang's JIT ``fused_q_indexer_rope_hadamard_quant``
(``main_norm_rope.cuh``), which applies the same RoPE and Hadamard, quantizes q to fp8
with a per-(token, head) scale ``max(1e-4, amax)/448`` and folds that scale into the head
weights (``weights_out = weight * weight_scale * q_scale``). With a bf16 index-K there is
no q scale, so ``weights_out = weight * weight_scale``.

Numerics (fp32 until the single bf16 rounding of q):
  x = q[t, h, :]  (wq_b output, bf16; no norm on the q path)
  x[64:] = RoPE, pairs (64+2k, 65+2k) rotated by freqs_cis[positions[t], k]
  q_out[t, h] = bf16(Hadamard_128(x) / sqrt(128))
  weights_out[t, h] = fp32(weight[t, h]) * weight_scale
"""

import torch
import triton
import triton.language as tl

from ._triton_helpers import hadamard128, rope_interleaved
from ._validate import (
    INDEX_HEAD_DIM,
    INDEX_ROPE_DIM,
    as_index_vector,
    as_rope_table,
    check_rows,
    check_same_device,
    check_tensor,
)


@triton.jit
def _load_q_tile(
    tile: tl.tensor,
    q_ptr: tl.tensor,
    stride_q_tok: tl.tensor,
    w_ptr: tl.tensor,
    stride_w_tok: tl.tensor,
    freqs_ptr: tl.tensor,
    stride_freq: tl.tensor,
    pos_ptr: tl.tensor,
    n_work: tl.tensor,
    H: tl.constexpr,
    D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    ONE_TOKEN: tl.constexpr,
    STREAM: tl.constexpr = False,
) -> tuple[tl.tensor, tl.tensor, tl.tensor, tl.tensor]:
    """One tile of (token, head) rows as [BLOCK_M, 64] halves; items past n_work load nothing.
    ONE_TOKEN (BLOCK_M divides H): the tile is BLOCK_M heads of one token, so its position
    and RoPE row are loaded once and broadcast instead of once per row."""
    HALF: tl.constexpr = D // 2
    first = tile * BLOCK_M
    work = first + tl.arange(0, BLOCK_M)
    j = tl.arange(0, HALF)
    live = work < n_work
    m2 = live[:, None]
    if ONE_TOKEN:
        tok = (first // H).to(tl.int64)
        head = first % H + tl.arange(0, BLOCK_M)
        pos = tl.load(pos_ptr + tok, mask=first < n_work, other=0).to(tl.int64)
        f_row = tl.load(freqs_ptr + pos * stride_freq + j, mask=(j < HALF) & (first < n_work), other=0.0)
        f = tl.broadcast_to(f_row[None, :], [BLOCK_M, HALF])
        row_ptr = q_ptr + tok * stride_q_tok + (head * D)[:, None] + j[None, :]
        w = tl.load(w_ptr + tok * stride_w_tok + head, mask=live, other=0.0)
    else:
        tok = (work // H).to(tl.int64)
        head = work % H
        pos = tl.load(pos_ptr + tok, mask=live, other=0).to(tl.int64)
        row_ptr = q_ptr + (tok * stride_q_tok + head * D)[:, None] + j[None, :]
        f = tl.load(freqs_ptr + pos[:, None] * stride_freq + j[None, :], mask=m2, other=0.0)
        w = tl.load(w_ptr + tok * stride_w_tok + head, mask=live, other=0.0)
    # STREAM: q is read once; ask L2 to evict it first (the RoPE rows are reused by every head)
    x0 = tl.load(row_ptr, mask=m2, other=0.0, eviction_policy="evict_first" if STREAM else "")
    x1 = tl.load(row_ptr + HALF, mask=m2, other=0.0, eviction_policy="evict_first" if STREAM else "")
    return x0, x1, f, w


@triton.jit
def index_q_rope_hadamard_kernel(
    q_ptr: tl.tensor,
    stride_q_tok: tl.tensor,
    w_ptr: tl.tensor,
    stride_w_tok: tl.tensor,
    freqs_ptr: tl.tensor,
    stride_freq: tl.tensor,
    pos_ptr: tl.tensor,
    q_out_ptr: tl.tensor,
    w_out_ptr: tl.tensor,
    n_work: tl.tensor,
    weight_scale: tl.tensor,
    H: tl.constexpr,
    D: tl.constexpr,
    ROPE_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    PREFETCH: tl.constexpr,
    ONE_TOKEN: tl.constexpr = False,
    STREAM: tl.constexpr = False,
) -> None:
    tl.static_assert(not ONE_TOKEN or H % BLOCK_M == 0, "ONE_TOKEN tiles need BLOCK_M to divide H")
    tl.static_assert(D == 128 and ROPE_DIM == 64, "the halves layout assumes RoPE on dims 64..127 of 128")
    HALF: tl.constexpr = D // 2
    # One work item = one (token, head) row of D values. Persistent over tiles of BLOCK_M
    # items. With PREFETCH the next tile's loads are issued before this tile's math.
    j = tl.arange(0, HALF)
    n_tiles = tl.cdiv(n_work, BLOCK_M)
    step = tl.num_programs(0)
    first = tl.program_id(0)
    if PREFETCH:
        x0, x1, f, w = _load_q_tile(
            first,
            q_ptr,
            stride_q_tok,
            w_ptr,
            stride_w_tok,
            freqs_ptr,
            stride_freq,
            pos_ptr,
            n_work,
            H,
            D,
            BLOCK_M,
            ONE_TOKEN,
            STREAM,
        )
    for tile in range(first, n_tiles, step):
        if PREFETCH:
            cur_x0, cur_x1, cur_f, cur_w = x0, x1, f, w
            x0, x1, f, w = _load_q_tile(
                tile + step,
                q_ptr,
                stride_q_tok,
                w_ptr,
                stride_w_tok,
                freqs_ptr,
                stride_freq,
                pos_ptr,
                n_work,
                H,
                D,
                BLOCK_M,
                ONE_TOKEN,
                STREAM,
            )
        else:
            cur_x0, cur_x1, cur_f, cur_w = _load_q_tile(
                tile,
                q_ptr,
                stride_q_tok,
                w_ptr,
                stride_w_tok,
                freqs_ptr,
                stride_freq,
                pos_ptr,
                n_work,
                H,
                D,
                BLOCK_M,
                ONE_TOKEN,
                STREAM,
            )
        a = cur_x0.to(tl.float32)
        b = rope_interleaved(cur_x1.to(tl.float32), cur_f, BLOCK_M)
        out0, out1 = hadamard128(a, b, BLOCK_M)
        work = tile * BLOCK_M + tl.arange(0, BLOCK_M)
        live = work < n_work
        work64 = work.to(tl.int64)
        dst = q_out_ptr + work64[:, None] * D + j[None, :]
        tl.store(dst, out0.to(tl.bfloat16), mask=live[:, None], cache_modifier=".cs" if STREAM else "")
        tl.store(dst + HALF, out1.to(tl.bfloat16), mask=live[:, None], cache_modifier=".cs" if STREAM else "")
        tl.store(w_out_ptr + work64, cur_w.to(tl.float32) * weight_scale, mask=live)


AOT_SIGNATURES = {
    "index_q_rope_hadamard_kernel": {
        "q_ptr": "*bf16:16",
        "stride_q_tok": "i32:16",
        "w_ptr": "*bf16:16",
        "stride_w_tok": "i32:16",
        "freqs_ptr": "*fp32:16",
        "stride_freq": "i32:16",
        "pos_ptr": "*i64:16",
        "q_out_ptr": "*bf16:16",
        "w_out_ptr": "*fp32:16",
        "n_work": "i32",
        "weight_scale": "fp32",
    },
}


def _checked_weight(weight: torch.Tensor, tokens: int, num_heads: int) -> torch.Tensor:
    """weight as [N, H] (bf16/fp16/fp32) with unit head stride."""
    check_tensor(
        "weight", weight, dtypes=(torch.bfloat16, torch.float16, torch.float32), ndim=(2, 3), last_dim_contiguous=False
    )
    if weight.dim() == 3:
        if weight.shape[2] != 1:
            raise ValueError(f"weight must be [N, {num_heads}] or [N, {num_heads}, 1], got {tuple(weight.shape)}")
        weight = weight[:, :, 0]
    if tuple(weight.shape) != (tokens, num_heads):
        raise ValueError(f"weight must be [{tokens}, {num_heads}] (one per token and head), got {tuple(weight.shape)}")
    if num_heads > 1 and weight.stride(1) != 1:
        raise ValueError(f"weight must have unit head stride, got strides {tuple(weight.stride())}")
    return weight


def _outputs(
    q: torch.Tensor, tokens: int, num_heads: int, q_out: torch.Tensor | None, weights_out: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The given outputs, checked, or new ones: q_out [N, H, 128] bf16, weights_out [N, H] fp32."""
    if q_out is None:
        q_out = torch.empty((tokens, num_heads, INDEX_HEAD_DIM), dtype=torch.bfloat16, device=q.device)
    else:
        check_tensor("q_out", q_out, dtypes=(torch.bfloat16,), ndim=(3,))
        if tuple(q_out.shape) != (tokens, num_heads, INDEX_HEAD_DIM) or not q_out.is_contiguous():
            raise ValueError(
                f"q_out must be contiguous [{tokens}, {num_heads}, {INDEX_HEAD_DIM}], got {tuple(q_out.shape)}"
            )
    if weights_out is None:
        weights_out = torch.empty((tokens, num_heads), dtype=torch.float32, device=q.device)
    else:
        check_tensor("weights_out", weights_out, dtypes=(torch.float32,), ndim=(2,))
        if tuple(weights_out.shape) != (tokens, num_heads) or not weights_out.is_contiguous():
            raise ValueError(
                f"weights_out must be contiguous [{tokens}, {num_heads}] fp32, got {tuple(weights_out.shape)}"
            )
    return q_out, weights_out


def index_q_rope_hadamard(
    q: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: float,
    freqs_cis: torch.Tensor,
    positions: torch.Tensor,
    *,
    num_heads: int = 64,
    q_out: torch.Tensor | None = None,
    weights_out: torch.Tensor | None = None,
    block_m: int,
    max_programs: int,
    prefetch: bool,
    one_token_tiles: bool = True,
    streaming: bool = False,
    num_warps: int,
    num_stages: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launcher; see the module docstring.

    q: [N, H*128] or [N, H, 128] bf16 (each token's H*128 values contiguous, any token
    stride) - ``wq_b(q_lora)``. weight: [N, H] or [N, H, 1] bf16/fp16/fp32, unit head stride,
    any token stride - ``weights_proj(x)`` before scaling. weight_scale: python float
    (``C4Indexer.weight_scale``). freqs_cis: complex64 [max_pos, 32] or fp32 [max_pos, 64].
    positions: [N] int32/int64, < max_pos (not range-checked: no host sync).
    Returns (q_out [N, H, 128] bf16 contiguous, weights_out [N, H] fp32 contiguous); pass
    ``q_out`` / ``weights_out`` to write into preallocated tensors of those shapes.
    ``max_programs`` caps the persistent grid (dispatch passes a few per SM); ``prefetch``
    loads tile i+1 during tile i; ``one_token_tiles`` (when block_m divides the heads) loads
    each tile's position and RoPE row once; ``streaming`` marks q's loads evict-first and q_out's
    stores streaming (``.cs``).
    """
    check_tensor("q", q, dtypes=(torch.bfloat16,), ndim=(2, 3))
    tokens = q.shape[0]
    if q.dim() == 2:
        if q.shape[1] != num_heads * INDEX_HEAD_DIM:
            raise ValueError(
                f"q must be [N, {num_heads * INDEX_HEAD_DIM}] or [N, {num_heads}, "
                f"{INDEX_HEAD_DIM}], got {tuple(q.shape)}"
            )
    else:
        if tuple(q.shape[1:]) != (num_heads, INDEX_HEAD_DIM):
            raise ValueError(
                f"q must be [N, {num_heads * INDEX_HEAD_DIM}] or [N, {num_heads}, "
                f"{INDEX_HEAD_DIM}], got {tuple(q.shape)}"
            )
        if q.stride(1) != INDEX_HEAD_DIM:
            raise ValueError(f"q heads must be contiguous (stride {INDEX_HEAD_DIM}), got strides {tuple(q.stride())}")
    weight = _checked_weight(weight, tokens, num_heads)
    if not isinstance(weight_scale, (int, float)):
        raise TypeError(f"weight_scale must be a python float, got {type(weight_scale).__name__}")
    table = as_rope_table(freqs_cis)
    positions = as_index_vector("positions", positions, tokens)
    q_out, weights_out = _outputs(q, tokens, num_heads, q_out, weights_out)
    check_same_device(q=q, weight=weight, freqs_cis=table, positions=positions, q_out=q_out, weights_out=weights_out)
    check_rows("positions", positions, tokens)
    n_work = tokens * num_heads
    if n_work == 0:
        return q_out, weights_out
    grid = (max(1, min(triton.cdiv(n_work, block_m), max_programs)),)
    index_q_rope_hadamard_kernel[grid](
        q,
        q.stride(0),
        weight,
        weight.stride(0),
        table,
        table.stride(0),
        positions,
        q_out,
        weights_out,
        n_work,
        float(weight_scale),
        H=num_heads,
        D=INDEX_HEAD_DIM,
        ROPE_DIM=INDEX_ROPE_DIM,
        BLOCK_M=block_m,
        PREFETCH=prefetch,
        ONE_TOKEN=one_token_tiles and num_heads % block_m == 0,
        STREAM=streaming,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return q_out, weights_out
