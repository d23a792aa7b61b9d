"""The read gate's and the integrity hook's behaviour that the other gate and integrity tests leave unpinned.

Written from mutmut's survivors (docs/mutation-testing.md, set ``integrity_gate``). Activation collects the gate's
hooks once per process, so what ``gate.hooks`` decides (which SGLang methods it wraps, with which wrapper, which
readers the probe leaves alone) is tested here by calling it with a fresh ``HookContext``. Everything runs on
SGLang's real classes on CPU: the DSV4 pool and its sub-pools, the real ``LayerDoneCounter``
(``tests.support.gate_doubles.StreamWaits`` observes the waits it issues), and for the integrity hook SGLang's real
DeepSeek-V4 HiCache stack (``tests.support.dsv4_hicache_stack``, whose stubs are said there). Where a prefill-graph
runner is needed, ``_Runner`` stands in for it (a CUDA graph cannot be captured on CPU).
"""

from __future__ import annotations

import dataclasses
import gc
import os
import sys
import weakref

import pytest
import torch

from sglang_dsv4_ext import errors
from sglang_dsv4_ext.runtime import activation, compat
from sglang_dsv4_ext.runtime.hooks import HookContext, gate
from sglang_dsv4_ext.runtime.hooks.gate import replay, subpool, waits
from sglang_dsv4_ext.runtime.index_k import pool_lifecycle
from tests.support import dsv4_hicache_stack as hs
from tests.support import gate_doubles as gd
from tests.support.releases import only_on

WAIT_HOOKS = {
    compat.POOL_WAIT_LAYER_TRANSFER.path: waits.around_wait_layer_transfer,
    compat.COUNTER_SET_CONSUMER.path: waits.around_set_consumer,
    compat.COUNTER_WAIT_UNTIL.path: waits.around_wait_until,
    compat.PREFILL_GRAPH_WAIT_FOR_LAYER_LOADS.path: replay.around_wait_for_layer_loads,
}


def _context(release: str, wants=lambda target: True) -> HookContext:
    return HookContext(process=activation, release=release, wants=wants)


@pytest.mark.parametrize(
    "release, execute_hook",
    [("0.5.23", replay.around_prefill_execute), ("0.5.22", replay.around_prefill_execute_waiting_first)],
)
def test_the_gate_wraps_the_wait_bookkeeping_and_the_replay_around_sglangs_own(ext_active, release, execute_hook):
    # Every one of these takes SGLang's method as its first argument: they must be "around" hooks.
    by_target = {h.target.path: h for h in gate.hooks(_context(release))}
    for path, fn in {**WAIT_HOOKS, compat.PREFILL_GRAPH_EXECUTE.path: execute_hook}.items():
        assert by_target[path].fn is fn, path
        assert by_target[path].kind == "around", path


def test_each_pool_is_linked_by_one_gate_subscriber(ext_active):
    gate.hooks(_context("0.5.23"))
    gate.hooks(_context("0.5.23"))  # collected again (another activation): the subscriber is replaced, not added
    linkers = [cb for cb in pool_lifecycle._POOL_CREATED.values() if cb is subpool.link_subpools]
    assert len(linkers) == 1


def test_readers_sglang_already_gates_are_left_alone_and_said_why(ext_active):
    ctx = _context("0.5.23")
    hooked = {h.target.path for h in gate.hooks(ctx)}
    for target in compat.TOPLEVEL_INDEX_K_READERS:  # 0.5.23's top-level getters wait for their layer
        assert ctx.accessor_verdicts[target.path] == gate.UPSTREAM_GATED
        assert "already waits" in ctx.not_needed[target.path]
        assert target.path not in hooked
    for target in compat.SUBPOOL_INDEX_K_READERS:
        assert ctx.accessor_verdicts[target.path] == gate.EXTENSION_GATED
        assert target.path in hooked and target.path not in ctx.not_needed


def test_readers_of_a_module_sglang_has_not_imported_are_not_probed(ext_active):
    # The first reader's module is "not imported yet": it is skipped, the readers after it are still probed.
    skipped = compat.SUBPOOL_INDEX_K_READERS[0].path
    ctx = _context("0.5.23", wants=lambda target: target.path != skipped)
    hooked = {h.target.path for h in gate.hooks(ctx)}
    assert skipped not in hooked and skipped not in ctx.accessor_verdicts and skipped not in ctx.not_needed
    for target in compat.SUBPOOL_INDEX_K_READERS[1:]:
        assert target.path in hooked and ctx.accessor_verdicts[target.path] == gate.EXTENSION_GATED
    assert compat.POOL_WAIT_LAYER_TRANSFER.path in hooked  # the rest is still collected


