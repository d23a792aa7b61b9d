"""Torch references for the bf16 index-K kernels.

Two kinds:
  * ``*_reference``: float64, the ground truth the kernels are checked against (METHOD.md:
    ||out - ref|| / ||ref|| with bf16 operands lands between 1e-3 and 1e-2).
  * ``*_torch``: the vectorized bf16/fp32 torch code SGLang would run without a kernel
    (modelled on ``fp8_paged_mqa_logits_torch_sm120`` and ``_forward_unified_hip``); the
    benchmark's speed baseline.

Plus the fp8 recall study: SGLang's index-K fp8 format quantize -> dequantize
(per-row fp32 scale ``max(1e-4, amax) / 448``, e4m3), and ``topk_set_recall``.
Nothing here needs a GPU or SGLang.
"""

import torch

FP8_E4M3_MAX = 448.0
PAGE = 64


def hadamard_matrix(
    n: int, dtype: torch.dtype = torch.float64, device: torch.device | str | None = None
) -> torch.Tensor:
    """Sylvester Hadamard matrix H_n (entries +-1, natural order), n a power of two."""
    if n < 1 or n & (n - 1):
        raise ValueError(f"n must be a power of two, got {n}")
    h = torch.ones((1, 1), dtype=dtype, device=device)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def rope_tail_reference(x: torch.Tensor, freqs_cis: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """RoPE on the last ``2 * freqs_cis.shape[1]`` dims, pairs (2k, 2k+1) = (real, imag)."""
    x = x.to(torch.float64).clone()
    f = _freqs_complex128(freqs_cis)[positions.long()]  # [N, R/2]
    rope_dim = 2 * f.shape[-1]
    tail = x[..., -rope_dim:].reshape(*x.shape[:-1], rope_dim // 2, 2)
    z = torch.complex(tail[..., 0], tail[..., 1])
    while f.dim() < z.dim():
        f = f.unsqueeze(-2)  # broadcast over heads for q [N, H, R/2]
    z = z * f
    x[..., -rope_dim:] = torch.stack([z.real, z.imag], -1).reshape(*x.shape[:-1], rope_dim)
    return x


def _freqs_complex128(freqs_cis: torch.Tensor) -> torch.Tensor:
    if freqs_cis.is_complex():
        return freqs_cis.to(torch.complex128)
    pairs = freqs_cis.to(torch.float64).reshape(freqs_cis.shape[0], -1, 2)
    return torch.complex(pairs[..., 0], pairs[..., 1])


def index_k_transform_reference(
    kv: torch.Tensor,
    norm_weight: torch.Tensor,
    norm_eps: float,
    freqs_cis: torch.Tensor,
    positions: torch.Tensor,
) -> torch.Tensor:
    """float64 [N, 128]: RMSNorm(weight, eps) -> RoPE(last 64) -> Hadamard / sqrt(128)."""
    x = kv.to(torch.float64)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm_eps) * norm_weight.to(torch.float64)
    x = rope_tail_reference(x, freqs_cis, positions)
    d = x.shape[-1]
    return x @ hadamard_matrix(d, device=x.device) * d**-0.5  # type: ignore[no-any-return]  # int ** float: Any


def index_k_cache_as_rows(index_k_cache: torch.Tensor) -> torch.Tensor:
    """A bf16 index-K buffer (uint8 page rows or bf16) -> bf16 [num_pages * 64, 128] view."""
    buf = index_k_cache.view(torch.bfloat16) if index_k_cache.dtype == torch.uint8 else index_k_cache
    return buf.reshape(-1, 128)


def scatter_reference(index_k_cache: torch.Tensor, rows: torch.Tensor, out_loc: torch.Tensor) -> None:
    """cache[slot] = bf16(row) for slot >= 0, in place (slot s -> page s//64, row s%64)."""
    flat = index_k_cache_as_rows(index_k_cache)
    keep = out_loc >= 0
    flat[out_loc[keep].long()] = rows[keep].to(torch.bfloat16)


def index_q_reference(
    q: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: float,
    freqs_cis: torch.Tensor,
    positions: torch.Tensor,
    num_heads: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 (q [N, H, 128] after RoPE(last 64) + Hadamard, weights [N, H] * weight_scale)."""
    x = q.reshape(q.shape[0], num_heads, -1).to(torch.float64)
    x = rope_tail_reference(x, freqs_cis, positions)
    d = x.shape[-1]
    x = x @ hadamard_matrix(d, device=x.device) * d**-0.5
    w = weight.reshape(q.shape[0], num_heads).to(torch.float64) * weight_scale
    return x, w


def paged_mqa_logits_reference(
    q: torch.Tensor,
    index_k_rows: torch.Tensor,
    weights: torch.Tensor,
    seq_lens: torch.Tensor,
    page_table: torch.Tensor,
    max_seq_len: int,
) -> torch.Tensor:
    """float64 [R, max_seq_len]; -inf at t >= min(seq_len, 64 * table width, max_seq_len).

    q [R, H, 128]; index_k_rows [num_slots, 128] (``index_k_cache_as_rows``, or float64
    keys for the exact study); weights [R, H]; seq_lens [R]; page_table [R, W].
    """
    rows = q.shape[0]
    out = torch.full((rows, max_seq_len), float("-inf"), dtype=torch.float64, device=q.device)
    width = page_table.shape[1] * PAGE
    for r in range(rows):
        n = max(0, min(int(seq_lens.reshape(-1)[r]), width, max_seq_len))
        if n == 0:
            continue
        t = torch.arange(n, device=q.device)
        slots = page_table[r, t // PAGE].long() * PAGE + t % PAGE
        k = index_k_rows[slots].to(torch.float64)  # [n, 128]
        s = torch.relu(k @ q[r].to(torch.float64).T)  # [n, H]
        out[r, :n] = s @ weights[r].to(torch.float64)
    return out


def fp8_index_k_cache_as_rows(kvcache_fp8: torch.Tensor) -> torch.Tensor:
    """SGLang's fp8 index-K pages (uint8 [num_pages, 64, 1, 132] or [num_pages, 64 * 132]: per page
    64 rows of 128 e4m3 values, then 64 fp32 scales) -> float64 key rows [num_pages * 64, 128],
    each row's values times its scale (what ``fp8_paged_mqa_logits_torch_sm120`` multiplies by)."""
    pages = kvcache_fp8.reshape(kvcache_fp8.shape[0], PAGE * 132)
    values = pages[:, : PAGE * 128].contiguous().view(torch.float8_e4m3fn).to(torch.float64)
    scales = pages[:, PAGE * 128 :].contiguous().view(torch.float32).to(torch.float64)
    return (values.view(-1, PAGE, 128) * scales.view(-1, PAGE, 1)).view(-1, 128)


def fp8_index_k_pages(rows: torch.Tensor) -> torch.Tensor:
    """Key rows [num_pages * 64, 128] -> SGLang's fp8 pages uint8 [num_pages, 64, 1, 132] with its
    per-row scale ``max(1e-4, amax) / 448`` (the quantization of ``fp8_quant_dequant_rows``)."""
    x32 = rows.to(torch.float32)
    scale = torch.clamp(x32.abs().amax(-1, keepdim=True), min=1e-4) / FP8_E4M3_MAX
    values = (x32 * (1.0 / scale)).to(torch.float8_e4m3fn).view(torch.uint8).view(-1, PAGE * 128)
    scales = scale.view(-1, PAGE).contiguous().view(torch.uint8)
    return torch.cat([values, scales], dim=1).view(-1, PAGE, 1, 132)


def fp8_paged_mqa_logits_reference(
    q_fp8: torch.Tensor,
    kvcache_fp8: torch.Tensor,
    weights: torch.Tensor,
    seq_lens: torch.Tensor,
    page_table: torch.Tensor,
    max_seq_len: int,
) -> torch.Tensor:
    """float64 logits of SGLang's fp8 inputs (q e4m3 [R, 1, H, 128] or [R, H, 128], fp8 pages):
    ``sum_h relu(q_h . v) * w_h * scale`` computed as ``relu(q_h . (v * scale))`` (scale > 0)."""
    q = q_fp8.reshape(q_fp8.shape[0], -1, 128).to(torch.float64)
    rows = fp8_index_k_cache_as_rows(kvcache_fp8)
    return paged_mqa_logits_reference(q, rows, weights, seq_lens, page_table, max_seq_len)


E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # SGLang's DSV4_DEQUANT_FP4_TABLE, codes 0..7


def fp4_pack(codes: torch.Tensor, exponents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """e2m1 codes [..., 128] (uint8, sign in bit 3) and ue8m0 exponents [..., 4] -> SGLang's packed
    form: payload [..., 64] uint8 (element 2i in the low nibble, 2i+1 in the high one) and the four
    exponent bytes of each row [..., 4] uint8 (group g in byte g)."""
    c = codes.to(torch.uint8)
    payload = c[..., 0::2] | (c[..., 1::2] << 4)
    return payload, exponents.to(torch.uint8)


def fp4_index_k_pages(codes: torch.Tensor, exponents: torch.Tensor) -> torch.Tensor:
    """Key rows (codes [num_pages * 64, 128], exponents [num_pages * 64, 4]) -> SGLang's fp4 pages
    uint8 [num_pages, 64, 1, 68]: per page 64 x 64 payload bytes, then 64 x 4 exponent bytes (the
    layout ``DeepSeekV4IndexerPool.get_index_k_fp4`` reads)."""
    payload, exps = fp4_pack(codes, exponents)
    pages = torch.cat([payload.reshape(-1, PAGE * 64), exps.reshape(-1, PAGE * 4)], dim=1)
    return pages.view(-1, PAGE, 1, 68)


def fp4_q(codes: torch.Tensor, exponents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q (codes [R, H, 128], exponents [R, H, 4]) -> SGLang's ``(q_fp4 [R, 1, H, 64] int8,
    q_sf [R, 1, H] int32)`` (``quantize_fp4_indexer_tensor``'s output, unsqueezed by
    ``forward_c4_indexer``)."""
    payload, exps = fp4_pack(codes, exponents)
    sf = exps.contiguous().view(torch.int32)[..., 0]  # four bytes, little-endian: group g in byte g
    return payload.view(torch.int8).unsqueeze(1), sf.unsqueeze(1)


def fp4_values(codes: torch.Tensor, exponents: torch.Tensor) -> torch.Tensor:
    """float64 values [..., 128] of e2m1 codes [..., 128] with ue8m0 exponents [..., 4]."""
    table = torch.tensor(E2M1_VALUES, dtype=torch.float64, device=codes.device)
    magnitude = table[(codes & 0x7).long()]
    value = torch.where((codes & 0x8) != 0, -magnitude, magnitude)
    scale = torch.exp2(exponents.to(torch.float64) - 127).repeat_interleave(32, dim=-1)
    return value * scale


def fp8_quant_dequant_rows(x: torch.Tensor) -> torch.Tensor:
    """SGLang's index-K / index-Q fp8 format, round trip: per row (last dim) fp32 scale
    ``max(1e-4, amax) / 448``, values e4m3 of x / scale, dequantized back to fp32."""
    x32 = x.to(torch.float32)
    scale = torch.clamp(x32.abs().amax(-1, keepdim=True), min=1e-4) / FP8_E4M3_MAX
    q = (x32 * (1.0 / scale)).to(torch.float8_e4m3fn)
    return q.to(torch.float32) * scale


def topk_set_recall(
    logits: torch.Tensor,
    ref: torch.Tensor,
    k: int = 512,
    seq_lens: torch.Tensor | None = None,
) -> float:
    """Mean over rows of |topk(logits) & topk(ref)| / k_r, k_r = min(k, valid columns).

    Columns with ref == -inf are invalid. Rows with no more than k valid columns are
    skipped (SGLang takes all of them without reading the logits); returns nan if every
    row is skipped.
    """
    if logits.shape != ref.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and ref {tuple(ref.shape)} differ in shape")
    recalls = []
    for r in range(ref.shape[0]):
        valid = (
            torch.isfinite(ref[r])
            if seq_lens is None
            else (torch.arange(ref.shape[1], device=ref.device) < int(seq_lens.reshape(-1)[r]))
        )
        n = int(valid.sum())
        if n <= k:
            continue
        neg = torch.tensor(float("-inf"), dtype=torch.float64, device=ref.device)
        a = torch.where(valid, logits[r].to(torch.float64), neg).topk(k).indices
        b = torch.where(valid, ref[r].to(torch.float64), neg).topk(k).indices
        hit = torch.isin(a, b).sum().item()
        recalls.append(hit / k)
    return float("nan") if not recalls else sum(recalls) / len(recalls)


# ---------------------------------------------------------------------------
# Torch baselines (what SGLang would run with no kernel): speed comparison only.
# ---------------------------------------------------------------------------


def paged_mqa_logits_torch(
    q: torch.Tensor,
    index_k_cache: torch.Tensor,
    weights: torch.Tensor,
    seq_lens: torch.Tensor,
    page_table: torch.Tensor,
    max_seq_len: int,
    query_chunk: int = 1024,
) -> torch.Tensor:
    """``fp8_paged_mqa_logits_torch_sm120`` with bf16 keys and no k scale: gather the
    pages, bmm, ReLU, weight, sum; -inf past each row's length; 1024-row chunks."""
    if q.dim() == 4:
        q = q[:, 0]
    rows = q.shape[0]
    if rows > query_chunk:
        return torch.cat(
            [
                paged_mqa_logits_torch(
                    q[s : s + query_chunk],
                    index_k_cache,
                    weights[s : s + query_chunk],
                    seq_lens[s : s + query_chunk],
                    page_table[s : s + query_chunk],
                    max_seq_len,
                    query_chunk,
                )
                for s in range(0, rows, query_chunk)
            ]
        )
    pages = index_k_cache_as_rows(index_k_cache).view(-1, PAGE, 128)
    max_pages = (max_seq_len + PAGE - 1) // PAGE
    # Entries past a row's length may be padding (-1 or stale): clamp like SGLang does.
    k = pages[page_table[:, :max_pages].long().clamp(min=0)].reshape(rows, -1, 128)
    score = torch.bmm(k, q.transpose(1, 2))  # [R, T, H] bf16
    score = (torch.relu(score) * weights.unsqueeze(1)).sum(dim=2)  # fp32 [R, T]
    logits = score.new_full((rows, max_seq_len), float("-inf"))
    width = min(score.shape[1], max_seq_len)
    logits[:, :width] = score[:, :width]
    positions = torch.arange(max_seq_len, device=q.device)
    logits.masked_fill_(positions.unsqueeze(0) >= seq_lens.reshape(-1, 1), float("-inf"))
    return logits


def _rope_tail_fp32(x: torch.Tensor, freqs_cis: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The torch baselines' fp32 RoPE on the last 64 dims of ``x`` [N, 128] or [N, H, 128]
    (``rope_tail_reference`` is the float64 reference; this one stays in fp32 for timing)."""
    n = x.shape[0]
    f = (
        torch.view_as_real(freqs_cis[positions.long()])
        if freqs_cis.is_complex()
        else (freqs_cis[positions.long()].view(n, -1, 2))
    )
    f = f.view(n, *([1] * (x.dim() - 2)), 32, 2)  # broadcast over heads
    tail = x[..., 64:].reshape(*x.shape[:-1], 32, 2)
    re = tail[..., 0] * f[..., 0] - tail[..., 1] * f[..., 1]
    im = tail[..., 0] * f[..., 1] + tail[..., 1] * f[..., 0]
    return torch.cat([x[..., :64], torch.stack([re, im], -1).reshape(*x.shape[:-1], 64)], -1)


def store_index_k_torch(
    kv: torch.Tensor,
    norm_weight: torch.Tensor,
    norm_eps: float,
    freqs_cis: torch.Tensor,
    positions: torch.Tensor,
    out_loc: torch.Tensor,
    index_k_cache: torch.Tensor,
    hadamard: torch.Tensor | None = None,
) -> None:
    """fp32 torch: RMSNorm, RoPE, Hadamard (matmul), then a bf16 index scatter."""
    x = kv.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm_eps) * norm_weight.float()
    x = _rope_tail_fp32(x, freqs_cis, positions)
    h = hadamard if hadamard is not None else hadamard_matrix(128, torch.float32, kv.device)
    y = (x @ h) * 128**-0.5
    scatter_reference(index_k_cache, y, out_loc)


def index_q_torch(
    q: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: float,
    freqs_cis: torch.Tensor,
    positions: torch.Tensor,
    num_heads: int = 64,
    hadamard: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 torch: RoPE on the last 64, Hadamard (matmul), bf16 q; weights * scale."""
    x = _rope_tail_fp32(q.reshape(q.shape[0], num_heads, 128).float(), freqs_cis, positions)
    h = hadamard if hadamard is not None else hadamard_matrix(128, torch.float32, q.device)
    y = ((x @ h) * 128**-0.5).to(torch.bfloat16)
    return y, weight.reshape(q.shape[0], num_heads).float() * weight_scale
