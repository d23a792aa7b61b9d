"""R3: SGLang's real prefill-graph runner path waits for the layers its captured readers need.

What is real: ``PrefillCudaGraphRunner.execute``, ``_wait_for_layer_loads``,
``_execute_body_capture`` (breakable) and ``_execute_tc_piecewise`` (tc-piecewise) as
SGLang 0.5.23 ships them with the extension's hooks (on SGLang 0.5.22, which has no
``_wait_for_layer_loads``, 0.5.22's own runner and our hook on ``execute``); the DSV4 pool and its gated getters; the
``LayerDoneCounter`` whose per-layer event waits are observed (``tests.support.gate_doubles.StreamWaits``).

The replay order is derived, not assumed (:func:`derive_breakable_replay_order`): from SGLang's
DSV4 model source (the decoder stack runs layers in order; in ``MQALayer.forward`` the
``_forward_prepare*`` step, which calls the C4 indexer, comes before the attention op, and that op
is ``eager_on_graph``-wrapped), and from SGLang's own ``eager_on_graph`` and
``BreakableCUDAGraph.replay`` run on CPU with a recording capture in place of the CUDA-graph
capture. The tc-piecewise backend is given the same order: its split op is the same attention call
(``deepseek_v4_mega_attention_with_output``), which this file does not derive.

What is stubbed, because a CUDA graph cannot be captured or replayed on CPU: the runner is
built with ``object.__new__`` and its GPU parts are stand-ins: ``model_context``,
``backend.replay_session``, ``load_batch`` (static buffers), ``_prefill_forward_context``
(SGLang's forward/graph contexts) and ``backend.replay``, the graph replay itself, which
:class:`BreakableReplay` performs in the derived order: a captured reader of layer L does no
Python and no wait, it only "reads", and we record which layers the stream had waited for at that
point; an eager break runs layer L's DSV4 attention getters (``get_swa_key_buffer_radix``,
``get_extra_key_buffer``) as ``deepseek_v4_backend.py`` does. The same on real CUDA graphs
(SGLang's ``BreakableCUDAGraph``), streams and HiCache loads runs on the H200 in
``tests/gpu/test_sglang_race_gpu.py``.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from sglang_dsv4_ext.runtime import compat
from tests.support import gate_doubles as gd
from tests.support.releases import RUNNING

BREAKABLE, TC_PIECEWISE, FULL = "breakable", "tc_piecewise", "full"
NUM_TOKENS = 8


# ---------------------------------------------------------------------------------------
# The replay order, derived from SGLang's own model and breakable-graph code
# ---------------------------------------------------------------------------------------

CAPTURED, BREAK = "captured", "break"
EAGER_ATTENTION = "bcg_deepseek_v4_attention_with_output"


def _dsv4_model_tree() -> ast.Module:
    spec = importlib.util.find_spec("sglang.srt.models.deepseek_v4")
    return ast.parse(Path(spec.origin).read_text())


def _method(tree: ast.Module, cls: str, name: str) -> ast.FunctionDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return item
    raise AssertionError(f"sglang.srt.models.deepseek_v4 has no {cls}.{name}: the model code moved")


def _calls(fn: ast.AST) -> list[tuple[int, str]]:
    """(line, callee) for calls to ``self.<attr>(...)`` or ``<name>(...)`` in ``fn``, in source order."""
    out = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
                out.append((node.lineno, f.attr))
            elif isinstance(f, ast.Name):
                out.append((node.lineno, f.id))
    return sorted(out)


def layer_step_order_from_model_source() -> list[str]:
    """One DSV4 attention layer's index-K steps as ``MQALayer.forward`` orders them: CAPTURED, BREAK.

    CAPTURED is ``_forward_prepare*`` (it calls ``self.indexer``: the C4 indexer reads index-K and
    is not eager); BREAK is the ``eager_on_graph``-wrapped attention op.
    """
    tree = _dsv4_model_tree()
    wrapped = [
        n
        for n in tree.body
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == EAGER_ATTENTION for t in n.targets)
    ]
    assert len(wrapped) == 1, f"{EAGER_ATTENTION} is not defined once at module level"
    wrapper = wrapped[0].value
    is_eager = (
        isinstance(wrapper, ast.Call)
        and isinstance(wrapper.func, ast.Call)
        and getattr(wrapper.func.func, "id", None) == "eager_on_graph"
    )
    assert is_eager, f"{EAGER_ATTENTION} is not eager_on_graph(...)(fn)"
    eager_body = wrapper.args[0].id
    eager_calls = {c for _, c in _calls(_top_function(tree, eager_body))}
    assert "indexer" not in eager_calls, "the eager attention op calls the indexer"
    prepare_calls_indexer = {c for _, c in _calls(_method(tree, "MQALayer", "_forward_prepare"))}
    assert "indexer" in prepare_calls_indexer, "MQALayer._forward_prepare no longer calls self.indexer"
    steps = []
    for _, callee in _calls(_method(tree, "MQALayer", "forward")):
        if callee.startswith("_forward_prepare") and (not steps or steps[-1] != CAPTURED):
            steps.append(CAPTURED)
        elif callee == EAGER_ATTENTION:
            steps.append(BREAK)
    return steps


def _top_function(tree: ast.Module, name: str) -> ast.FunctionDef:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise AssertionError(f"sglang.srt.models.deepseek_v4 has no function {name}")


def layers_run_in_order_in_model_source() -> bool:
    """``DeepseekV4Model.forward`` (or a ``self._forward*`` it calls) runs ``self.layers[i]`` for i in
    ``range(self.start_layer, self.end_layer)``."""
    tree = _dsv4_model_tree()
    forward = _method(tree, "DeepseekV4Model", "forward")
    bodies = [forward] + [
        _method(tree, "DeepseekV4Model", callee) for _, callee in _calls(forward) if callee.startswith("_forward")
    ]
    return any(_runs_layers_in_order(fn) for fn in bodies)


def _runs_layers_in_order(fn: ast.FunctionDef) -> bool:
    for node in ast.walk(fn):
        is_range = isinstance(node, ast.For) and isinstance(node.iter, ast.Call)
        if is_range and getattr(node.iter.func, "id", "") == "range":
            args = [ast.unparse(a) for a in node.iter.args]
            if args == ["self.start_layer", "self.end_layer"] and "self.layers[" in ast.unparse(node):
                return True
    return False


class _RecordingCapture:
    """Duck type of SGLang's ``BreakableCUDAGraphCapture`` that records events instead of CUDA work."""

    def __init__(self, graph, events: list[tuple[str, int]]):
        self.cuda_graph = graph
        self._barrier_fn = None
        self._events = events
        self._segment: list[tuple[str, int]] = []

    def _begin_new_segment(self) -> None:
        self._segment = []

    def _end_current_segment(self) -> None:
        recorded = list(self._segment)
        events = self._events
        self.cuda_graph._segments.append(SimpleNamespace(replay=lambda: events.extend(recorded)))

    def record(self, event: tuple[str, int]) -> None:
        self._segment.append(event)