def _recording_original(*args, **kwargs):
    return args, kwargs


@pytest.mark.parametrize("name", list(gate.SUBPOOL_READERS))
def test_each_subpool_reader_hook_hands_the_read_on_unchanged_when_nothing_is_pending(ext_active, gate_mode, name):
    (hook,) = [h for h in gate.hooks(_context("0.5.23")) if h.target.path.endswith(f"DeepSeekV4IndexerPool.{name}")]
    gate_mode("strict")
    pool = gd.build_pool()
    sub = pool.c4_indexer_kv_pool
    assert pool.layer_transfer_counter is None  # HiCache off
    assert hook.fn(_recording_original, sub, 1) == ((sub, 1), {})
    gd.StreamWaits.on(pool).counter.set_consumer(-1)  # HiCache on, nothing to load for this batch
    assert hook.fn(_recording_original, sub, 1, "slots", dtype="x") == ((sub, 1, "slots"), {"dtype": "x"})
    assert hook.fn(_recording_original, sub, 0, "slots") == ((sub, 0, "slots"), {})
    assert hook.fn(_recording_original, sub, 0, dtype="x") == ((sub, 0), {"dtype": "x"})


@pytest.mark.parametrize("name", list(gate.SUBPOOL_READERS))
def test_each_subpool_reader_hook_refuses_naming_its_own_reader(ext_active, gate_mode, name):
    (hook,) = [h for h in gate.hooks(_context("0.5.23")) if h.target.path.endswith(f"DeepSeekV4IndexerPool.{name}")]
    assert hook.kind == "around"
    gate_mode("strict")
    pool = gd.build_pool()
    gd.StreamWaits.on(pool).start_load()
    original = compat.unwrap_to_original(getattr(type(pool.c4_indexer_kv_pool), name))
    extra = [None] * gate.SUBPOOL_READERS[name]
    with pytest.raises(errors.DSV4IndexKGateError, match=rf"DeepSeekV4IndexerPool\.{name} read layer 3's"):
        hook.fn(original, pool.c4_indexer_kv_pool, 1, *extra)


def test_a_toplevel_reader_that_does_not_wait_gets_the_toplevel_gate(ext_active, gate_mode, monkeypatch):
    drifted = dataclasses.replace(compat.TOPLEVEL_INDEX_K_READERS[0], path=gd.TOPLEVEL_DOUBLE_TARGET)
    monkeypatch.setattr(compat, "TOPLEVEL_INDEX_K_READERS", (drifted,))  # the probe finds this one ungated
    ctx = _context("0.5.23")
    (hook,) = [h for h in gate.hooks(ctx) if h.target is drifted]
    assert hook.fn is gate.gate_toplevel_reader and hook.kind == "around"
    assert ctx.accessor_verdicts[drifted.path] == gate.EXTENSION_GATED and drifted.path not in ctx.not_needed

    gate_mode("auto")
    pool = gd.build_pool(gd.Dsv4PoolWithoutIndexKWait)
    observed = gd.StreamWaits.on(pool)
    observed.start_load()
    hook.fn(gd.Dsv4PoolWithoutIndexKWait.get_index_k_with_scale_buffer, pool, 3)
    assert observed.covered() == 3  # waited for layer 3's load before the drifted reader ran
    assert hook.fn(_recording_original, pool, 1, "slots", dtype="x") == ((pool, 1, "slots"), {"dtype": "x"})


def test_the_toplevel_gate_waits_for_nothing_with_the_gate_off(ext_active, gate_mode):
    gate_mode("off")
    pool = gd.build_pool(gd.Dsv4PoolWithoutIndexKWait)
    observed = gd.StreamWaits.on(pool)
    observed.start_load()
    assert gate.gate_toplevel_reader(_recording_original, pool, 3) == ((pool, 3), {})
    assert observed.wait_until_calls == [] and observed.stream_waits == []


# ---------------------------------------------------------------------------------------
# SGLang 0.5.22's replay: the hook on execute waits before the replay (no _wait_for_layer_loads there)
# ---------------------------------------------------------------------------------------


class _Runner:
    """Stands in for ``PrefillCudaGraphRunner`` (a CUDA graph cannot be captured on CPU): only the two
    attributes the hook reads, the model runner's KV pool and whether the backend is the full graph."""

    def __init__(self, pool, full: bool):
        self.model_runner = type("ModelRunner", (), {})()
        self.model_runner.token_to_kv_pool = pool
        self._is_full_backend = full


