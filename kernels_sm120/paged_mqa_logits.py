"""bf16 paged MQA logits for the DSV4 C4 indexer.

For each query row r and compressed key position t of its page table:

    logits[r, t] = sum_h relu(q[r, h, :] . k[t, :]) * w[r, h]      (fp32)
    k[t, :]      = index_k_cache[page_table[r, t // 64], t % 64, :]   (bf16)

for t < n_valid(r) = min(seq_lens[r], 64 * page_table.shape[1], max_seq_len); every other
column of the [rows, max_seq_len] output is -inf. That is the masking of SGLang's SM120
fp8 fallback ``fp8_paged_mqa_logits_torch_sm120`` (DeepGEMM / TileLang leave those
columns unwritten, the non-SM120 torch fallback writes 0.0): each top-k transform masks
by ``seq_lens`` itself, so -inf is safe for every consumer, and it is the only value that
cannot win a top-k. No k scale (bf16 keys).

Kernel: one program per (row, chunk of ``chunk`` key positions). It keeps the row's
q^T [128, H] and weights in registers/shared memory and walks the chunk BLOCK_N keys at
a time: gather BLOCK_N key rows through the page table (BLOCK_N/64 pages), one
``tl.dot`` [BLOCK_N, 128] x [128, H] (tensor cores: HMMA/mma.sync on SM80/SM120,
wgmma on SM90), ReLU, scale by w, sum over heads. Programs are ordered row-fastest so
the prefill rows of one request, which share their pages, read the same keys from L2.
Chunks beyond a row's length only write -inf.
"""

from typing import Optional

import torch
import triton
import triton.language as tl

from ._validate import (
    INDEX_HEAD_DIM,
    INDEX_PAGE_SIZE,
    as_index_k_pages,
    as_index_vector,
    check_same_device,
    check_tensor,
)


