"""Index-K bytes per token: one source of truth for the pool and the pool configurator.

Why: the seed fork allocated 256-B bf16 index-K rows while the configurator still
budgeted fp8's 132 B: 21 c4 layers x 124 B / 4 = 651 B per full token under-budgeted,
about 1.1 GB of GPU over-commit per rank at a 12 GB KV budget. Stock SGLang on CUDA has
the opposite error for its fp4 indexer (budgets 132 B, allocates 68 B), because the
configurator passes ``_is_hip and fp4`` (docs/patch-point-map.md, "Sizing").

How: an AROUND hook on ``get_dsv4_indexer_bytes_per_token`` (both the pool's
``get_bytes_per_token`` and the configurator resolve it; HookRegistry's propagation
rebinds the configurator's ``from ... import`` alias) answers from
:func:`sglang_dsv4_ext.index_k.index_k_bytes_per_token` for the effective index-K dtype. An AFTER hook on
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

from sglang_dsv4_ext import compat
from sglang_dsv4_ext.index_k import BF16, effective_index_k_dtype, index_k_bytes_per_token

logger = logging.getLogger(__name__)


def _around_indexer_bytes_per_token(original, index_head_dim, use_fp4_indexer):
    dtype = effective_index_k_dtype(bool(use_fp4_indexer))
    if dtype == BF16:
        return index_k_bytes_per_token(BF16, index_head_dim)
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
        # One c4 slot per 4 full tokens: 1/4 * indexer_bytes_per_token per layer (docs/patch-point-map.md).
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
    from sglang_dsv4_ext.hooks import Hook

    return [
        Hook(compat.INDEXER_BYTES_PER_TOKEN, _around_indexer_bytes_per_token, "around"),
        Hook(compat.CONFIGURATOR_INIT, _after_configurator_init, "after"),
    ]