def _pool_with_a_pending_load(gate_mode, mode: str = "auto"):
    """A DSV4 pool under gate ``mode`` whose counter has a HiCache load in flight, and its recorded waits."""
    gate_mode(mode)
    pool = gd.build_pool()
    observed = gd.StreamWaits.on(pool)
    observed.start_load()
    return pool, observed


def _replay_reading_layer_3(pool, observed, seen):
    """The replay: layer 2's eager break waits for its load, then layer 3's captured reader reads."""

    def replay(runner, forward_batch, **kwargs):
        seen.append((runner, forward_batch, kwargs, observed.covered()))
        pool.wait_layer_transfer(2)
        seen.append(observed.covered())
        return "replayed"

    return replay


@pytest.mark.parametrize("full, first_wait", [(True, 3), (False, 0)])
def test_on_0_5_22_a_replay_with_a_pending_load_waits_first(ext_active, gate_mode, full, first_wait):
    pool, observed = _pool_with_a_pending_load(gate_mode)
    runner, batch, seen = _Runner(pool, full), object(), []
    replay_fn = _replay_reading_layer_3(pool, observed, seen)

    assert replay.around_prefill_execute_waiting_first(replay_fn, runner, batch, flag=1) == "replayed"
    assert seen[0] == (runner, batch, {"flag": 1}, first_wait)  # every layer (full graph) or layer 0, before it
    assert seen[1] == 3
    # A full graph waited for every layer first and replays without look-ahead; inside a breakable replay the
    # wait at layer 2's break also waits for layer 3, whose captured reader replays next.
    assert observed.wait_until_calls == ([3, 2] if full else [0, 2, 3])


def test_on_0_5_22_a_breakable_replay_waits_one_layer_ahead_only_inside_the_replay(ext_active, gate_mode):
    pool, observed = _pool_with_a_pending_load(gate_mode)
    seen = []
    replay.around_prefill_execute_waiting_first(_replay_reading_layer_3(pool, observed, seen), _Runner(pool, False), 0)
    assert seen[1] == 3  # the wait for layer 2 looked ahead to layer 3
    observed.start_load()
    pool.wait_layer_transfer(2)  # after the replay: no look-ahead
    assert observed.covered() == 2


@pytest.mark.parametrize("case", ["gate off", "no load pending", "not a DSV4 pool"])
def test_on_0_5_22_a_replay_waits_for_nothing_it_need_not(ext_active, gate_mode, case):
    gate_mode("off" if case == "gate off" else "auto")
    pool = gd.build_pool()
    observed = gd.StreamWaits.on(pool)
    if case != "no load pending":
        observed.start_load()
    else:
        observed.counter.set_consumer(-1)
    runner = _Runner(object() if case == "not a DSV4 pool" else pool, False)
    calls = []
    result = replay.around_prefill_execute_waiting_first(
        lambda r, b, **kw: calls.append((r, b, kw)) or "replayed", runner, "batch", flag=2
    )
    assert result == "replayed" and calls == [(runner, "batch", {"flag": 2})]
    assert observed.wait_until_calls == [] and observed.stream_waits == []


# ---------------------------------------------------------------------------------------
# SGLang 0.5.23's replay: the hook on execute, and the wait before a breakable replay
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("full, wait_until_calls", [(True, [2]), (False, [2, 3])])
def test_on_0_5_23_only_a_breakable_replay_waits_one_layer_ahead(ext_active, gate_mode, full, wait_until_calls):
    # The hook itself waits for nothing first (0.5.23's own _wait_for_layer_loads does); a full graph replays no eager
    # break, so a wait inside it (layer 2's here) looks ahead only in a breakable replay.
    pool, observed = _pool_with_a_pending_load(gate_mode)
    runner, batch, seen = _Runner(pool, full), object(), []
    replay_fn = _replay_reading_layer_3(pool, observed, seen)

    assert replay.around_prefill_execute(replay_fn, runner, batch, flag=1) == "replayed"
    assert seen[0] == (runner, batch, {"flag": 1}, -1)
    assert observed.wait_until_calls == wait_until_calls


@pytest.mark.parametrize("case", ["gate off", "not a DSV4 pool", "full graph"])
def test_on_0_5_23_a_replay_the_gate_leaves_alone_gets_its_arguments_unchanged(ext_active, gate_mode, case):
    gate_mode("off" if case == "gate off" else "auto")
    pool = gd.build_pool()
    observed = gd.StreamWaits.on(pool)
    observed.start_load()
    runner = _Runner(object() if case == "not a DSV4 pool" else pool, case == "full graph")
    calls = []

    def stock_execute(r, b, **kw):
        calls.append((r, b, kw))
        pool.wait_layer_transfer(2)
        return "replayed"

    assert replay.around_prefill_execute(stock_execute, runner, "batch", flag=2) == "replayed"
    assert calls == [(runner, "batch", {"flag": 2})]
    assert observed.wait_until_calls == [2]  # the replay's own wait, with no look-ahead


