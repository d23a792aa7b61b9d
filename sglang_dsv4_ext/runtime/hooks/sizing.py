"""Index-K bytes per token: one source of truth for the pool and the pool configurator.

Why: the seed fork (docs/incident.md) allocated 256-B bf16 index-K rows while the configurator still
budgeted fp8's 132 B: 21 c4 layers x 124 B / 4 = 651 B per full token under-budgeted,
about 1.1 GB of GPU over-commit per rank at a 12 GB KV budget. Stock SGLang on CUDA has
the opposite error for its fp4 indexer (budgets 132 B, allocates 68 B), because the
configurator passes ``_is_hip and fp4`` (docs/patch-point-map.md, "Sizing").

How: an AROUND hook on ``get_dsv4_indexer_bytes_per_token`` (both the pool's
``get_bytes_per_token`` and the configurator resolve it; HookRegistry's propagation
rebinds the configurator's ``from ... import`` alias) answers from
:func:`sglang_dsv4_ext.runtime.index_k.dtype.index_k_bytes_per_token` for the effective index-K dtype. An AFTER hook on
``DSV4PoolConfigurator.__init__`` records what was budgeted, so the pool's startup
self-check (:mod:`.pool`) can compare allocation with budget. Budgeting SGLang's CUDA fp4
indexer at its real 68 B changes capacity for operators who did not ask for it: it is logged
once with both figures, ``sglang-dsv4 plan`` shows both, and ``SGLANG_DSV4_FP4_BUDGET=stock``
keeps the stock estimate (the self-check then accepts the over-budget).

Upstream status: not upstream (no bf16 index-K in SGLang; the fp4 budget is deliberate
upstream, "the NVIDIA FP4 path keeps the FP8 estimate").
Retire when: SGLang sizes a bf16 index-K itself and budgets fp4 at 68 B on CUDA.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from sglang_dsv4_ext.config import ENV_FP4_BUDGET, Fp4Budget, IndexKDtype, load_config
from sglang_dsv4_ext.runtime import compat
from sglang_dsv4_ext.runtime.index_k import budget as index_k_budget
from sglang_dsv4_ext.runtime.index_k.dtype import effective_index_k_dtype, index_k_bytes_per_token

if TYPE_CHECKING:
    from sglang_dsv4_ext.runtime.hooks import Hook, HookContext
    from sglang_dsv4_ext.runtime.sglang_types import PoolConfigurator

logger = logging.getLogger(__name__)


_fp4_budget_logged = threading.Event()


def _around_indexer_bytes_per_token(
    original: Callable[[int, bool], int], index_head_dim: int, use_fp4_indexer: bool
) -> int:
    dtype = effective_index_k_dtype(bool(use_fp4_indexer))
    if dtype == IndexKDtype.BF16:
        return index_k_bytes_per_token(IndexKDtype.BF16, index_head_dim)
    if dtype == IndexKDtype.FP4 and not use_fp4_indexer:
        # The configurator's call for SGLang's own fp4 indexer (the pool and the V4.1 low-ratio
        # pools pass use_fp4_indexer=True and always get 68 B).
        stock = load_config().fp4_budget == Fp4Budget.STOCK
        _log_fp4_budget_once(index_head_dim, stock)
        if stock:
            return original(index_head_dim, use_fp4_indexer)  # SGLang's deliberate fp8 estimate
    # fp8 and fp4 keep SGLang's own formula; only the fp4 decision is corrected.
    return original(index_head_dim, dtype == IndexKDtype.FP4)


def _log_fp4_budget_once(index_head_dim: int, stock: bool) -> None:
    if _fp4_budget_logged.is_set():
        return
    _fp4_budget_logged.set()
    exact = index_k_bytes_per_token(IndexKDtype.FP4, index_head_dim)
    estimate = index_k_bytes_per_token(IndexKDtype.FP8, index_head_dim)
    if stock:
        logger.warning(
            "fp4 index-K: budgeting SGLang's stock %d B per token while the pool allocates %d B (%s=stock)",
            estimate,
            exact,
            ENV_FP4_BUDGET,
        )
    else:
        logger.warning(
            "fp4 index-K: budgeting the %d B per token the pool allocates instead of SGLang's stock "
            "estimate of %d B, so more tokens fit; %s=stock keeps the stock estimate",
            exact,
            estimate,
            ENV_FP4_BUDGET,
        )


def _after_configurator_init(result: None, self: PoolConfigurator, kvc: object) -> None:
    budget = index_k_budget.IndexKBudget(
        indexer_bytes_per_token=int(self.indexer_bytes_per_token),
        c4_index_layers=len(self.stage_owner_layers.get(4, ())),
        spec_inflation=float(getattr(self, "_spec_infl", 1.0)),
        low_ratio_index_bytes=int(getattr(self, "low_ratio_index_bytes", 0)),
        low_ratio_index_layers=tuple(
            (ratio, len(self.stage_owner_layers[ratio])) for ratio in (1, 2) if self.stage_owner_layers.get(ratio)
        ),
    )
    index_k_budget.record(budget)
    return None


def hooks(ctx: HookContext) -> list[Hook]:
    from sglang_dsv4_ext.runtime.hooks import Hook

    return [
        Hook(compat.INDEXER_BYTES_PER_TOKEN, _around_indexer_bytes_per_token, "around"),
        Hook(compat.CONFIGURATOR_INIT, _after_configurator_init, "after"),
    ]
