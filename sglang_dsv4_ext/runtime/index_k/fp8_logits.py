"""Which kernel computes the c4 indexer's logits over SGLang's stock fp8 and fp4 index-K pools, and the routers.

fp8. Stock SGLang on SM120 runs ``tilelang_fp8_paged_mqa_logits`` (``srt/arg_groups/model_hook.py`` sets
``SGLANG_OPT_USE_TILELANG_INDEXER`` and ``SGLANG_FP8_PAGED_MQA_LOGITS_TORCH`` there, and
``forward_c4_indexer`` tests the TileLang switch first) or, without TileLang, its torch path
``fp8_paged_mqa_logits_torch_sm120``. ``kernels_sm120.paged_mqa_logits_fp8`` reads the same pool as
stored and computes the same logits: faster than TileLang at every decode shape measured from 8.7 MB of keys
(from 64 MB 1.53-1.65x on an H200 over two runs, 1.32-1.44x on an H100; never run on an SM120 card) and on every
mixed batch measured; at a few rows of a short context within 2% of TileLang or slower (:data:`TILELANG_FASTER`,
where the router hands TileLang the call), and under SGLang's decode CUDA graph at one row of 8K keys 0.96-0.99x,
which the router cannot see (the graph's page table has the captured width). With
``SGLANG_DSV4_FP8_LOGITS=triton`` (the default) the indexer hook hands SGLang a router in place of those two
functions for the call: it runs ours when the arguments are what ours takes and the call is not one where TileLang
measured within 2% of ours or faster, else SGLang's own function, unchanged.

fp4 (``--enable-deepseek-v4-fp4-indexer``). ``forward_c4_indexer`` raises ``DeepSeek V4 FP4 indexer requires
DeepGEMM indexer.`` while SGLang's TileLang switch is on, which SM120's defaults turn on: stock SM120 cannot
run the fp4 indexer as configured. With ``SGLANG_DSV4_FP4_LOGITS=triton`` (the default), in exactly those
calls, the hook turns the switch off for the call and stands :func:`fp4_router` in for DeepGEMM's
``fp8_fp4_paged_mqa_logits``: ``kernels_sm120.paged_mqa_logits_fp4`` where the arguments are what it takes,
else DeepGEMM's own function (SGLang's DeepGEMM has an SM120 fp4 kernel, never run here). Where the operator
turned the switch off (``SGLANG_OPT_USE_TILELANG_INDEXER=0``), SGLang runs DeepGEMM's kernel as stock does.

The pool, its read gate and the top-k are SGLang's; only the logits kernel changes. ``logits_kernel`` (the
activation record's field) says which kernel runs: the one the last call took in this process, or, before any
call, the one the configuration chooses.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import torch

from sglang_dsv4_ext.config import Fp4LogitsKernel, Fp8LogitsKernel, IndexKDtype
from sglang_dsv4_ext.runtime.index_k.dtype import index_k_bytes_per_token

OURS = "kernels_sm120.paged_mqa_logits_fp8"
OURS_BF16 = "kernels_sm120.paged_mqa_logits_bf16"
OURS_FP4 = "kernels_sm120.paged_mqa_logits_fp4"
FP4 = "SGLang's fp4 logits (deep_gemm.fp8_fp4_paged_mqa_logits)"
TILELANG = "tilelang_fp8_paged_mqa_logits"  # the name SGLang's TileLang fp8 logits is routed under

# Where SGLang's TileLang fp8 logits measured faster than ours or within 2% of it: (at most this many query rows, a page
# table reaching at most this many keys, i.e. width x 64), with the page table as wide as the longest row (what SGLang
# passes in eager decode and extend; ``python -m benchmarks.kernels_fp8 --crossover-only``). Measured on an NVIDIA
# H100, 2026-12-07, with two to eight rows on the interleaved tiling of one row (kernels_sm120/NOTES.md, "fp8 few rows
# interleaved"), TileLang's time / ours at each edge and one step past it: 1 x 16K 0.99, 1 x 24K 1.11; 2 x 8K 1.00,
# 2 x 16K 1.08; 4 x 2K 1.00, 4 x 8K 1.08; 8 x 2K 0.98, 8 x 8K 1.15 (3 and 5-7 rows not measured: they take the tier
# of the next row count up). Under SGLang's decode CUDA graph the
# width is the captured one (262144 keys for 1M tokens), so graphed decode always runs ours.
TILELANG_FASTER = ((1, 16384), (2, 8192), (8, 2048))

_LAST: dict[str, str] = {}
_LOCK = threading.Lock()


def outside_ours(
    q_fp8: torch.Tensor, kvcache_fp8: torch.Tensor, weight: torch.Tensor, clean_logits: bool
) -> str | None:
    """Why ours cannot take this call (None: it can). Checked on host-known shapes and dtypes only."""
    import torch

    if clean_logits:
        return _CLEAN_LOGITS
    return (
        _q_outside(q_fp8, "q", torch.float8_e4m3fn, 128)
        or _pool_outside(kvcache_fp8, FP8_ROW_BYTES)
        or _weights_outside(weight)
    )


_CLEAN_LOGITS = "clean_logits=True (ours leaves columns past each row's length unwritten)"
# A token's index-K row in SGLang's pools at the DeepSeek-V4 head dim: fp8 132 B, fp4 68 B.
FP8_ROW_BYTES = index_k_bytes_per_token(IndexKDtype.FP8, 128)
FP4_ROW_BYTES = index_k_bytes_per_token(IndexKDtype.FP4, 128)


def _q_outside(q: torch.Tensor, name: str, dtype: torch.dtype, head_dim: int) -> str | None:
    """Why ours cannot take these queries: ``[R, 1, H, head_dim]`` of ``dtype``, H a power of two >= 16."""
    dtype_name = str(dtype).removeprefix("torch.")
    if q.dtype != dtype or q.dim() != 4 or q.shape[1] != 1 or q.shape[3] != head_dim:
        return f"{name} {tuple(q.shape)} {q.dtype} (ours: [R, 1, H, {head_dim}] {dtype_name})"
    heads = q.shape[2]
    if heads < 16 or heads & (heads - 1) or q.stride(2) != head_dim or q.stride(3) != 1:
        return f"q heads {heads}, strides {tuple(q.stride())} (ours: a power of two >= 16, contiguous)"
    return None


def _pool_outside(kv_cache: torch.Tensor, row_bytes: int) -> str | None:
    """Why ours cannot read this index-K pool: uint8 ``[pages, 64, 1, row_bytes]``, pages 16-byte aligned."""
    import torch

    if kv_cache.dtype != torch.uint8 or tuple(kv_cache.shape[1:]) != (64, 1, row_bytes):
        return f"index-K {tuple(kv_cache.shape)} {kv_cache.dtype} (ours: uint8 [pages, 64, 1, {row_bytes}])"
    if kv_cache.stride(3) != 1 or kv_cache.stride(1) != row_bytes or kv_cache.stride(0) % 16:
        return f"index-K strides {tuple(kv_cache.stride())} (ours: contiguous 16-byte-aligned pages)"
    return None


def _weights_outside(weights: torch.Tensor) -> str | None:
    import torch

    if weights.dtype != torch.float32 or weights.dim() != 2 or weights.stride(1) != 1:
        return f"weights {tuple(weights.shape)} {weights.dtype} (ours: [R, H] float32)"
    return None


def tilelang_faster(name: str, q_fp8: torch.Tensor, page_table: torch.Tensor) -> str | None:
    """Why SGLang's ``name`` takes this call (TileLang measured within 2% of ours or faster there; None: it does
    not), from host-known shapes."""
    if name != TILELANG:
        return None  # SGLang's torch path is 20-120x slower than TileLang at every shape measured
    rows, keys = q_fp8.shape[0], page_table.shape[1] * 64
    for max_rows, max_keys in TILELANG_FASTER:
        if rows <= max_rows and keys <= max_keys:
            return f"{rows} row(s) of at most {keys} keys: TileLang measured within 2% of ours or faster ({_tiers()})"
    return None


def _tiers() -> str:
    return ", ".join(f"<= {rows} rows x {keys} keys" for rows, keys in TILELANG_FASTER)


def _note(kernel: str) -> None:
    with _LOCK:
        _LAST["kernel"] = kernel


def router(name: str, original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """A function with SGLang's fp8 logits signature that runs ours where it can, else ``original``."""

    def fp8_paged_mqa_logits(
        q_fp8: torch.Tensor,
        kvcache_fp8: torch.Tensor,
        weight: torch.Tensor,
        seq_lens: torch.Tensor,
        page_table: torch.Tensor,
        deep_gemm_metadata: Any,
        max_seq_len: int,
        clean_logits: bool = True,
    ) -> torch.Tensor:
        why = outside_ours(q_fp8, kvcache_fp8, weight, clean_logits) or tilelang_faster(name, q_fp8, page_table)
        if why is None:
            import kernels_sm120

            _note(OURS)
            return kernels_sm120.paged_mqa_logits_fp8(q_fp8, kvcache_fp8, weight, seq_lens, page_table, max_seq_len)
        _note(f"SGLang's {name} ({why})")
        return original(
            q_fp8, kvcache_fp8, weight, seq_lens, page_table, deep_gemm_metadata, max_seq_len, clean_logits=clean_logits
        )

    fp8_paged_mqa_logits.__wrapped__ = original  # type: ignore[attr-defined]
    return fp8_paged_mqa_logits