@only_on("0.5.23", "0.5.22 has no _wait_for_layer_loads: its execute hook waits first (the 0.5.22 tests above)")
def test_on_0_5_23_a_breakable_replay_waits_for_layer_0_alone_before_it_starts(ext_active, gate_mode):
    from sglang.srt.model_executor.runner.prefill_cuda_graph_runner import PrefillCudaGraphRunner

    pool, observed = _pool_with_a_pending_load(gate_mode, "strict")
    stock = compat.unwrap_to_original(PrefillCudaGraphRunner._wait_for_layer_loads)  # a no-op for a breakable graph
    replay.around_wait_for_layer_loads(stock, _Runner(pool, False))
    assert observed.wait_until_calls == [0] and observed.covered() == 0
    # Layer 1's load has not been waited for: a read of it (c4 sub-pool layer 0) before its break is still refused.
    with pytest.raises(errors.DSV4IndexKGateError, match="layer 1's"):
        pool.c4_indexer_kv_pool.index_k_with_scale_buffer[0]


# ---------------------------------------------------------------------------------------
# Which waits count for the reads after them
# ---------------------------------------------------------------------------------------


def test_a_wait_for_a_lower_layer_after_a_higher_one_keeps_the_higher_one_waited(ext_active, gate_mode):
    pool, observed = _pool_with_a_pending_load(gate_mode, "strict")
    sub = pool.c4_indexer_kv_pool
    pool.wait_layer_transfer(3)
    pool.wait_layer_transfer(1)  # layer 1's own wait, after layer 3's: layers up to 3 have landed all the same
    assert observed.covered() == 3
    assert sub.index_k_with_scale_buffer[1] is list.__getitem__(sub.index_k_with_scale_buffer, 1)  # global layer 3
    assert sub.get_index_k_with_scale_buffer(1) is list.__getitem__(sub.index_k_with_scale_buffer, 1)
    assert observed.wait_until_calls == [3, 1]  # the reads waited for nothing more


def test_a_wait_sglang_makes_on_the_counter_itself_counts_for_the_reads_after_it(ext_active, gate_mode):
    gate_mode("strict")
    pool = gd.build_pool()
    sub = pool.c4_indexer_kv_pool
    observed = gd.StreamWaits.on(pool)
    assert observed.start_load() == 0  # the first batch with a load is consumer 0
    last = pool.layer_num - 1
    observed.counter.wait_until(last)  # as SGLang 0.5.23's full-graph _wait_for_layer_loads does, past the pool
    assert sub.get_index_k_with_scale_buffer(1) is list.__getitem__(sub.index_k_with_scale_buffer, 1)
    assert sub.index_k_with_scale_buffer[0] is list.__getitem__(sub.index_k_with_scale_buffer, 0)
    assert observed.wait_until_calls == [last]


# ---------------------------------------------------------------------------------------
# The raw buffer list: what item access gates and what it leaves to the list
# ---------------------------------------------------------------------------------------


def test_slices_of_the_raw_list_stay_ungated_during_a_pending_load(ext_active, gate_mode):
    gate_mode("strict")
    pool = gd.build_pool()
    buffers = pool.c4_indexer_kv_pool.index_k_with_scale_buffer
    observed = gd.StreamWaits.on(pool)
    observed.start_load()
    whole = buffers[:]  # PD and HiCache take the whole list: no layer is read
    assert [id(t) for t in whole] == [id(list.__getitem__(buffers, i)) for i in range(len(buffers))]
    (second,) = buffers[1:]
    assert second is list.__getitem__(buffers, 1)
    assert observed.wait_until_calls == [] and observed.stream_waits == []


def test_an_index_past_the_raw_list_raises_index_error_and_is_not_refused_as_a_read(ext_active, gate_mode):
    gate_mode("strict")
    pool = gd.build_pool()
    buffers = pool.c4_indexer_kv_pool.index_k_with_scale_buffer
    gd.StreamWaits.on(pool).start_load()
    for past in (len(buffers), -len(buffers) - 1):
        with pytest.raises(IndexError):
            buffers[past]


