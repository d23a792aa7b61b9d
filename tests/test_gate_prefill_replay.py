"""R3: SGLang's real prefill-graph runner path waits for the layers its captured readers need.

What is real: ``PrefillCudaGraphRunner.execute``, ``_wait_for_layer_loads``,
``_execute_body_capture`` (breakable) and ``_execute_tc_piecewise`` (tc-piecewise) as
SGLang 0.5.23 ships them with the extension's hooks; the DSV4 pool and its gated getters; the
``LayerDoneCounter`` whose per-layer event waits are observed (``tests.support.gate_doubles.StreamWaits``).

What is stubbed, because a CUDA graph cannot be captured or replayed on CPU: the runner is
built with ``object.__new__`` and its GPU parts are stand-ins: ``model_context``,
``backend.replay_session``, ``load_batch`` (static buffers), ``_prefill_forward_context``
(SGLang's forward/graph contexts) and ``backend.replay``, the graph replay itself.
:class:`BreakableReplay` simulates that replay layer by layer as SGLang runs it: layer L's
pre-attention part (C4 indexer, compressors: the index-K readers) is captured, so at replay it
does no Python and no wait; it only "reads", and we record which layers the stream had waited
for at that point. Then the eager break runs layer L's DSV4 attention, which calls the pool's
gated getters (``get_swa_key_buffer_radix``, ``get_extra_key_buffer``) as
``deepseek_v4_backend.py`` does. The same mechanism on real CUDA graphs, streams and a delayed
side-stream load is replayed on the H200 by ``gpu/gate_replay.py``.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Dict

import pytest
import torch

from sglang_dsv4_ext import compat
from tests.support import gate_doubles as gd

BREAKABLE, TC_PIECEWISE, FULL = "breakable", "tc_piecewise", "full"
NUM_TOKENS = 8


class BreakableReplay:
    """Stand-in for ``backend.replay``: a captured prefill body, with eager attention breaks or not (full)."""

    def __init__(self, pool, waits: gd.StreamWaits, *, eager_breaks: bool):
        self.pool = pool
        self.waits = waits
        self.eager_breaks = eager_breaks
        self.captured_reader_coverage: Dict[int, int] = {}
        self.break_coverage: Dict[int, int] = {}

    def __call__(self, shape_key, static_forward_batch, **kwargs):
        assert shape_key.size == NUM_TOKENS
        for layer in range(self.pool.layer_num):
            # Captured segment: layer L's indexer/compressor read layer L's index-K, no Python runs.
            self.captured_reader_coverage[layer] = self.waits.covered()
            if self.eager_breaks:
                # Eager break: DSV4 attention of layer L through the pool's gated getters.
                self.pool.get_swa_key_buffer_radix(layer)
                if self.pool.compression_ratios[layer]:
                    self.pool.get_extra_key_buffer(layer)
                self.break_coverage[layer] = self.waits.covered()
        return None  # hidden states are not under test; execute() passes None through


def stand_in_runner(pool, replay: BreakableReplay, backend: str):
    from sglang.srt.model_executor.cuda_graph_config import Backend
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
    from sglang.srt.model_executor.runner.prefill_cuda_graph_runner import PrefillCudaGraphRunner

    runner = object.__new__(PrefillCudaGraphRunner)
    static_batch = SimpleNamespace(input_ids=torch.zeros(NUM_TOKENS, dtype=torch.long),
                                   positions=torch.arange(NUM_TOKENS), attn_tp_sequence_sharded=False,
                                   mm_input_embeds=None, input_embeds=None)

    def model_forward(input_ids, positions, forward_batch, **kwargs):
        # The eager model body calls the transformer body, which execute() swapped for the replay.
        return runner.layer_model.forward(input_ids, positions, forward_batch)

    # Plain attributes the real methods read.
    runner.model_runner = SimpleNamespace(token_to_kv_pool=pool, model=SimpleNamespace(forward=model_forward),
                                          pp_group=SimpleNamespace(is_first_rank=False))
    runner._is_full_backend = backend == FULL
    runner.prefill_backend_name = {BREAKABLE: Backend.BREAKABLE, FULL: Backend.FULL,
                                   TC_PIECEWISE: Backend.TC_PIECEWISE}[backend]
    runner.capture_hidden_mode = CaptureHiddenMode.NULL
    runner.enable_cp_bcg_capture = False
    runner.max_context_size = None
    runner._capture_chunked_prefix = False
    runner.is_dsv41_model = False
    runner._qwen_bcg_hc_sidechannel = False
    runner.layer_model = SimpleNamespace(forward=None)
    runner.device_module = torch.cpu
    runner.raw_num_tokens = NUM_TOKENS
    # Stubs for the GPU / graph parts (see the module docstring).
    runner.model_context = contextlib.nullcontext
    runner.backend = SimpleNamespace(replay_session=contextlib.nullcontext, replay=replay)
    runner.load_batch = lambda forward_batch, **kwargs: (static_batch, None)
    runner._prefill_forward_context = lambda forward_batch, **kwargs: contextlib.nullcontext()
    return runner


def forward_batch():
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    return SimpleNamespace(capture_hidden_mode=CaptureHiddenMode.NULL, mm_input_embeds=None,
                           attn_tp_sequence_sharded=False, input_ids=torch.zeros(NUM_TOKENS, dtype=torch.long),
                           positions=torch.arange(NUM_TOKENS))


@pytest.fixture
def stock_sglang(monkeypatch):
    """Context manager: the runner and pool wait paths exactly as SGLang ships them (hooks removed)."""
    from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4TokenToKVPool
    from sglang.srt.model_executor.runner.prefill_cuda_graph_runner import PrefillCudaGraphRunner

    @contextlib.contextmanager
    def stock():
        with monkeypatch.context() as patch:
            for cls, name in ((PrefillCudaGraphRunner, "execute"), (PrefillCudaGraphRunner, "_wait_for_layer_loads"),
                              (DeepSeekV4TokenToKVPool, "wait_layer_transfer")):
                current = getattr(cls, name)
                assert hasattr(current, "__wrapped__"), f"{cls.__name__}.{name} is not hooked"
                patch.setattr(cls, name, compat.unwrap_to_original(current))
            yield

    return stock


def replay_once(backend: str, *, load: str = "pending", gate_mode: str = "auto", monkeypatch=None):
    """Build pool + counter, run the real execute() once; return (replay, waits).

    ``load``: "pending" (a HiCache load for this batch), "none" (HiCache on, nothing to load:
    consumer -1) or "hicache-off" (no counter registered).
    """
    pool = gd.build_pool()
    waits = None
    if load != "hicache-off":
        waits = gd.StreamWaits.on(pool)
        if load == "pending":
            waits.start_load()
        else:
            waits.counter.set_consumer(-1)
    replay = BreakableReplay(pool, waits or _NoWaits(), eager_breaks=backend != FULL)
    runner = stand_in_runner(pool, replay, backend)
    assert runner.execute(forward_batch()) is None
    return replay, waits


class _NoWaits:
    def covered(self) -> int:
        return -1


@pytest.fixture
def fp8_auto(monkeypatch, ext_active):
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", "fp8")
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_GATE", "auto")
    return monkeypatch


@pytest.mark.parametrize("backend", [BREAKABLE, TC_PIECEWISE])
def test_captured_readers_run_after_their_layers_load_with_the_extension_not_in_stock(fp8_auto, stock_sglang, backend):
    replay, waits = replay_once(backend)
    layers = range(replay.pool.layer_num)
    # Every captured reader of layer L ran after a wait covering L: one layer ahead of the
    # stock schedule, not all layers up front (layer-wise overlap with the load is kept).
    assert replay.captured_reader_coverage == {layer: layer for layer in layers}
    assert replay.break_coverage == {layer: min(layer + 1, len(layers) - 1) for layer in layers}
    # Outside the replay, wait_layer_transfer no longer waits ahead.
    waits.clear()
    replay.pool.wait_layer_transfer(0)
    assert waits.wait_until_calls == [0]

    with stock_sglang():
        stock, _ = replay_once(backend)
    # Stock 0.5.23: layer L's captured readers run after the break of L-1, which waited for L-1 only.
    assert stock.captured_reader_coverage == {layer: layer - 1 for layer in layers}
    assert all(stock.captured_reader_coverage[layer] < layer for layer in layers)


@pytest.mark.parametrize("backend", [BREAKABLE, TC_PIECEWISE, FULL])
@pytest.mark.parametrize("load", ["none", "hicache-off"])
def test_nothing_extra_is_waited_without_a_pending_load(fp8_auto, stock_sglang, backend, load):
    replay, waits = replay_once(backend, load=load)
    with stock_sglang():
        stock, stock_waits = replay_once(backend, load=load)
    assert replay.captured_reader_coverage == stock.captured_reader_coverage
    if waits is not None:
        # Same wait_until calls as stock (the getters' own no-op calls), and no stream wait at all.
        assert waits.wait_until_calls == stock_waits.wait_until_calls
        assert waits.stream_waits == stock_waits.stream_waits == []


def test_full_graph_backend_is_left_to_sglang(fp8_auto, stock_sglang):
    replay, waits = replay_once(FULL)
    with stock_sglang():
        stock, stock_waits = replay_once(FULL)
    last = replay.pool.layer_num - 1
    # SGLang's own full-graph wait (for the last layer, hence all) is the only one, with or without us.
    assert waits.wait_until_calls == stock_waits.wait_until_calls == [last]
    assert replay.captured_reader_coverage == stock.captured_reader_coverage == {
        layer: last for layer in range(last + 1)
    }


@pytest.mark.parametrize("backend", [BREAKABLE, TC_PIECEWISE])
def test_gate_off_keeps_the_stock_schedule(fp8_auto, stock_sglang, backend):
    fp8_auto.setenv("SGLANG_DSV4_INDEX_K_GATE", "off")
    replay, waits = replay_once(backend)
    with stock_sglang():
        stock, stock_waits = replay_once(backend)
    assert replay.captured_reader_coverage == stock.captured_reader_coverage
    assert waits.wait_until_calls == stock_waits.wait_until_calls
