"""The read gate's and the integrity hook's behaviour that the other gate and integrity tests leave unpinned.

Written from mutmut's survivors (docs/mutation-testing.md, set ``integrity_gate``). Activation collects the gate's
hooks once per process, so what ``gate.hooks`` decides (which SGLang methods it wraps, with which wrapper, which
readers the probe leaves alone) is tested here by calling it with a fresh ``HookContext``. Everything runs on
SGLang's real classes on CPU: the DSV4 pool and its sub-pools, the real ``LayerDoneCounter``
(``tests.support.gate_doubles.StreamWaits`` observes the waits it issues).
"""

from __future__ import annotations

import dataclasses

import pytest

from sglang_dsv4_ext import errors
from sglang_dsv4_ext.runtime import activation, compat
from sglang_dsv4_ext.runtime.hooks import HookContext, gate
from sglang_dsv4_ext.runtime.hooks.gate import replay, subpool, waits
from sglang_dsv4_ext.runtime.index_k import pool_lifecycle
from tests.support import gate_doubles as gd

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
    gate_mode("auto")
    pool = gd.build_pool()
    observed = gd.StreamWaits.on(pool)
    observed.start_load()
    runner, batch, seen = _Runner(pool, full), object(), []
    replay_fn = _replay_reading_layer_3(pool, observed, seen)

    assert replay.around_prefill_execute_waiting_first(replay_fn, runner, batch, flag=1) == "replayed"
    assert seen[0] == (runner, batch, {"flag": 1}, first_wait)  # every layer (full graph) or layer 0, before it
    assert seen[1] == 3
    # A full graph waited for every layer first and replays without look-ahead; inside a breakable replay the
    # wait at layer 2's break also waits for layer 3, whose captured reader replays next.
    assert observed.wait_until_calls == ([3, 2] if full else [0, 2, 3])


def test_on_0_5_22_a_breakable_replay_waits_one_layer_ahead_only_inside_the_replay(ext_active, gate_mode):
    gate_mode("auto")
    pool = gd.build_pool()
    observed = gd.StreamWaits.on(pool)
    observed.start_load()
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
    def __init__(self, launch: str):
        self.launch = launch

    def current_launch(self) -> str:
        return self.launch


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
    assert "(pd)" in caplog.text and "4711" in caplog.text and "layer unknown" in caplog.text