def test_the_raw_list_stays_readable_after_its_pool_is_gone(ext_active, gate_mode):
    # HiCache's host mirror keeps the raw list as its device buffers: it may outlive the pool in a teardown.
    gate_mode("strict")
    pool = gd.build_pool()
    buffers = pool.c4_indexer_kv_pool.index_k_with_scale_buffer
    first = list.__getitem__(buffers, 0)
    gone = weakref.ref(pool)
    del pool
    gc.collect()
    assert gone() is None
    assert buffers[0] is first


def test_a_raw_list_read_inside_sglangs_pool_module_names_the_code_that_called_the_pool(ext_active, gate_mode):
    """A sub-pool reader without our reader hook (SGLang's body as it ships) is caught at the raw list; the refusal
    names this test, which called into the pool, not the pool module's line that indexed the list."""
    gate_mode("strict")
    pool = gd.build_pool()
    sub = pool.c4_indexer_kv_pool
    gd.StreamWaits.on(pool).start_load()
    unhooked_reader = compat.unwrap_to_original(type(sub).get_index_k_with_scale_buffer)
    with pytest.raises(errors.DSV4IndexKGateError) as refused:
        unhooked_reader(sub, 0)
    message = str(refused.value)
    assert "index_k_with_scale_buffer[...] read layer 1's" in message
    assert "deepseek_v4_memory_pool.py" not in message
    assert f"{os.path.basename(__file__)}:" in message and f"in {sys._getframe().f_code.co_name})" in message


# ---------------------------------------------------------------------------------------
# The integrity hook's table of hooks, and PD's checksum mismatches
# ---------------------------------------------------------------------------------------


def test_the_integrity_hook_runs_after_sglangs_methods_and_before_pds_mismatch_handler(ext_active):
    from sglang_dsv4_ext.runtime.hooks import integrity

    process = object()
    by_target = {h.target.path: h for h in integrity.hooks(HookContext(process=process))}
    after = {
        compat.INTEGRITY_HOST_POOL_BACKUP: integrity._after_backup,
        compat.INTEGRITY_HOST_POOL_LOAD: integrity._after_load_layer,
        compat.INTEGRITY_HOST_POOL_FREE: integrity._after_free,
        compat.INTEGRITY_HOST_POOL_CLEAR: integrity._after_clear,
        compat.INTEGRITY_HOST_POOL_GROUP_INIT: integrity._after_group_init,
        compat.INTEGRITY_ANCHOR_ALLOC: integrity._after_anchor_alloc,
        compat.INTEGRITY_ANCHOR_FREE: integrity._after_anchor_free,
        compat.INTEGRITY_C4_INDEXER_FORWARD: integrity._after_c4_indexer_forward,
    }
    assert len(by_target) == len(after) + 2
    for target, fn in after.items():
        assert (by_target[target.path].fn, by_target[target.path].kind) == (fn, "after"), target.path
    # The two that report the launch get this process's record bound.
    init = by_target[compat.INTEGRITY_HOST_POOL_INIT.path]
    pd = by_target[compat.INTEGRITY_PD_CHECKSUM_MISMATCH.path]
    assert (init.fn.func, init.fn.args, init.kind) == (integrity._after_host_pool_init, (process,), "after")
    assert (pd.fn.func, pd.fn.args, pd.kind) == (integrity._before_pd_checksum_mismatch, (process,), "before")


class _Process:
    """The two answers of activation's process record the integrity hook reads."""

    def __init__(self, launch: str, built_index_k_dtype: str = "fp8"):
        self.launch = launch
        self.built = built_index_k_dtype

    def current_launch(self) -> str:
        return self.launch

    def built_index_k_dtype(self) -> str:
        return self.built


@pytest.mark.parametrize("mode", ["sample", "full", "off"])
def test_a_pd_checksum_mismatch_is_counted_under_pd_with_its_request_and_launch(monkeypatch, caplog, mode):
    from prometheus_client import REGISTRY

    from sglang_dsv4_ext.runtime.hooks import integrity
    from sglang_dsv4_ext.runtime.index_k import integrity as ii

    launch = f"pd-test-{mode}@1764600000.00"
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_INTEGRITY", mode)
    labels = {**ii.series_labels(ii.WHERE_PD), "launch": launch}
    before = REGISTRY.get_sample_value(ii.METRIC_NAME, labels) or 0.0
    request = type("Req", (), {"rid": 4711})()
    try:
        with caplog.at_level("ERROR", logger=ii.logger.name):
            integrity._before_pd_checksum_mismatch(_Process(launch), object(), request, "kv checksum mismatch")
    finally:
        ii.use_launch(ii.UNKNOWN_LAUNCH)
    counted = (REGISTRY.get_sample_value(ii.METRIC_NAME, labels) or 0.0) - before
    if mode == "off":
        assert counted == 0.0 and "4711" not in caplog.text
        return
    assert counted == 1.0
    assert "(pd)" in caplog.text and "4711" in caplog.text
    # PD's digest covers the whole request: it names neither a layer nor a page
    assert "layer unknown" in caplog.text and "page unknown" in caplog.text


