"""Wait bookkeeping: which layers the current consumer batch has waited for, and wait-ahead (R3)."""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeGuard

from sglang_dsv4_ext.config import GateMode

if TYPE_CHECKING:
    from sglang_dsv4_ext.runtime.sglang_types import DSV4TokenToKVPool, LayerDoneCounter

# The pool whose waits look one layer ahead: set while a non-full prefill graph replays.
wait_ahead_pool: contextvars.ContextVar[int | None] = contextvars.ContextVar("dsv4_ext_wait_ahead", default=None)


def note_wait(counter: LayerDoneCounter, threshold: int) -> None:
    consumer = getattr(counter, "consumer_index", -1)
    if consumer is None or consumer < 0:
        return
    record = getattr(counter, "_dsv4_ext_waited", None)
    if record is None or record[0] != consumer or record[1] < threshold:
        try:
            counter._dsv4_ext_waited = (consumer, threshold)  # type: ignore[attr-defined]  # the gate's own record
        except AttributeError:  # a counter without __dict__: reads stay gated by waiting
            pass


def waited_upto(counter: LayerDoneCounter) -> int:
    """Highest stage-local layer waited for under the counter's current consumer, else -1."""
    record = getattr(counter, "_dsv4_ext_waited", None)
    if record is None or record[0] != getattr(counter, "consumer_index", -1):
        return -1
    waited: int = record[1]
    return waited


def load_pending(counter: LayerDoneCounter | None) -> TypeGuard[LayerDoneCounter]:
    return counter is not None and getattr(counter, "consumer_index", -1) >= 0


def around_set_consumer(original: Callable[[LayerDoneCounter, int], None], self: LayerDoneCounter, index: int) -> None:
    original(self, index)
    self._dsv4_ext_waited = None  # type: ignore[attr-defined]  # a new batch: nothing waited for yet


def around_wait_until(
    original: Callable[[LayerDoneCounter, int], None], self: LayerDoneCounter, threshold: int
) -> None:
    original(self, threshold)
    if self.consumer_index >= 0:
        note_wait(self, threshold)


def around_wait_layer_transfer(
    original: Callable[[DSV4TokenToKVPool, int], None], self: DSV4TokenToKVPool, layer_id: int
) -> None:
    counter = self.layer_transfer_counter
    if counter is None:  # HiCache off: the stock method would do nothing either
        return
    original(self, layer_id)
    if counter.consumer_index < 0:
        return  # no load pending for this batch: nothing to record or wait ahead for
    local = layer_id - self.start_layer
    note_wait(counter, local)
    if wait_ahead_pool.get() == id(self) and getattr(self, "_dsv4_gate_mode", GateMode.AUTO) != GateMode.OFF:
        ahead = local + 1
        if ahead < counter.num_layers and load_pending(counter):
            counter.wait_until(ahead)
            note_wait(counter, ahead)
