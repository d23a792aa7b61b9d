"""Pool lifecycle events shared between hook areas.

Why: the index-K read gate must link a DSV4 pool's sub-pools the moment the pool is built, but
pool construction belongs to the pool area. Rather than one hook module calling into another,
the pool hook announces each new pool here and the gate subscribes at activation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sglang_dsv4_ext.runtime.sglang_types import DSV4TokenToKVPool

logger = logging.getLogger(__name__)

PoolCallback = Callable[["DSV4TokenToKVPool"], object]

_POOL_CREATED: dict[str, PoolCallback] = {}


def subscribe_pool_created(name: str, callback: PoolCallback) -> None:
    """Call ``callback(pool)`` for every DSV4 pool built from now on (re-subscribing replaces)."""
    _POOL_CREATED[name] = callback


def announce_pool_created(pool: DSV4TokenToKVPool) -> None:
    for callback in list(_POOL_CREATED.values()):
        callback(pool)