# ---------------------------------------------------------------------------------------
# The integrity hook on SGLang's real HiCache stack and host pools
# ---------------------------------------------------------------------------------------

C4_LAYERS = 2  # c4 layers of gate_doubles.RATIOS


@pytest.fixture
def integrity_mode(ext_active, monkeypatch):
    """Set the integrity mode for the stacks built afterwards (read at host pool creation); fp8, gate off."""
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", "fp8")
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_GATE", "off")

    def set_mode(mode: str) -> None:
        monkeypatch.setenv("SGLANG_DSV4_INDEX_K_INTEGRITY", mode)

    return set_mode


def _read_and_report(stack):
    from sglang_dsv4_ext.runtime.hooks import integrity
    from sglang_dsv4_ext.runtime.index_k import integrity as ii

    tracker = integrity.tracker_of(stack.c4_host)
    hs.read_c4_layers(stack.pool)
    ii.report(tracker.drain())
    return tracker


def test_with_integrity_off_hicache_allocates_and_frees_host_pages_as_stock(integrity_mode, monkeypatch):
    from sglang.srt.mem_cache.hicache_storage import PoolName

    from sglang_dsv4_ext.runtime.hooks import integrity

    integrity_mode("off")
    stack = hs.build(monkeypatch)
    assert integrity.tracker_of(stack.c4_host) is None
    free_before = stack.anchor.available_size()
    pages = stack.anchor.alloc(2 * hs.PAGE)  # the KV anchor: no mirror borrows its pages
    assert pages is not None and pages.numel() == 2 * hs.PAGE
    assert stack.anchor.free(pages) == 2 * hs.PAGE
    assert stack.anchor.available_size() == free_before
    # a mirror's own pages, freed through the group (an untracked host pool)
    mirror_pages = stack.group.alloc(hs.PAGE, pool=PoolName.DEEPSEEK_V4_C4_INDEXER)
    assert stack.group.free(mirror_pages, pool=PoolName.DEEPSEEK_V4_C4_INDEXER) == hs.PAGE


def test_an_anchor_allocation_that_finds_no_room_returns_none(integrity_mode, monkeypatch):
    from sglang_dsv4_ext.runtime.hooks import integrity

    integrity_mode("full")
    stack = hs.build(monkeypatch)
    assert getattr(stack.anchor, integrity._BORROWERS) == [stack.c4_host]  # the tracked mirror borrows its pages
    assert stack.anchor.alloc(stack.anchor.size + hs.PAGE) is None  # SGLang's answer when the host pool is full


def test_pages_loaded_without_a_backup_in_this_process_are_counted_without_a_checksum(integrity_mode, monkeypatch):
    """A host page filled from elsewhere (an L3 store, a PD host receive) and loaded before this process backed
    anything up: the reader still gets the tracker, and counts the pages as loaded but not checked."""
    from sglang_dsv4_ext.runtime.index_k import integrity as ii

    integrity_mode("full")
    stack = hs.build(monkeypatch)
    host = stack.anchor.alloc(2 * hs.PAGE)  # a new owner, as the prefetch or the host receive allocates it
    hs.load(stack, host)
    tracker = _read_and_report(stack)
    assert tracker.pages_checked == 0 and tracker.unchecked[ii.NO_CHECKSUM] == 2 * C4_LAYERS
    assert tracker.unverified_pages == 0


def test_a_transfer_with_no_pages_leaves_the_pending_verification_alone(integrity_mode, monkeypatch):
    from sglang_dsv4_ext.runtime.index_k import integrity as ii

    integrity_mode("full")
    stack = hs.build(monkeypatch)
    host = stack.controller.write(hs.tokens([1, 2]), node_id=1, extra_pools=hs.c4_sidecar())
    device = hs.load(stack, host)
    empty = torch.empty(0, dtype=torch.int64)
    c4 = stack.pool.c4_indexer_kv_pool
    # SGLang's own host pool methods return at once on these; the hooks run after them all the same.
    for host_indices, device_indices in ((empty, empty), (None, device), (host, None)):
        stack.c4_host.backup_from_device_all_layer(c4, host_indices, device_indices, "direct")
        stack.c4_host.load_to_device_per_layer(c4, host_indices, device_indices, 0, "direct")
    tracker = _read_and_report(stack)
    assert tracker.pages_checked == 2 * C4_LAYERS and tracker.mismatches == 0
    assert tracker.unverified_pages == 0 and tracker.unchecked[ii.NO_CHECKSUM] == 0