@triton.jit
def paged_mqa_logits_kernel(
    q_ptr,
    stride_q_row,
    k_ptr,
    stride_page,
    w_ptr,
    stride_w_row,
    seq_lens_ptr,
    page_table_ptr,
    stride_pt_row,
    pt_width,
    out_ptr,
    stride_out_row,
    max_len,
    chunk,
    H: tl.constexpr,
    D: tl.constexpr,
    PAGE: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0)
    chunk_id = tl.program_id(1)
    row64 = row.to(tl.int64)
    start = chunk_id * chunk
    end = tl.minimum(start + chunk, max_len)
    n_valid = tl.load(seq_lens_ptr + row)
    n_valid = tl.minimum(tl.maximum(n_valid, 0), tl.minimum(pt_width * PAGE, max_len))
    compute_end = tl.minimum(end, n_valid)
    out_row = out_ptr + row64 * stride_out_row
    offs_n = tl.arange(0, BLOCK_N)

    if start < compute_end:
        h = tl.arange(0, H)
        d = tl.arange(0, D)
        q = tl.load(q_ptr + row64 * stride_q_row + h[:, None] * D + d[None, :])
        q_t = tl.trans(q)  # [D, H]
        w = tl.load(w_ptr + row64 * stride_w_row + h)
        pt_row = page_table_ptr + row64 * stride_pt_row
        # Page ids are loaded one iteration ahead and carried: with the id load in the
        # same iteration as the key load, Triton's pipeliner treats the key load as
        # indirect and keeps a single key buffer whatever num_stages says.
        t = start + offs_n
        page = tl.load(pt_row + t // PAGE, mask=t < compute_end, other=0).to(tl.int64)
        for n0 in range(start, compute_end, BLOCK_N):
            t = n0 + offs_n
            valid = t < compute_end
            k = tl.load(
                k_ptr + page[:, None] * stride_page + (t % PAGE)[:, None] * D + d[None, :],
                mask=valid[:, None],
                other=0.0,
            )
            t_next = t + BLOCK_N
            page = tl.load(pt_row + t_next // PAGE, mask=t_next < compute_end, other=0).to(tl.int64)
            s = tl.dot(k, q_t)  # [BLOCK_N, H] fp32
            s = tl.maximum(s, 0.0) * w[None, :]
            logit = tl.sum(s, axis=1)
            logit = tl.where(valid, logit, float("-inf"))
            tl.store(out_row + t, logit, mask=t < end)
        fill_start = start + tl.cdiv(compute_end - start, BLOCK_N) * BLOCK_N
    else:
        fill_start = start
    neg_inf = tl.full([BLOCK_N], float("-inf"), tl.float32)
    for n0 in range(fill_start, end, BLOCK_N):
        t = n0 + offs_n
        tl.store(out_row + t, neg_inf, mask=t < end)


AOT_SIGNATURES = {
    "paged_mqa_logits_kernel": {
        "q_ptr": "*bf16:16",
        "stride_q_row": "i32:16",
        "k_ptr": "*bf16:16",
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
        "chunk": "i32",
    },
}


def pick_chunk(rows: int, max_len: int, block_n: int, num_sms: int, max_chunk: int) -> int:
    """Keys per program: the largest multiple of block_n (<= max_chunk) that still gives
    about 4 programs per SM, so a few long rows (decode) spread over the whole chip while
    many rows (prefill) keep long chunks and reload q rarely."""
    chunk = max_chunk
    while chunk > block_n and rows * triton.cdiv(max_len, chunk) < 4 * num_sms:
        chunk //= 2
    return max(block_n, chunk // block_n * block_n)


def paged_mqa_logits(
    q: torch.Tensor,
    index_k_cache: torch.Tensor,
    weights: torch.Tensor,
    seq_lens: torch.Tensor,
    page_table: torch.Tensor,
    max_seq_len: int,
    *,
    out: Optional[torch.Tensor] = None,
    block_n: int,
    max_chunk: int,
    num_sms: int,
    num_warps: int,
    num_stages: int,
) -> torch.Tensor:
    """Launcher; see the module docstring.

    q: [R, H, 128] or [R, 1, H, 128] bf16 (SGLang passes ``q_indexer.unsqueeze(1)``), each
    row's H*128 values contiguous. index_k_cache: the layer's bf16 index-K pages (see
    ``_validate.as_index_k_pages``; page size 64). weights: [R, H] or [R, H, 1] fp32, unit
    head stride. seq_lens: [R] or [R, 1] int32/int64 (compressed lengths). page_table:
    [R, W] int32/int64 page ids, unit column stride; entries at or beyond a row's
    ceil(n_valid/64) are never read. max_seq_len: python int, the output width.
    Returns fp32 [R, max_seq_len] (or fills ``out`` of that shape, unit column stride).
    """
    check_tensor("q", q, dtypes=(torch.bfloat16,), ndim=(3, 4))
    if q.dim() == 4:
        if q.shape[1] != 1:
            raise ValueError(f"q must be [R, H, 128] or [R, 1, H, 128] (next_n folded into rows), got {tuple(q.shape)}")
        q = q[:, 0]
    rows, num_heads, head_dim = q.shape
    if head_dim != INDEX_HEAD_DIM:
        raise ValueError(f"q head dim must be {INDEX_HEAD_DIM}, got {tuple(q.shape)}")
    if num_heads < 16 or num_heads & (num_heads - 1):
        raise ValueError(f"q heads must be a power of two >= 16 (tensor-core tile), got {num_heads}")
    if q.stride(1) != head_dim:
        raise ValueError(f"q heads must be contiguous, got strides {tuple(q.stride())}")
    pages = as_index_k_pages("index_k_cache", index_k_cache, page_size=INDEX_PAGE_SIZE)
    check_tensor("weights", weights, dtypes=(torch.float32,), ndim=(2, 3), last_dim_contiguous=False)
    if weights.dim() == 3:
        if weights.shape[2] != 1:
            raise ValueError(f"weights must be [R, H] or [R, H, 1], got {tuple(weights.shape)}")
        weights = weights[:, :, 0]
    if tuple(weights.shape) != (rows, num_heads):
        raise ValueError(f"weights must be [{rows}, {num_heads}] fp32, got {tuple(weights.shape)}")
    if weights.stride(1) != 1:
        raise ValueError(f"weights must have unit head stride, got strides {tuple(weights.stride())}")
    seq_lens = as_index_vector("seq_lens", seq_lens, rows)
    if seq_lens.dtype != torch.int32:
        seq_lens = seq_lens.to(torch.int32)
    check_tensor("page_table", page_table, dtypes=(torch.int32, torch.int64), ndim=(2,))
    if page_table.shape[0] != rows:
        raise ValueError(f"page_table must have {rows} rows (one per query row), got {tuple(page_table.shape)}")
    if not isinstance(max_seq_len, int) or max_seq_len < 0:
        raise ValueError(f"max_seq_len must be a non-negative python int, got {max_seq_len!r}")
    if out is None:
        out = torch.empty((rows, max_seq_len), dtype=torch.float32, device=q.device)
    else:
        check_tensor("out", out, dtypes=(torch.float32,), ndim=(2,))
        if tuple(out.shape) != (rows, max_seq_len):
            raise ValueError(f"out must be [{rows}, {max_seq_len}] fp32, got {tuple(out.shape)}")
    check_same_device(q=q, index_k_cache=pages, weights=weights, seq_lens=seq_lens, page_table=page_table, out=out)
    if rows == 0 or max_seq_len == 0:
        return out
    chunk = pick_chunk(rows, max_seq_len, block_n, num_sms, max_chunk)
    grid = (rows, triton.cdiv(max_seq_len, chunk))
    paged_mqa_logits_kernel[grid](
        q, q.stride(0), pages, pages.stride(0), weights, weights.stride(0), seq_lens,
        page_table, page_table.stride(0), page_table.shape[1], out, out.stride(0),
        max_seq_len, chunk,
        H=num_heads, D=head_dim, PAGE=INDEX_PAGE_SIZE, BLOCK_N=block_n,
        num_warps=num_warps, num_stages=num_stages,
    )
    return out
