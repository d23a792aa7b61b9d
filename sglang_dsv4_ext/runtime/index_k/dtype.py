"""Index-K facts shared by every hook area: bytes per token, the dtype in force, bf16 page views.

Decided per call (or at pool creation), never at import: each function reads the configuration
or inspects the pool it is given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang_dsv4_ext.config import ENV_INDEX_K_DTYPE, IndexKDtype, load_config
from sglang_dsv4_ext.errors import ConfigError

if TYPE_CHECKING:
    import torch


def index_k_bytes_per_token(dtype: str, index_head_dim: int) -> int:
    """Bytes one compressed index-K token occupies, for each supported dtype.

    fp8: e4m3 values + one fp32 scale per 128 values (SGLang's layout, 132 B at d=128);
    fp4: e2m1 values + one ue8m0 byte per 32 values (68 B); bf16: 2 bytes per value, no
    scale (256 B).
    """
    if dtype == IndexKDtype.FP8:
        return index_head_dim + index_head_dim // 128 * 4
    if dtype == IndexKDtype.FP4:
        return index_head_dim // 2 + index_head_dim // 32
    if dtype == IndexKDtype.BF16:
        return 2 * index_head_dim
    raise ValueError(f"index-K dtype {dtype!r} is not one of 'fp8', 'bf16', 'fp4'")


def sglang_fp4_indexer_enabled() -> bool | None:
    """``--enable-deepseek-v4-fp4-indexer`` in this process, or None if no server args are published."""
    try:
        from sglang.srt.runtime_context import get_exec

        return bool(get_exec().kernel.enable_deepseek_v4_fp4_indexer)
    except Exception:  # the config namespace is not published in this process
        return None


def effective_index_k_dtype(use_fp4_indexer: bool = False) -> str:
    """The index-K dtype this process stores, reconciling our variable with SGLang's flag.

    ``use_fp4_indexer=True`` is SGLang asking about an fp4 pool (its own fp4 indexer or
    the V4.1 low-ratio pools, which are always fp4). fp8 asked for with SGLang's fp4 flag gives fp4 (the flag
    decides SGLang's pool): the evidence reports the dtype built (:func:`pool_index_k_dtype`) beside the
    one asked for, and the pool hook logs the difference.
    """
    if use_fp4_indexer:
        return IndexKDtype.FP4
    wanted = load_config().index_k_dtype
    sglang_fp4 = sglang_fp4_indexer_enabled()
    if sglang_fp4 and wanted == IndexKDtype.BF16:
        raise ConfigError(
            f"{ENV_INDEX_K_DTYPE}=bf16 contradicts --enable-deepseek-v4-fp4-indexer; choose one index-K dtype"
        )
    if wanted == IndexKDtype.FP4 and sglang_fp4 is False:
        raise ConfigError(
            f"{ENV_INDEX_K_DTYPE}=fp4 means SGLang's own fp4 indexer: also pass --enable-deepseek-v4-fp4-indexer"
        )
    if sglang_fp4:
        return IndexKDtype.FP4
    return wanted


def stores_bf16_index_k(pool: object) -> bool:
    """True for the bf16 c4 indexer pool the pool hook builds (it says so in ``index_k_dtype``).

    The one question "is index-K bf16 here?" of a built pool; the hooks ask it of the pool they reach
    (``runtime/hooks/hicache.py``: ``_kvcache_stores_bf16_index_k``, ``runtime/hooks/indexer.py``:
    ``backend_stores_bf16_index_k``). ``ExtConfig.bf16_index_k`` is a different question: what the
    configuration asks for, before any pool exists (a V4.1 low-ratio pool stays fp4 whatever it says).
    """
    return getattr(pool, "index_k_dtype", None) == IndexKDtype.BF16


def pool_index_k_dtype(pool: object) -> str:
    """The index-K dtype a built c4 indexer pool stores: what the evidence reports, whatever was asked."""
    if stores_bf16_index_k(pool):
        return IndexKDtype.BF16
    return IndexKDtype.FP4 if getattr(pool, "use_fp4_indexer", False) else IndexKDtype.FP8


def bf16_page_view(page_rows: torch.Tensor, page_size: int, index_head_dim: int) -> torch.Tensor:
    """View one layer's uint8 page rows ``[pages, page_size*head_dim*2]`` as bf16 ``[pages, page_size, head_dim]``."""
    import torch

    return page_rows.view(torch.bfloat16).view(page_rows.shape[0], page_size, index_head_dim)
