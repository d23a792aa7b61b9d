"""Pool lifecycle events shared between hook areas.

Why: the index-K read gate must link a DSV4 pool's sub-pools the moment the pool is built, but
pool construction belongs to the pool area. Rather than one hook module calling into another,
the pool hook announces each new pool here and the gate subscribes at activation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

logger = logging.getLogger(__name__)

_POOL_CREATED: dict[str, Callable] = {}


def subscribe_pool_created(name: str, callback: Callable) -> None:
    """Call ``callback(pool)`` for every DSV4 pool built from now on (re-subscribing replaces)."""
    _POOL_CREATED[name] = callback


def announce_pool_created(pool) -> None:
    for callback in list(_POOL_CREATED.values()):
        callback(pool)
