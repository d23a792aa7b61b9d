"""SM120-ready Triton kernels for DeepSeek-V4's bf16 index-K path (SM90, SM100, SM120).

Importing this package touches no GPU; each call picks its launch configuration from
the device of its tensors (``dispatch.configs_for``). All launchers are CUDA-graph
capturable (no host syncs) and validate shapes, dtypes and layouts, raising
``TypeError`` / ``ValueError`` that name the argument. They do not range-check values
held on the device (slots, positions, page ids): those must be in range.

Index-K cache layout (one tensor per C4 layer): 64 compressed slots per page, each a
bf16 row of 128. Accepted as the pool's uint8 page rows ``[num_pages, 64 * 256]``, or
bf16 ``[num_pages, 8192]`` / ``[num_pages, 64, 128]`` / ``[num_pages, 64, 1, 128]``.
Slot ``s`` is page ``s // 64``, row ``s % 64``. Each page must be contiguous.

Public functions
----------------
``store_index_k_bf16(kv, norm_weight, norm_eps, freqs_cis, positions, out_loc, index_k_cache)``
    The compressor's pooled rows -> RMSNorm -> RoPE (last 64) -> Hadamard -> bf16 scatter.
    kv          [N, 128] bf16 (fp16/fp32 accepted), last dim contiguous
    norm_weight [128] fp32 or bf16 (SGLang's JIT store casts it to the kv dtype first)
    norm_eps    python float
    freqs_cis   complex64 [max_pos, 32] (SGLang's table) or fp32 [max_pos, 64]
                (``view_as_real(...).flatten(-2)``: cos0, sin0, cos1, sin1, ...)
    positions   [N] int32/int64: RoPE position of each row (SGLang: seq_len - 4)
    out_loc     [N] int32/int64 slots; rows with a negative slot are skipped (their
                position is never read, so it may be anything)
    Returns None (writes the cache in place).

``scatter_index_k_bf16(rows_bf16, out_loc, index_k_cache)``
    rows_bf16 [N, 128] bf16 already transformed; out_loc as above. Returns None.

``index_q_bf16(q, weight, weight_scale, freqs_cis, positions, num_heads=64)``
    q         [N, H*128] or [N, H, 128] bf16 (``wq_b(q_lora)``), per-token contiguous
    weight    [N, H] or [N, H, 1] bf16/fp16/fp32 (``weights_proj(x)``, unscaled)
    weight_scale python float (``C4Indexer.weight_scale``)
    positions [N] int32/int64
    Returns (q_out [N, H, 128] bf16 after RoPE + Hadamard, weights_out [N, H] fp32 =
    weight * weight_scale). SGLang's ``compute_q`` returns weights as [N, H, 1]:
    ``weights_out.unsqueeze(-1)``.

``paged_mqa_logits_bf16(q, index_k_cache, weights, seq_lens, page_table, max_seq_len)``
    q          [R, H, 128] or [R, 1, H, 128] bf16
    weights    [R, H] or [R, H, 1] fp32
    seq_lens   [R] or [R, 1] int32/int64 compressed lengths
    page_table [R, W] int32/int64 index-K page ids (unit column stride)
    max_seq_len python int (SGLang: ``indexer_metadata.max_compressed_seq_len``)
    Returns fp32 [R, max_seq_len]: sum_h relu(q[r,h].k[t]) * w[r,h] for
    t < min(seq_lens[r], 64 * W, max_seq_len), -inf for t in [64 * W, seq_lens[r]);
    columns t >= seq_lens[r] are NOT written (SGLang's top-k transforms never read
    them; see ``paged_mqa_logits`` for the contract and the test that checks it with
    SGLang's own transform). Row chunking stays with the caller (SGLang's
    ``iter_row_chunks``); the kernel takes any number of rows.

``paged_mqa_logits_fp8(q_fp8, kvcache_fp8, weights, seq_lens, page_table, max_seq_len)``
    SGLang's fp8 index-K pool as stored and its fp8 q: the arguments of SGLang's
    ``fp8_paged_mqa_logits_torch_sm120`` / ``tilelang_fp8_paged_mqa_logits``.
    q_fp8       [R, 1, H, 128] or [R, H, 128] float8_e4m3fn
    kvcache_fp8 uint8 [num_pages, 64, 1, 132] (per page: 64 rows of 128 e4m3 values, then
                64 fp32 scales) or [num_pages, 8448]
    Returns fp32 [R, max_seq_len]: sum_h relu(q[r,h].v[t]) * w[r,h] * scale[t], with the
    output contract of ``paged_mqa_logits_bf16``.

``paged_mqa_logits_fp4(q_fp4, q_sf, kvcache_fp4, weights, seq_lens, page_table, max_seq_len)``
    SGLang's fp4 index-K pool as stored (``--enable-deepseek-v4-fp4-indexer``) and its fp4 q: the
    arguments ``forward_c4_indexer`` hands DeepGEMM's ``fp8_fp4_paged_mqa_logits``.
    q_fp4       [R, 1, H, 64] or [R, H, 64] int8 (two e2m1 codes per byte, element 2i low)
    q_sf        [R, 1, H] or [R, H] int32 (the ue8m0 exponents of the head's four 32-value groups)
    kvcache_fp4 uint8 [num_pages, 64, 1, 68] (per page: 64 x 64 payload bytes, then 64 x 4
                exponent bytes) or [num_pages, 4352]
    Returns fp32 [R, max_seq_len] of the dequantized values, with the output contract of
    ``paged_mqa_logits_bf16``.

Also: ``reference`` (float64 references, fp8 quantize-dequantize, ``topk_set_recall``),
``dispatch.CONFIGS`` (per-arch configurations), ``python -m kernels_sm120.aot``
(ahead-of-time compile for sm_120a/sm_100a/sm_90a, shared memory and HMMA check) and
``python -m benchmarks.kernels`` (GPU correctness + bandwidth benchmark, repository root).
"""

from .dispatch import (
    CONFIGS,
    index_q_bf16,
    paged_mqa_logits_bf16,
    paged_mqa_logits_fp8,
    scatter_index_k_bf16,
    store_index_k_bf16,
)
from .paged_logits_fp4 import paged_mqa_logits_fp4

__all__ = [
    "CONFIGS",
    "index_q_bf16",
    "paged_mqa_logits_bf16",
    "paged_mqa_logits_fp4",
    "paged_mqa_logits_fp8",
    "scatter_index_k_bf16",
    "store_index_k_bf16",
]
