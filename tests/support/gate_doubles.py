"""Test doubles and observers for the index-K read gate tests (tests/test_gate*.py).

Importable by dotted path (``tests.support.gate_doubles...``) so SGLang's ``HookRegistry`` can resolve
a hook target on the test-double pool class.

- :class:`Dsv4PoolWithoutIndexKWait`: SGLang's real ``DeepSeekV4TokenToKVPool`` with one
  top-level reader that reads without waiting, as SGLang did before the getters were gated.
- :class:`StreamWaits`: observes a REAL ``LayerDoneCounter``: every ``wait_until`` call and
  every stream wait it issues on a layer's load event (``LayerLoadingEvent.wait``, a real
  ``current_stream().wait_event`` on CPU here). It is the test's own oracle for "which
  layers has the reading stream waited for", independent of the gate's bookkeeping.
- :func:`build_pool` / :func:`build_low_ratio_pool`: real pools at tiny sizes on CPU.
"""

from __future__ import annotations

import torch
from sglang.srt.managers.cache_controller import LayerDoneCounter
from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4TokenToKVPool

from tests.support.dsv4_pools import small_pool

# Global layers of build_pool(): ratio 0, c4, c128, c4 -> c4 sub-pool layers 0 and 1 are global 1 and 3.
RATIOS = (0, 4, 128, 4)
C4_GLOBAL_OF_LOCAL = {0: 1, 1: 3}
# build_low_ratio_pool(): V4.1-style ratio-2 layers sharing their kv_source layer's sub-pool layer.
LOW_RATIOS = (0, 2, 2, 2, 4, 2)
LOW_KV_SOURCES = (1, 3)  # ratio-2 sub-pool layer 0 <- global 1 (read by 1, 2); layer 1 <- global 3 (read by 3, 5)
TOKENS = 4096


def build_pool(cls=DeepSeekV4TokenToKVPool, **extra):
    """A real DSV4 pool (fp8 index-K), layers (0, 4, 128, 4); ``cls`` may be a subclass, ``extra`` more pool kwargs."""
    return small_pool(RATIOS, tokens=TOKENS, pool_class=cls, **extra)


def build_low_ratio_pool():
    """A real DSV4 pool with V4.1 ratio-2 layers (fp4 index-K sub-pool shared per kv_source)."""
    return small_pool(LOW_RATIOS, tokens=TOKENS, kv_source_layers=LOW_KV_SOURCES)


class Dsv4PoolWithoutIndexKWait(DeepSeekV4TokenToKVPool):
    """``get_index_k_with_scale_buffer`` as older SGLang might ship it: no ``wait_layer_transfer``."""

    def get_index_k_with_scale_buffer(self, layer_id: int) -> torch.Tensor:
        compress_ratio, compress_layer_id, _ = self.layer_mapping[layer_id]
        return self._indexer_pool(compress_ratio).get_index_k_with_scale_buffer(compress_layer_id)


TOPLEVEL_DOUBLE_TARGET = f"{__name__}.Dsv4PoolWithoutIndexKWait.get_index_k_with_scale_buffer"


class StreamWaits:
    """Attach to a real ``LayerDoneCounter``; record its ``wait_until`` calls and stream waits.

    ``start_load()`` does what HiCache's ``start_loading`` + the worker's ``set_consumer`` do
    to the counter for a batch with a pending load: rotate the producer and make it the
    consumer. Nothing completes the load events, so every layer stays "in flight".
    """

    def __init__(self, counter: LayerDoneCounter):
        self.counter = counter
        self.wait_until_calls: list[int] = []
        self.stream_waits: list[tuple[int, int]] = []  # (event set, layer)
        cls_wait_until = type(counter).wait_until  # the class attribute, hooks included

        def wait_until(threshold: int) -> None:
            self.wait_until_calls.append(threshold)
            cls_wait_until(counter, threshold)

        counter.wait_until = wait_until
        for index, events in enumerate(counter.events):
            real_wait = events.wait

            def wait(layer_index: int, _real=real_wait, _index=index) -> None:
                self.stream_waits.append((_index, layer_index))
                _real(layer_index)

            events.wait = wait

    @classmethod
    def on(cls, pool, num_layers: int | None = None) -> StreamWaits:
        counter = LayerDoneCounter(pool.layer_num if num_layers is None else num_layers)
        pool.register_layer_transfer_counter(counter)
        return cls(counter)

    def start_load(self) -> int:
        producer = self.counter.update_producer()
        self.counter.set_consumer(producer)
        return producer

    def covered(self) -> int:
        """Highest layer the stream has waited for under the current consumer (-1: none).

        HiCache loads layers in order on one stream, so waiting for event L covers layers <= L.
        """
        consumer = self.counter.consumer_index
        return max((layer for index, layer in self.stream_waits if index == consumer), default=-1)

    def clear(self) -> None:
        self.wait_until_calls.clear()
        self.stream_waits.clear()