def derive_breakable_replay_order(num_layers: int) -> list[tuple[str, int]]:
    """The order in which a breakable replay runs each layer's CAPTURED readers and its BREAK.

    The body is built from the model source (layers in order, each as ``MQALayer.forward`` orders
    its steps); SGLang's real ``eager_on_graph`` splits it into segments during a recording
    capture, and SGLang's real ``BreakableCUDAGraph.replay`` replays them.
    """
    from sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph import breakable_cuda_graph as bcg

    assert layers_run_in_order_in_model_source(), "DeepseekV4Model.forward no longer runs layers in order"
    steps = layer_step_order_from_model_source()
    replayed: list[tuple[str, int]] = []
    graph = bcg.BreakableCUDAGraph()
    capture = _RecordingCapture(graph, replayed)
    capturing = [True]

    @bcg.eager_on_graph(True)
    def attention(layer: int) -> None:
        if not capturing[0]:
            replayed.append((BREAK, layer))

    token = bcg._current_capture_var.set(capture)
    try:
        capture._begin_new_segment()
        for layer in range(num_layers):
            for step in steps:
                if step == CAPTURED:
                    capture.record((CAPTURED, layer))
                else:
                    attention(layer)
        capture._end_current_segment()
    finally:
        bcg._current_capture_var.reset(token)
    capturing[0] = False
    graph.replay()
    return replayed


def test_breakable_order_is_derived_from_sglang_code():
    """Layer L's captured readers replay after break L-1 and before break L (what R3 rests on)."""
    steps = layer_step_order_from_model_source()
    assert steps == [CAPTURED, BREAK]
    order = derive_breakable_replay_order(3)
    assert order == [(CAPTURED, 0), (BREAK, 0), (CAPTURED, 1), (BREAK, 1), (CAPTURED, 2), (BREAK, 2)]


def test_order_derivation_follows_the_model(monkeypatch):
    """The derived order comes from the model's step order: indexer after the eager op flips it."""
    import sys

    monkeypatch.setattr(sys.modules[__name__], "layer_step_order_from_model_source", lambda: [BREAK, CAPTURED])
    assert derive_breakable_replay_order(2) == [(BREAK, 0), (CAPTURED, 0), (BREAK, 1), (CAPTURED, 1)]


_ORDER_CACHE: dict[int, list[tuple[str, int]]] = {}


def breakable_replay_order(num_layers: int) -> list[tuple[str, int]]:
    if num_layers not in _ORDER_CACHE:
        _ORDER_CACHE[num_layers] = derive_breakable_replay_order(num_layers)
    return _ORDER_CACHE[num_layers]