def outside_ours_fp4(q: object, kv_cache: torch.Tensor, weights: torch.Tensor, clean_logits: bool) -> str | None:
    """Why ``kernels_sm120.paged_mqa_logits_fp4`` cannot take this call (None: it can): host-known shapes only."""
    import torch

    if clean_logits:
        return _CLEAN_LOGITS
    if not isinstance(q, (tuple, list)) or len(q) != 2:
        return "q is not (q_fp4, q_sf) (ours: SGLang's fp4 q with its ue8m0 exponents)"
    q_fp4, q_sf = q
    why = _q_outside(q_fp4, "q_fp4", torch.int8, 64)
    if why is None and (q_sf.dtype != torch.int32 or tuple(q_sf.shape) != (q_fp4.shape[0], 1, q_fp4.shape[2])):
        why = f"q_sf {tuple(q_sf.shape)} {q_sf.dtype} (ours: [R, 1, H] int32)"
    return why or _pool_outside(kv_cache, FP4_ROW_BYTES) or _weights_outside(weights)


def fp4_router(original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """A function with DeepGEMM's ``fp8_fp4_paged_mqa_logits`` signature that runs ours where it can, else
    ``original``."""

    def fp8_fp4_paged_mqa_logits(
        q: object,
        kv_cache: torch.Tensor,
        weights: torch.Tensor,
        context_lens: torch.Tensor,
        block_table: torch.Tensor,
        schedule_meta: Any,
        max_context_len: int,
        clean_logits: bool = False,
        logits_dtype: torch.dtype | None = None,
        indices: torch.Tensor | None = None,
    ) -> torch.Tensor:
        import torch

        why = outside_ours_fp4(q, kv_cache, weights, clean_logits)
        if why is None and logits_dtype not in (None, torch.float32):
            why = f"logits_dtype {logits_dtype} (ours: float32)"
        if why is None and indices is not None:
            why = "indices given (ours: the page table's keys in order)"
        if why is None:
            import kernels_sm120

            _note(OURS_FP4)
            q_fp4, q_sf = cast("tuple[torch.Tensor, torch.Tensor]", q)  # outside_ours_fp4 checked the pair
            return kernels_sm120.paged_mqa_logits_fp4(
                q_fp4, q_sf, kv_cache, weights, context_lens, block_table, max_context_len
            )
        _note(f"SGLang's deep_gemm.fp8_fp4_paged_mqa_logits ({why})")
        kwargs: dict[str, object] = {} if logits_dtype is None else {"logits_dtype": logits_dtype}
        if indices is not None:
            kwargs["indices"] = indices
        return original(
            q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, clean_logits, **kwargs
        )

    fp8_fp4_paged_mqa_logits.__wrapped__ = original  # type: ignore[attr-defined]
    return fp8_fp4_paged_mqa_logits


def last_kernel() -> str | None:
    with _LOCK:
        return _LAST.get("kernel")


def planned_kernel(index_k_dtype: str, fp8_logits: str, fp4_logits: str) -> str:
    """The kernel the configuration chooses (before any indexer call)."""
    if index_k_dtype == IndexKDtype.BF16:
        return OURS_BF16
    if index_k_dtype == IndexKDtype.FP4:
        if fp4_logits == Fp4LogitsKernel.SGLANG:
            return f"{FP4}; SGLang raises at the first call while its TileLang switch is on (SM120's default)"
        return f"{OURS_FP4} where SGLang's TileLang switch is on (SM120's default: SGLang would raise), else {FP4}"
    if fp8_logits == Fp8LogitsKernel.SGLANG:
        return "SGLang's own fp8 logits (as stock: TileLang on SM120)"
    return (
        f"{OURS} where SGLang would call its TileLang or torch fp8 logits, except where TileLang measured within 2% "
        f"of ours or faster ({_tiers()} of page table), else SGLang's"
    )


def logits_kernel(index_k_dtype: str, fp8_logits: str, fp4_logits: str) -> str:
    """The activation record's ``logits_kernel``: what the last call ran, else what the configuration chooses."""
    planned = planned_kernel(index_k_dtype, fp8_logits, fp4_logits)
    if index_k_dtype == IndexKDtype.BF16:
        return planned
    last = last_kernel()
    return f"last call: {last}" if last else f"no indexer call yet: {planned}"
