"""Index-K bytes per token: one source of truth for the pool and the pool configurator.

Why: the seed fork allocated 256-B bf16 index-K rows while the configurator still
budgeted fp8's 132 B: 21 c4 layers x 124 B / 4 = 651 B per full token under-budgeted,
about 1.1 GB of GPU over-commit per rank at a 12 GB KV budget. Stock SGLang on CUDA has
the opposite error for its fp4 indexer (budgets 132 B, allocates 68 B), because the
configurator passes ``_is_hip and fp4`` (code map A.1, C.2).

How: an AROUND hook on ``get_dsv4_indexer_bytes_per_token`` (both the pool's
``get_bytes_per_token`` and the configurator resolve it; HookRegistry's propagation
rebinds the configurator's ``from ... import`` alias) answers from
:func:`index_k_bytes_per_token` for the effective index-K dtype. An AFTER hook on
``DSV4PoolConfigurator.__init__`` records what was budgeted, so the pool's startup
self-check (:mod:`.pool`) can compare allocation with budget.

Upstream status: not upstream (no bf16 index-K in SGLang; the fp4 budget is deliberate
upstream, "the NVIDIA FP4 path keeps the FP8 estimate").
Retire when: SGLang sizes a bf16 index-K itself and budgets fp4 at 68 B on CUDA.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from fractions import Fraction
from typing import Dict, Optional

from sglang_dsv4_ext.config import ENV_INDEX_K_DTYPE, ConfigError, load_config

logger = logging.getLogger(__name__)

_MP = "sglang.srt.mem_cache.deepseek_v4_memory_pool"
_CONF = "sglang.srt.model_executor.pool_configurator.DSV4PoolConfigurator"


def index_k_bytes_per_token(dtype: str, index_head_dim: int) -> int:
    """Bytes one compressed index-K token occupies, for each supported dtype.

    fp8: e4m3 values + one fp32 scale per 128 values (SGLang's layout, 132 B at d=128);
    fp4: e2m1 values + one ue8m0 byte per 32 values (68 B); bf16: 2 bytes per value, no
    scale (256 B).
    """
    if dtype == "fp8":
        return index_head_dim + index_head_dim // 128 * 4
    if dtype == "fp4":
        return index_head_dim // 2 + index_head_dim // 32
    if dtype == "bf16":
        return 2 * index_head_dim
    raise ValueError(f"index-K dtype {dtype!r} is not one of 'fp8', 'bf16', 'fp4'")


def sglang_fp4_indexer_enabled() -> Optional[bool]:
    """``--enable-deepseek-v4-fp4-indexer`` in this process, or None if no server args are published."""
    try:
        from sglang.srt.runtime_context import get_exec

        return bool(get_exec().kernel.enable_deepseek_v4_fp4_indexer)
    except Exception:  # the config namespace is not published in this process
        return None


def effective_index_k_dtype(use_fp4_indexer: bool = False) -> str:
    """The index-K dtype this process stores, reconciling our variable with SGLang's flag.

    ``use_fp4_indexer=True`` is SGLang asking about an fp4 pool (its own fp4 indexer or
    the V4.1 low-ratio pools, which are always fp4).
    """
    if use_fp4_indexer:
        return "fp4"
    wanted = load_config().index_k_dtype
    sglang_fp4 = sglang_fp4_indexer_enabled()
    if sglang_fp4 and wanted == "bf16":
        raise ConfigError(
            f"{ENV_INDEX_K_DTYPE}=bf16 contradicts --enable-deepseek-v4-fp4-indexer; choose one index-K dtype"
        )
    if wanted == "fp4" and sglang_fp4 is False:
        raise ConfigError(
            f"{ENV_INDEX_K_DTYPE}=fp4 means SGLang's own fp4 indexer: also pass --enable-deepseek-v4-fp4-indexer"
        )
    if sglang_fp4:
        return "fp4"
    return wanted


def _around_indexer_bytes_per_token(original, index_head_dim, use_fp4_indexer):
    dtype = effective_index_k_dtype(bool(use_fp4_indexer))
    if dtype == "bf16":
        return index_k_bytes_per_token("bf16", index_head_dim)
    # fp8 and fp4 keep SGLang's own formula; only the fp4 decision is corrected.
    return original(index_head_dim, dtype == "fp4")


@dataclass(frozen=True)
class IndexKBudget:
    """What one DSV4PoolConfigurator budgeted for index-K, per full token."""

    indexer_bytes_per_token: int
    c4_index_layers: int  # layers of this PP stage owning a c4 index-K pool
    spec_inflation: float

    @property
    def bytes_per_full_token(self) -> Fraction:
        # One c4 slot per 4 full tokens (code map C.2: 1/4 * indexer_bytes_per_token per layer).
        return Fraction(self.indexer_bytes_per_token * self.c4_index_layers, 4)


_BUDGETS: Dict[str, IndexKBudget] = {}
_BUDGET_LOCK = threading.Lock()


def last_budget() -> Optional[IndexKBudget]:
    with _BUDGET_LOCK:
        return _BUDGETS.get("last")


def forget_budget() -> None:
    with _BUDGET_LOCK:
        _BUDGETS.clear()


def _after_configurator_init(result, self, kvc):
    budget = IndexKBudget(
        indexer_bytes_per_token=int(self.indexer_bytes_per_token),
        c4_index_layers=len(self.stage_owner_layers.get(4, ())),
        spec_inflation=float(getattr(self, "_spec_infl", 1.0)),
    )
    with _BUDGET_LOCK:
        _BUDGETS["last"] = budget
    return None


def hooks(ctx):
    from sglang_dsv4_ext.patches import Hook

    return [
        Hook(f"{_MP}.get_dsv4_indexer_bytes_per_token", _around_indexer_bytes_per_token, "around"),
        Hook(f"{_CONF}.__init__", _after_configurator_init, "after"),
    ]