def test_a_second_mirror_of_the_same_device_sub_pool_leaves_the_tracker_to_the_reader(integrity_mode, monkeypatch):
    """fp4 index-K in AITER's layout (ROCm) keeps its scales in a second host mirror of the same device sub-pool
    (``DEEPSEEK_V4_C4_INDEXER_SCALE``), which integrity does not track. Built here on CPU: SGLang's real
    ``DeepSeekV4PagedHostPool`` under that name, over scale buffers of the AITER shape's page rows."""
    from sglang.srt.mem_cache.hicache_storage import PoolName
    from sglang.srt.mem_cache.memory_pool_host import DeepSeekV4PagedHostPool

    from sglang_dsv4_ext.runtime.hooks import integrity

    integrity_mode("full")
    stack = hs.build(monkeypatch)
    c4 = stack.pool.c4_indexer_kv_pool
    rows = list.__getitem__(c4.index_k_with_scale_buffer, 0).shape[0]
    scales = [torch.zeros(rows, 4 * 64, dtype=torch.uint8) for _ in range(C4_LAYERS)]
    scale_host = DeepSeekV4PagedHostPool(
        pool_name=str(PoolName.DEEPSEEK_V4_C4_INDEXER_SCALE),
        device_buffers=scales,
        item_bytes=4 * 64,
        num_host_pages=hs.HOST_PAGES,
        slot_page_size=hs.PAGE,
        layout="layer_first",
        pin_memory=False,
        page_aligned_only=True,
    )
    assert integrity.tracker_of(scale_host) is None
    host = stack.controller.write(hs.tokens([1, 2]), node_id=1, extra_pools=hs.c4_sidecar())
    scale_host.backup_from_device_all_layer(c4, host, hs.tokens([1, 2]), "direct")
    device = hs.load(stack, host)
    for layer in range(C4_LAYERS):  # the scale region's load, after the payload's, into the same device pages
        scale_host.load_to_device_per_layer(c4, host, device, layer, "direct")
    tracker = _read_and_report(stack)
    assert tracker.pages_checked == 2 * C4_LAYERS and tracker.mismatches == 0


def _indexer_mirror(pool, page_aligned_only: bool | None = None):
    """The c4 indexer region SGLang's assembler makes of ``pool`` and its host mirror, built as the assembler builds
    it (``page_aligned_only``: the region's own unless given)."""
    from sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler import _dsv4_indexer_regions
    from sglang.srt.mem_cache.memory_pool_host import DeepSeekV4PagedHostPool

    (region,) = _dsv4_indexer_regions(pool, hs.PAGE)
    mirror = DeepSeekV4PagedHostPool(
        pool_name=region.name,
        device_buffers=region.device_buffers,
        item_bytes=region.item_bytes,
        num_host_pages=hs.HOST_PAGES,
        slot_page_size=region.slot_page_size,
        layout="layer_first",
        pin_memory=False,
        page_aligned_only=region.page_aligned_only if page_aligned_only is None else page_aligned_only,
    )
    return region, mirror


def test_a_group_anchored_on_another_pool_than_kv_says_its_reused_pages_are_not_forgotten(integrity_mode, caplog):
    """HostPoolGroup built as SGLang's assembler would if it anchored the c4 indexer mirror on another pool: the
    mirror is not linked to that anchor, and the warning names it."""
    from sglang.srt.mem_cache.hicache_storage import PoolName
    from sglang.srt.mem_cache.memory_pool_host import LogicalHostPool
    from sglang.srt.mem_cache.pool_host import HostPoolGroup, PoolEntry

    from sglang_dsv4_ext.runtime.hooks import integrity

    integrity_mode("full")
    pool = gd.build_pool()
    region, mirror = _indexer_mirror(pool)
    assert integrity.tracker_of(mirror) is not None
    anchor = LogicalHostPool(hs.HOST_PAGES * hs.PAGE, hs.PAGE)
    with caplog.at_level("WARNING", logger="sglang_dsv4_ext.integrity"):
        HostPoolGroup(
            [
                PoolEntry(PoolName.SWA, anchor, pool.swa_kv_pool, lambda layer: layer, is_primary_index_anchor=True),
                PoolEntry(region.name, mirror, pool.c4_indexer_kv_pool, lambda layer: layer),
            ]
        )
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "sglang_dsv4_ext.integrity"]
    assert f"anchored on {PoolName.SWA}" in warning and "c4 indexer mirror" in warning
    assert not hasattr(anchor, integrity._BORROWERS)


