"""What the DSV4 pool configurator budgeted for index-K, shared between the sizing and pool areas.

Why a module of its own: the sizing hook records the budget when SGLang's configurator is built,
the pool hook compares the pool's allocation with it; hook modules share state through modules
like this one, never by importing each other.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from fractions import Fraction


@dataclass(frozen=True)
class IndexKBudget:
    """What one DSV4PoolConfigurator budgeted for index-K, per full token."""

    indexer_bytes_per_token: int
    c4_index_layers: int  # layers of this PP stage owning a c4 index-K pool
    spec_inflation: float
    # DeepSeek-V4.1's ratio-1/2 index-K (always fp4): bytes per slot and (ratio, kv_source layers) of this stage.
    low_ratio_index_bytes: int = 0
    low_ratio_index_layers: tuple[tuple[int, int], ...] = ()

    @property
    def bytes_per_full_token(self) -> Fraction:
        # One c4 slot per 4 full tokens: 1/4 * indexer_bytes_per_token per layer (docs/patch-point-map.md).
        return Fraction(self.indexer_bytes_per_token * self.c4_index_layers, 4)


_BUDGETS: dict[str, IndexKBudget] = {}
_BUDGET_LOCK = threading.Lock()


def last_budget() -> IndexKBudget | None:
    with _BUDGET_LOCK:
        return _BUDGETS.get("last")


def forget_budget() -> None:
    with _BUDGET_LOCK:
        _BUDGETS.clear()


def record(budget: IndexKBudget) -> None:
    with _BUDGET_LOCK:
        _BUDGETS["last"] = budget
