"""How many ranks of this server's TP group built their DeepSeek-V4 pool with the extension active.

Why: ``/server_info`` is answered by the schedulers the tokenizer asks: one per attention-DP group
(``update_control_communicator_fan_out``), and under multi-node TP never the other nodes' schedulers.
A node started without the extension builds stock pools and nothing else would tell.

How: where the pool is built (the pool hook, every rank at the same point of its start), each active rank
writes one key, its rank, into the store of the torch.distributed group SGLang initialised for this server
(the store every rank's process groups were made from: no new transport). When ``/server_info`` asks, a
rank counts the keys present for the ranks of SGLang's TP group (``get_tp_group()``, which attention-DP
splits, so it spans every attention-DP rank too). Reading never waits: ``Store.check`` answers at once, so
a rank that never wrote (stock, or not built yet) is simply not counted. A stock rank takes no part in any
collective here, which is why this is not an ``all_gather``: a collective a stock rank never joins would
hang its peers. Where SGLang has no TP group (or torch.distributed is not initialised) nothing is counted
and the record has no ``ranks``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch.distributed

    from sglang_dsv4_ext.runtime.sglang_types import GroupCoordinator

logger = logging.getLogger("sglang_dsv4_ext")

GROUP = "tp"  # the SGLang process group counted (``get_tp_group()``)
_KEY_PREFIX = "sglang_dsv4_ext/active-rank/"


@dataclass
class _Census:
    store: torch.distributed.Store
    ranks: tuple[int, ...]


_CENSUS: _Census | None = None


def _store() -> torch.distributed.Store | None:
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return None
    return dist.distributed_c10d._get_default_store()


def _key(rank: int) -> str:
    return f"{_KEY_PREFIX}{rank}"


def take_part(group: GroupCoordinator | None, value: str) -> None:
    """This rank built its pool with the extension active: say so under its global rank.

    ``group``: SGLang's TP group coordinator (its ``ranks``), or None where SGLang made none.
    """
    global _CENSUS
    store = _store()
    if group is None or store is None:
        return
    import torch.distributed as dist

    store.set(_key(dist.get_rank()), value)
    _CENSUS = _Census(store, tuple(int(r) for r in group.ranks))


def count() -> dict[str, object] | None:
    """``{"active": N, "total": M, "group": "tp"}``; None when no count could be had (never a guess)."""
    if _CENSUS is None:
        return None
    try:
        active = sum(1 for rank in _CENSUS.ranks if _CENSUS.store.check([_key(rank)]))
    except (RuntimeError, OSError) as exc:  # the store's host is gone (its rank exited)
        logger.warning("sglang-dsv4-ext: could not count the active ranks: %s", exc)
        return None
    return {"active": active, "total": len(_CENSUS.ranks), "group": GROUP}


def reset_for_tests() -> None:
    global _CENSUS
    _CENSUS = None
