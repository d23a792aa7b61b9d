"""R3: breakable / piecewise prefill-graph replay waits one layer ahead."""

from __future__ import annotations

from sglang_dsv4_ext.hooks.gate.waits import load_pending, note_wait, wait_ahead_pool


def _dsv4_pool_of(runner):
    pool = getattr(getattr(runner, "model_runner", None), "token_to_kv_pool", None)
    return pool if pool is not None and "_dsv4_gate_mode" in getattr(pool, "__dict__", {}) else None


def around_wait_for_layer_loads(original, self):
    original(self)
    if getattr(self, "_is_full_backend", False):
        return  # SGLang already waited for the last layer (hence all layers)
    pool = _dsv4_pool_of(self)
    if pool is None or pool._dsv4_gate_mode == "off":
        return
    counter = pool.layer_transfer_counter
    if load_pending(counter):
        # The first captured segment holds layer 0's pre-attention readers.
        counter.wait_until(0)
        note_wait(counter, 0)


def around_prefill_execute(original, self, forward_batch, **kwargs):
    pool = _dsv4_pool_of(self)
    if pool is None or getattr(self, "_is_full_backend", False) or pool._dsv4_gate_mode == "off":
        return original(self, forward_batch, **kwargs)
    token = wait_ahead_pool.set(id(pool))
    try:
        return original(self, forward_batch, **kwargs)
    finally:
        wait_ahead_pool.reset(token)