@pytest.mark.parametrize(
    "built, rocm, payload_only",
    [("fp8", False, False), ("fp4", False, False), ("fp8", True, False), ("fp4", True, True)],
)
def test_a_tracked_mirror_says_what_it_checksums_and_aiters_fp4_layout_covers_the_payload_only(
    integrity_mode, monkeypatch, caplog, built, rocm, payload_only
):
    """The series' ``regions`` label and the startup line follow the built index-K dtype and the platform: only fp4
    on ROCm (AITER's layout: scales in a second host region) checksums the payload alone. ROCm is emulated by
    ``torch.version.hip`` (the one thing the hook asks of the platform); the hook is called as HookRegistry calls it
    after ``DeepSeekV4PagedHostPool.__init__``, with a stand-in of activation's process record."""

    from sglang_dsv4_ext.runtime.hooks import integrity
    from sglang_dsv4_ext.runtime.index_k import integrity as ii

    integrity_mode("off")  # the mirror is built untracked; the hook call below makes its tracker
    pool = gd.build_pool()
    region, mirror = _indexer_mirror(pool)
    integrity_mode("full")
    monkeypatch.setattr(torch.version, "hip", "6.3.0" if rocm else None)
    monkeypatch.setattr(ii, "_REGIONS", list(ii._REGIONS))  # the hook sets both process-wide: put back after the test
    monkeypatch.setattr(ii, "_LAUNCH", list(ii._LAUNCH))
    with caplog.at_level("INFO", logger="sglang_dsv4_ext.integrity"):
        integrity._after_host_pool_init(
            _Process("regions-test@1764600000.00", built),
            None,
            mirror,
            region.name,
            region.device_buffers,
            region.item_bytes,
            hs.HOST_PAGES,
        )
    assert integrity.tracker_of(mirror) is not None
    assert ii.series_labels(ii.WHERE_LOAD)["regions"] == (ii.PAYLOAD_ONLY if payload_only else ii.WHOLE_PAGE)
    (line,) = [r.getMessage() for r in caplog.records if r.name == "sglang_dsv4_ext.integrity"]
    assert f"integrity full: checksums for {C4_LAYERS} layers x {hs.HOST_PAGES} host pages" in line
    if payload_only:
        assert "the payload region only" in line
    else:
        assert line.endswith(f"{hs.HOST_PAGES} host pages")  # nothing said of a scale region


def test_a_token_granular_backup_forgets_the_host_pages_it_wrote_into(integrity_mode, monkeypatch):
    """A mirror SGLang lets move single tokens (``page_aligned_only=False``: stock SGLang's fused region, which the
    extension's hicache hook keeps only for NPU storage): a backup of some tokens of a host page leaves no whole page
    to checksum, so that page's earlier checksum is forgotten. Stubbed: the two CUDA copies (HiCache's direct page
    copy, by its plain-torch stand-in, and the token-granular ``transfer_cache_dsv4_mla``, by a recorder)."""
    import sglang.srt.mem_cache.memory_pool_host as mph

    from benchmarks.sglang_gpu import standins
    from kernels_sm120 import index_k_checksum as ck
    from sglang_dsv4_ext.runtime.hooks import integrity

    token_copies = []
    monkeypatch.setattr(mph, "transfer_kv_direct", standins.transfer_kv_direct, raising=False)
    monkeypatch.setattr(mph, "transfer_cache_dsv4_mla", lambda **kw: token_copies.append(kw), raising=False)
    integrity_mode("full")
    pool = gd.build_pool()
    region, mirror = _indexer_mirror(pool, page_aligned_only=False)
    tracker = integrity.tracker_of(mirror)
    c4 = pool.c4_indexer_kv_pool
    mirror.backup_from_device_all_layer(c4, hs.tokens([0, 1]), hs.tokens([1, 2]), "direct")  # whole host pages 0, 1
    assert (tracker.table[:, :2] != ck.NO_MISMATCH).all()
    mirror.backup_from_device_all_layer(c4, torch.tensor([hs.PAGE + 5]), torch.tensor([3 * hs.PAGE + 5]), "direct")
    assert len(token_copies) == 1  # SGLang copied the one token
    assert (tracker.table[:, 1] == ck.NO_MISMATCH).all() and (tracker.table[:, 0] != ck.NO_MISMATCH).all()
