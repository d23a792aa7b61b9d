"""Which kernel computes the c4 indexer's logits over SGLang's stock fp8 index-K pool, and the router.

Why: stock SGLang on SM120 runs ``tilelang_fp8_paged_mqa_logits`` (``srt/arg_groups/model_hook.py`` sets
``SGLANG_OPT_USE_TILELANG_INDEXER`` and ``SGLANG_FP8_PAGED_MQA_LOGITS_TORCH`` there, and
``forward_c4_indexer`` tests the TileLang switch first) or, without TileLang, its torch path
``fp8_paged_mqa_logits_torch_sm120``. ``kernels_sm120.paged_mqa_logits_fp8`` reads the same pool as
stored and computes the same logits, faster at every decode shape measured from 8.7 MB of keys (1.5-1.6x from
64 MB) and on every mixed batch measured, 0.91x at one row of 2K-8K keys (kernels_sm120/NOTES.md, "fp8 logits",
"Interleaved parts for one row, fp8 key scales one tile ahead"). With ``SGLANG_DSV4_FP8_LOGITS=triton``
(the default) the indexer hook hands SGLang a router in place of those two functions for the call: it runs
ours when the arguments are what ours takes, else SGLang's own function, unchanged. The pool, its read gate
and the top-k are SGLang's; only the logits kernel changes.

``logits_kernel`` (the activation record's field) says which kernel runs: the one the last call took in
this process, or, before any call, the one the configuration chooses.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

from sglang_dsv4_ext.config import Fp8LogitsKernel, IndexKDtype

OURS = "kernels_sm120.paged_mqa_logits_fp8"
OURS_BF16 = "kernels_sm120.paged_mqa_logits_bf16"
FP4 = "SGLang's fp4 logits (deep_gemm.fp8_fp4_paged_mqa_logits)"

_LAST: dict[str, str] = {}
_LOCK = threading.Lock()


def outside_ours(
    q_fp8: torch.Tensor, kvcache_fp8: torch.Tensor, weight: torch.Tensor, clean_logits: bool
) -> str | None:
    """Why ours cannot take this call (None: it can). Checked on host-known shapes and dtypes only."""
    import torch

    if clean_logits:
        return "clean_logits=True (ours leaves columns past each row's length unwritten)"
    if q_fp8.dtype != torch.float8_e4m3fn or q_fp8.dim() != 4 or q_fp8.shape[1] != 1 or q_fp8.shape[3] != 128:
        return f"q {tuple(q_fp8.shape)} {q_fp8.dtype} (ours: [R, 1, H, 128] float8_e4m3fn)"
    heads = q_fp8.shape[2]
    if heads < 16 or heads & (heads - 1) or q_fp8.stride(2) != 128 or q_fp8.stride(3) != 1:
        return f"q heads {heads}, strides {tuple(q_fp8.stride())} (ours: a power of two >= 16, contiguous)"
    if kvcache_fp8.dtype != torch.uint8 or tuple(kvcache_fp8.shape[1:]) != (64, 1, 132):
        return f"index-K {tuple(kvcache_fp8.shape)} {kvcache_fp8.dtype} (ours: uint8 [pages, 64, 1, 132])"
    if kvcache_fp8.stride(3) != 1 or kvcache_fp8.stride(1) != 132 or kvcache_fp8.stride(0) % 16:
        return f"index-K strides {tuple(kvcache_fp8.stride())} (ours: contiguous 16-byte-aligned pages)"
    if weight.dtype != torch.float32 or weight.dim() != 2 or weight.stride(1) != 1:
        return f"weights {tuple(weight.shape)} {weight.dtype} (ours: [R, H] float32)"
    return None


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
        why = outside_ours(q_fp8, kvcache_fp8, weight, clean_logits)
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


def last_kernel() -> str | None:
    with _LOCK:
        return _LAST.get("kernel")


def planned_kernel(index_k_dtype: str, fp8_logits: str) -> str:
    """The kernel the configuration chooses (before any indexer call)."""
    if index_k_dtype == IndexKDtype.BF16:
        return OURS_BF16
    if index_k_dtype == IndexKDtype.FP4:
        return FP4
    if fp8_logits == Fp8LogitsKernel.SGLANG:
        return "SGLang's own fp8 logits (as stock: TileLang on SM120)"
    return f"{OURS} where SGLang would call its TileLang or torch fp8 logits, else SGLang's"


def logits_kernel(index_k_dtype: str, fp8_logits: str) -> str:
    """The activation record's ``logits_kernel``: what the last call ran, else what the configuration chooses."""
    if index_k_dtype != IndexKDtype.FP8:
        return planned_kernel(index_k_dtype, fp8_logits)
    last = last_kernel()
    return f"last call: {last}" if last else f"no indexer call yet: {planned_kernel(index_k_dtype, fp8_logits)}"
