"""R3: breakable / piecewise prefill-graph replay waits one layer ahead."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sglang_dsv4_ext.config import GateMode
from sglang_dsv4_ext.runtime.hooks.gate.waits import load_pending, note_wait, wait_ahead_pool

if TYPE_CHECKING:
    from sglang_dsv4_ext.runtime.hooks.gate.subpool import GatedPool


def _dsv4_pool_of(runner: object) -> GatedPool | None:
    pool = getattr(getattr(runner, "model_runner", None), "token_to_kv_pool", None)
    return pool if pool is not None and "_dsv4_gate_mode" in getattr(pool, "__dict__", {}) else None


def around_wait_for_layer_loads(original: Callable[[object], None], self: object) -> None:
    original(self)
    if getattr(self, "_is_full_backend", False):
        return  # SGLang already waited for the last layer (hence all layers)
    pool = _dsv4_pool_of(self)
    if pool is None or pool._dsv4_gate_mode == GateMode.OFF:
        return
    counter = pool.layer_transfer_counter
    if load_pending(counter):
        # The first captured segment holds layer 0's pre-attention readers.
        counter.wait_until(0)
        note_wait(counter, 0)


def _replay_waiting_ahead(
    original: Callable[..., Any], runner: object, pool: GatedPool, forward_batch: object, kwargs: dict[str, Any]
) -> Any:
    """The replay, in whose scope the pool's waits look one layer ahead."""
    token = wait_ahead_pool.set(id(pool))
    try:
        return original(runner, forward_batch, **kwargs)
    finally:
        wait_ahead_pool.reset(token)


def around_prefill_execute(original: Callable[..., Any], self: object, forward_batch: object, **kwargs: Any) -> Any:
    pool = _dsv4_pool_of(self)
    if pool is None or getattr(self, "_is_full_backend", False) or pool._dsv4_gate_mode == GateMode.OFF:
        return original(self, forward_batch, **kwargs)
    return _replay_waiting_ahead(original, self, pool, forward_batch, kwargs)


def around_prefill_execute_waiting_first(
    original: Callable[..., Any], self: object, forward_batch: object, **kwargs: Any
) -> Any:
    """SGLang 0.5.22, which has no ``_wait_for_layer_loads`` and waits for no HiCache load around a replay.

    A full-graph replay runs none of the pool's per-layer waits, so with a load pending it first waits for
    every layer (0.5.23's own ``_wait_for_layer_loads``); a breakable / piecewise replay waits for layer 0
    (the first captured segment holds its readers) and then replays in the wait-ahead scope. Only for a
    DeepSeek-V4 pool with the gate on; any other replay is 0.5.22's own.
    """
    pool = _dsv4_pool_of(self)
    if pool is None or pool._dsv4_gate_mode == GateMode.OFF:
        return original(self, forward_batch, **kwargs)
    full = getattr(self, "_is_full_backend", False)
    counter = pool.layer_transfer_counter
    if load_pending(counter):
        layer = counter.num_layers - 1 if full else 0
        counter.wait_until(layer)
        note_wait(counter, layer)
    if full:
        return original(self, forward_batch, **kwargs)
    return _replay_waiting_ahead(original, self, pool, forward_batch, kwargs)