class BreakableReplay:
    """Stand-in for ``backend.replay``: a captured prefill body, with eager attention breaks or not (full).

    With breaks, the body runs in :func:`breakable_replay_order`; a full graph has no breaks and
    runs every layer's captured readers.
    """

    def __init__(self, pool, waits: gd.StreamWaits, *, eager_breaks: bool):
        self.pool = pool
        self.waits = waits
        self.eager_breaks = eager_breaks
        self.captured_reader_coverage: dict[int, int] = {}
        self.break_coverage: dict[int, int] = {}

    def __call__(self, shape_key, static_forward_batch, **kwargs):
        assert shape_key.size == NUM_TOKENS
        if not self.eager_breaks:
            order = [(CAPTURED, layer) for layer in range(self.pool.layer_num)]
        else:
            order = breakable_replay_order(self.pool.layer_num)
        for kind, layer in order:
            if kind == CAPTURED:
                # Captured segment: layer L's indexer/compressor read layer L's index-K, no Python runs.
                self.captured_reader_coverage[layer] = self.waits.covered()
            else:
                # Eager break: DSV4 attention of layer L through the pool's gated getters.
                self.pool.get_swa_key_buffer_radix(layer)
                if self.pool.compression_ratios[layer]:
                    self.pool.get_extra_key_buffer(layer)
                self.break_coverage[layer] = self.waits.covered()
        return None  # hidden states are not under test; execute() passes None through


def stand_in_runner(pool, replay: BreakableReplay, backend: str):
    from sglang.srt.model_executor.cuda_graph_config import Backend

    from benchmarks.sglang_gpu.prefill_runner import prefill_runner_without_init

    sglang_backend = {BREAKABLE: Backend.BREAKABLE, FULL: Backend.FULL, TC_PIECEWISE: Backend.TC_PIECEWISE}[backend]
    runner, _ = prefill_runner_without_init(
        pool, backend=sglang_backend, replay=replay, tokens=NUM_TOKENS, device_module=torch.cpu
    )
    return runner


def forward_batch():
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    return SimpleNamespace(
        capture_hidden_mode=CaptureHiddenMode.NULL,
        mm_input_embeds=None,
        attn_tp_sequence_sharded=False,
        input_ids=torch.zeros(NUM_TOKENS, dtype=torch.long),
        positions=torch.arange(NUM_TOKENS),
    )


@pytest.fixture
def stock_sglang(monkeypatch):
    """Context manager: the runner and pool wait paths exactly as SGLang ships them (hooks removed)."""
    from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4TokenToKVPool
    from sglang.srt.model_executor.runner.prefill_cuda_graph_runner import PrefillCudaGraphRunner

    @contextlib.contextmanager
    def stock():
        with monkeypatch.context() as patch:
            for cls, name in (
                (PrefillCudaGraphRunner, "execute"),
                (PrefillCudaGraphRunner, "_wait_for_layer_loads"),
                (DeepSeekV4TokenToKVPool, "wait_layer_transfer"),
            ):
                if not hasattr(cls, name):
                    continue  # SGLang 0.5.22 has no _wait_for_layer_loads
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


def test_full_graph_backend_waits_for_every_layer_before_the_replay(fp8_auto, stock_sglang):
    replay, waits = replay_once(FULL)
    with stock_sglang():
        stock, stock_waits = replay_once(FULL)
    last = replay.pool.layer_num - 1
    # One wait, for the last layer (hence all), before any captured reader: SGLang 0.5.23's own
    # _wait_for_layer_loads, or on 0.5.22 (which has none) our execute hook's.
    assert waits.wait_until_calls == [last]
    assert replay.captured_reader_coverage == {layer: last for layer in range(last + 1)}
    if RUNNING == "0.5.22":
        # Stock 0.5.22 waits for nothing around a full replay: every captured reader ran before its load landed.
        assert stock_waits.wait_until_calls == []
        assert stock.captured_reader_coverage == {layer: -1 for layer in range(last + 1)}
    else:  # 0.5.23's own wait is the only one: left to SGLang
        assert stock_waits.wait_until_calls == [last]
        assert stock.captured_reader_coverage == replay.captured_reader_coverage


@pytest.mark.parametrize("backend", [BREAKABLE, TC_PIECEWISE])
def test_gate_off_keeps_the_stock_schedule(fp8_auto, stock_sglang, backend):
    fp8_auto.setenv("SGLANG_DSV4_INDEX_K_GATE", "off")
    replay, waits = replay_once(backend)
    with stock_sglang():
        stock, stock_waits = replay_once(backend)
    assert replay.captured_reader_coverage == stock.captured_reader_coverage
    assert waits.wait_until_calls == stock_waits.wait_until_calls
