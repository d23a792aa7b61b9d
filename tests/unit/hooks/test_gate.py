"""Index-K read gate: probe verdicts, sub-pool and raw-list gating, strict/auto/off.

Everything runs on SGLang 0.5.23's real classes on CPU: ``DeepSeekV4TokenToKVPool`` and its
``DeepSeekV4IndexerPool`` sub-pools, and the real ``LayerDoneCounter`` whose per-layer events
are CPU events here (``current_stream().wait_event`` works on CPU). Which layers the reading
stream has waited for is observed on that counter by ``tests.support.gate_doubles.StreamWaits``, not
taken from the gate's own bookkeeping. The only stubs are CUDA/Triton kernel launches inside
SGLang's writers and HiCache's transfer (named where they are stubbed).

A "pending load" is what HiCache leaves on the counter for a batch whose prefix is being
loaded: a producer event set made the consumer, with no layer event completed yet.
"""

from __future__ import annotations

import ast
import inspect
import logging
import textwrap

import pytest
import torch

from sglang_dsv4_ext import errors
from sglang_dsv4_ext.runtime import activation, compat
from sglang_dsv4_ext.runtime.hooks import gate
from tests.support import gate_doubles as gd
from tests.support.dsv4_pools import small_pool

POOL = compat.POOL_INIT.owner_path
SUB = compat.SUBPOOL_INDEX_K_READERS[0].owner_path
READER_TARGETS = [t.path for t in (*compat.TOPLEVEL_INDEX_K_READERS, *compat.SUBPOOL_INDEX_K_READERS)]
GATE_LOGGER = gate.logger.name


# ---------------------------------------------------------------------------------------
# Oracle: does the function's source wait for its own layer before anything else?
# ---------------------------------------------------------------------------------------


def _is_wait_for_own_layer(stmt, self_name: str, layer_name: str) -> bool:
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    return (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "wait_layer_transfer"
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id == self_name
        and len(call.args) == 1
        and isinstance(call.args[0], ast.Name)
        and call.args[0].id == layer_name
    )


def source_waits_for_its_layer(fn) -> bool:
    """True if the first statement of ``fn`` (after its docstring) is ``self.wait_layer_transfer(<its layer>)``.

    Read from the source with ``ast``, independently of the probe (which runs the function). A wait
    that comes after the function has already touched index-K, or only in one branch, is no gate.
    """
    fn = compat.unwrap_to_original(fn)
    func = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
    self_name, layer_name = func.args.args[0].arg, func.args.args[1].arg
    body = list(func.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    return bool(body) and _is_wait_for_own_layer(body[0], self_name, layer_name)


def test_oracle_refuses_a_wait_that_comes_after_the_read():
    # The oracle must tell "waits first" from "waits somewhere": both functions call the wait.
    def waits_first(self, layer_id):
        """doc"""
        self.wait_layer_transfer(layer_id)
        return self.buffers[layer_id]

    def reads_then_waits(self, layer_id):
        rows = self.buffers[layer_id]
        self.wait_layer_transfer(layer_id)
        return rows

    def waits_in_one_branch(self, layer_id):
        if layer_id:
            self.wait_layer_transfer(layer_id)
        return self.buffers[layer_id]

    assert source_waits_for_its_layer(waits_first)
    assert not source_waits_for_its_layer(reads_then_waits)
    assert not source_waits_for_its_layer(waits_in_one_branch)


def oracle_verdict(target: str) -> str:
    _, _, current = compat.resolve(target)
    return gate.UPSTREAM_GATED if source_waits_for_its_layer(current) else gate.EXTENSION_GATED


def raw_item(buffers, index):
    """The raw list's element without going through the gate (for identity checks)."""
    return list.__getitem__(buffers, index)


# ---------------------------------------------------------------------------------------
# 1. Probe verdicts against the source; 6. activation/doctor report them
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", READER_TARGETS, ids=lambda t: t.rsplit(".", 2)[-2] + "." + t.rsplit(".", 1)[-1])
def test_probe_verdict_matches_what_the_source_does(ext_active, target):
    owner, name, _ = compat.resolve(target)
    readers = gate.TOPLEVEL_READERS if owner.__name__ == "DeepSeekV4TokenToKVPool" else gate.SUBPOOL_READERS
    expected = oracle_verdict(target)

    assert gate.probe_readers(owner, {name: readers[name]})[name] == expected
    assert activation.STATE.accessor_verdicts[target] == expected
    # What activation did follows the verdict: upstream-gated readers are left as SGLang
    # ships them (status not-needed); the others carry our wrapper (status applied).
    installed = getattr(owner, name)
    if expected == gate.UPSTREAM_GATED:
        assert activation.STATE.statuses[target] == activation.NOT_NEEDED
        assert not hasattr(installed, "__wrapped__")
    else:
        assert activation.STATE.statuses[target] == activation.APPLIED
        assert installed is not compat.unwrap_to_original(installed)


def test_oracle_sees_both_kinds_in_sglang_0_5_23(ext_active):
    # Guards the oracle itself: on 0.5.23 the top-level getters wait, the sub-pool getters
    # do not (docs/patch-point-map.md, "Index-K readers"), so a constant oracle would fail here.
    verdicts = {t: oracle_verdict(t) for t in READER_TARGETS}
    assert {verdicts[t] for t in READER_TARGETS if t.startswith(POOL + ".")} == {gate.UPSTREAM_GATED}
    assert {verdicts[t] for t in READER_TARGETS if t.startswith(SUB + ".")} == {gate.EXTENSION_GATED}


def test_doctor_reports_each_accessor_as_upstream_or_extension_gated(ext_active):
    from sglang_dsv4_ext.tools.doctor import cli as doctor

    rows = {row["target"]: row for row in doctor.collect_report()["targets"]}
    for target in READER_TARGETS:
        assert rows[target]["gate"] == oracle_verdict(target), target
        expected_status = activation.NOT_NEEDED if rows[target]["gate"] == gate.UPSTREAM_GATED else activation.APPLIED
        assert rows[target]["status"] == expected_status, target
    # Rows that are not index-K readers carry no gate verdict.
    assert "gate" not in rows[compat.POOL_WAIT_LAYER_TRANSFER.path]


# ---------------------------------------------------------------------------------------
# 2. A deliberately ungated top-level reader is found and wrapped (through HookRegistry)
# ---------------------------------------------------------------------------------------


def test_ungated_toplevel_reader_is_found_and_wrapped_through_hook_registry(ext_active, gate_mode):
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    cls = gd.Dsv4PoolWithoutIndexKWait
    name = "get_index_k_with_scale_buffer"
    original = cls.__dict__[name]
    assert not source_waits_for_its_layer(original)
    verdicts = gate.probe_readers(cls, gate.TOPLEVEL_READERS)
    assert verdicts[name] == gate.EXTENSION_GATED
    # The inherited readers still wait: the probe singles out only the drifted one.
    assert {v for n, v in verdicts.items() if n != name} == {gate.UPSTREAM_GATED}

    gate_mode("strict")  # a read that reaches the sub-pool unwaited raises: the wrap must wait first
    pool = gd.build_pool(cls)
    waits = gd.StreamWaits.on(pool)
    waits.start_load()
    with pytest.raises(errors.DSV4IndexKGateError, match=r"gate_doubles\.py:\d+ in get_index_k_with_scale_buffer"):
        pool.get_index_k_with_scale_buffer(1)
    assert waits.covered() == -1

    target = gd.TOPLEVEL_DOUBLE_TARGET
    HookRegistry.register(target, gate.gate_toplevel_reader, HookType.AROUND)
    try:
        HookRegistry.apply_hooks()
        wrapped = cls.__dict__[name]
        assert activation.carries_hook(wrapped, gate.gate_toplevel_reader)

        data = pool.get_index_k_with_scale_buffer(3)
        assert waits.covered() == 3  # waited for layer 3's load before handing out its index-K
        assert data is raw_item(pool.c4_indexer_kv_pool.index_k_with_scale_buffer, 1)
    finally:
        setattr(cls, name, cls.__dict__[name].__wrapped__)
        HookRegistry._hooks.pop(target, None)
        HookRegistry._patched.discard(target)
    assert cls.__dict__[name] is original


# ---------------------------------------------------------------------------------------
# 3. Strict / auto / off; HiCache off; no load pending; writers and HiCache transfers
# ---------------------------------------------------------------------------------------

SUBPOOL_READS = {
    "c4_indexer_kv_pool getter": lambda pool, local: pool.c4_indexer_kv_pool.get_index_k_with_scale_buffer(local),
    "index_pools[4] getter": lambda pool, local: pool.index_pools[4].get_index_k_with_scale_buffer(local),
    "_indexer_pool(4) getter": lambda pool, local: pool._indexer_pool(4).get_index_k_with_scale_buffer(local),
    "raw list item": lambda pool, local: pool.c4_indexer_kv_pool.index_k_with_scale_buffer[local],
    "raw list negative item": lambda pool, local: pool.c4_indexer_kv_pool.index_k_with_scale_buffer[local - 2],
}


@pytest.mark.parametrize("how", list(SUBPOOL_READS))
def test_strict_refuses_a_subpool_read_during_a_pending_load_naming_the_caller(ext_active, gate_mode, how):
    gate_mode("strict")
    pool = gd.build_pool()
    waits = gd.StreamWaits.on(pool)
    waits.start_load()

    with pytest.raises(errors.DSV4IndexKGateError) as refused:
        SUBPOOL_READS[how](pool, 0)
    message = str(refused.value)
    assert "layer 1's index-K" in message  # c4 sub-pool layer 0 is global layer 1
    assert "test_gate.py:" in message and "in <lambda>" in message  # the caller, not the gate or the pool
    assert waits.stream_waits == []  # strict refuses; it does not wait behind the caller's back


@pytest.mark.parametrize("name", list(gate.SUBPOOL_READERS))
def test_strict_gates_every_subpool_reader(ext_active, gate_mode, name):
    gate_mode("strict")
    pool = gd.build_pool()
    gd.StreamWaits.on(pool).start_load()
    extra = [None] * gate.SUBPOOL_READERS[name]  # refused before the reader touches them
    with pytest.raises(errors.DSV4IndexKGateError, match=rf"DeepSeekV4IndexerPool\.{name} read layer 3's"):
        getattr(pool.c4_indexer_kv_pool, name)(1, *extra)


def test_strict_passes_after_the_layer_was_waited_for_until_the_next_batch(ext_active, gate_mode):
    gate_mode("strict")
    pool = gd.build_pool()
    sub = pool.c4_indexer_kv_pool
    waits = gd.StreamWaits.on(pool)
    waits.start_load()

    pool.wait_layer_transfer(1)
    assert sub.get_index_k_with_scale_buffer(0) is raw_item(sub.index_k_with_scale_buffer, 0)
    assert sub.index_k_with_scale_buffer[0] is raw_item(sub.index_k_with_scale_buffer, 0)
    with pytest.raises(errors.DSV4IndexKGateError, match="layer 3's"):
        sub.index_k_with_scale_buffer[1]  # layer 3 not waited for yet

    pool.get_index_k_with_scale_buffer(3)  # SGLang's own gated getter waits
    assert sub.index_k_with_scale_buffer[1] is raw_item(sub.index_k_with_scale_buffer, 1)
    assert waits.covered() == 3

    first = waits.counter.consumer_index
    waits.start_load()  # the next batch with a load: nothing waited for under the new consumer
    with pytest.raises(errors.DSV4IndexKGateError, match="layer 1's"):
        sub.get_index_k_with_scale_buffer(0)
    # SGLang's counter rotates over 3 event sets: a later batch reuses the first consumer
    # index, and what the first batch waited for must not count for it.
    while waits.start_load() != first:
        pass
    with pytest.raises(errors.DSV4IndexKGateError, match="layer 3's"):
        sub.index_k_with_scale_buffer[1]


def test_strict_is_quiet_with_hicache_off_or_no_load_pending(ext_active, gate_mode):
    gate_mode("strict")
    pool = gd.build_pool()
    sub = pool.c4_indexer_kv_pool
    assert pool.layer_transfer_counter is None  # HiCache off
    assert sub.get_index_k_with_scale_buffer(1) is raw_item(sub.index_k_with_scale_buffer, 1)
    assert sub.index_k_with_scale_buffer[0] is raw_item(sub.index_k_with_scale_buffer, 0)

    waits = gd.StreamWaits.on(pool)  # HiCache on, this batch has nothing to load
    waits.counter.set_consumer(-1)
    assert sub.get_index_k_with_scale_buffer(1) is raw_item(sub.index_k_with_scale_buffer, 1)
    assert sub.index_k_with_scale_buffer[0] is raw_item(sub.index_k_with_scale_buffer, 0)
    assert waits.wait_until_calls == [] and waits.stream_waits == []


def test_pipeline_stage_maps_subpool_layers_to_stage_local_load_events(ext_active, gate_mode):
    # A PP stage [2, 6): c4 sub-pool layers 0, 1 are global layers 3, 4 = load events 1, 2.
    gate_mode("strict")
    pool = small_pool((0, 4, 128, 4, 4, 128), tokens=gd.TOKENS, start_layer=2, end_layer=6)
    sub = pool.c4_indexer_kv_pool
    waits = gd.StreamWaits.on(pool, num_layers=4)
    waits.start_load()

    pool.wait_layer_transfer(2)  # load event 0
    with pytest.raises(errors.DSV4IndexKGateError, match="layer 3's"):
        sub.index_k_with_scale_buffer[0]
    pool.wait_layer_transfer(3)  # load event 1
    assert waits.covered() == 1
    assert sub.index_k_with_scale_buffer[0] is raw_item(sub.index_k_with_scale_buffer, 0)
    with pytest.raises(errors.DSV4IndexKGateError, match="layer 4's"):
        sub.index_k_with_scale_buffer[1]


def test_auto_waits_for_the_layer_before_the_read_and_logs_once_per_call_site(ext_active, gate_mode, caplog):
    gate_mode("auto")
    pool = gd.build_pool()
    sub = pool.c4_indexer_kv_pool
    waits = gd.StreamWaits.on(pool)
    caplog.set_level(logging.WARNING, logger=GATE_LOGGER)

    for _ in range(3):  # three batches, each with a pending load, read at the same call site
        consumer = waits.start_load()
        data = sub.get_index_k_with_scale_buffer(1)  # call site A
        assert (consumer, 3) in waits.stream_waits  # the stream waited for layer 3 before the data came back
        assert data is raw_item(sub.index_k_with_scale_buffer, 1)
        waits.clear()
    for _ in range(2):
        waits.start_load()
        data = sub.index_k_with_scale_buffer[0]  # call site B
        assert waits.covered() == 1
        assert data is raw_item(sub.index_k_with_scale_buffer, 0)

    logged = [r.getMessage() for r in caplog.records if r.name == GATE_LOGGER]
    assert len(logged) == 2, logged
    assert "get_index_k_with_scale_buffer read layer 3's" in logged[0] and "in test_auto_waits" in logged[0]
    assert "index_k_with_scale_buffer[...] read layer 1's" in logged[1]


def test_auto_read_after_the_stock_getter_adds_no_wait(ext_active, gate_mode):
    gate_mode("auto")
    pool = gd.build_pool()
    waits = gd.StreamWaits.on(pool)
    waits.start_load()
    pool.get_index_k_with_scale_buffer(3)  # SGLang's gated getter: one wait for layer 3
    before = list(waits.stream_waits)
    pool.c4_indexer_kv_pool.get_index_k_with_scale_buffer(1)
    pool.c4_indexer_kv_pool.index_k_with_scale_buffer[1]
    assert waits.stream_waits == before


def test_off_mode_leaves_subpool_reads_alone(ext_active, gate_mode, caplog):
    gate_mode("off")
    pool = gd.build_pool()
    sub = pool.c4_indexer_kv_pool
    assert type(sub.index_k_with_scale_buffer) is list  # not even wrapped
    waits = gd.StreamWaits.on(pool)
    waits.start_load()
    caplog.set_level(logging.WARNING, logger=GATE_LOGGER)
    sub.get_index_k_with_scale_buffer(1)
    sub.index_k_with_scale_buffer[0]
    assert waits.stream_waits == [] and waits.wait_until_calls == []
    assert not [r for r in caplog.records if r.name == GATE_LOGGER]


def test_stock_writers_through_the_raw_list_are_not_reads(ext_active, gate_mode, monkeypatch):
    """Strict mode, load pending: SGLang's index-K writers index the raw list and must pass.

    Stubbed: the JIT CUDA store kernel (``fused_store_cache``) and the Triton fp8 value+scale
    store (``SetKAndS.execute``); they cannot run on CPU. The stubs record the buffer they got.
    The store's module is the one the pool module imports (0.5.22 ``index_buf_accessor``, 0.5.23
    ``dsa_index_k_cache``): the 0.5.22 series' sources run this test too.
    """
    import sglang.srt.mem_cache.deepseek_v4_memory_pool as mp

    gate_mode("strict")
    pool = gd.build_pool()
    sub = pool.c4_indexer_kv_pool
    waits = gd.StreamWaits.on(pool)
    waits.start_load()
    received = []
    monkeypatch.setattr(mp, "fused_store_cache", lambda input, cache, indices, **kw: received.append(cache))
    index_k_store = getattr(mp, "dsa_index_k_cache", None) or mp.index_buf_accessor
    monkeypatch.setattr(
        index_k_store.SetKAndS, "execute", classmethod(lambda cls, *args, buf, **kw: received.append(buf))
    )

    loc = torch.arange(4)
    pool.set_index_k_fused(3, loc, torch.zeros(4, 128, dtype=torch.bfloat16))
    pool.set_index_k_scale_buffer(1, loc, torch.zeros(4, 128), torch.ones(4, 1))
    assert received[0] is raw_item(sub.index_k_with_scale_buffer, 1)
    assert received[1] is raw_item(sub.index_k_with_scale_buffer, 0)
    assert waits.stream_waits == []


def test_hicache_own_host_pool_transfer_is_not_a_read(ext_active, gate_mode, monkeypatch):
    """HiCache keeps the raw list as its device buffers and indexes it to load a layer.

    Strict mode, load pending: the transfer must not be refused (regression for gate.py,
    which treated it as a read). Stubbed: ``transfer_kv_per_layer_mla`` (a CUDA kernel that is
    not even defined on CPU).
    """
    import sglang.srt.mem_cache.memory_pool_host as mph
    from sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler import _dsv4_indexer_regions

    gate_mode("strict")
    pool = gd.build_pool()
    (region,) = _dsv4_indexer_regions(pool, 256)
    host = mph.DeepSeekV4PagedHostPool(
        pool_name=str(region.name),
        device_buffers=region.device_buffers,
        item_bytes=region.item_bytes,
        num_host_pages=2,
        slot_page_size=region.slot_page_size,
        layout="layer_first",
        pin_memory=False,
        page_aligned_only=region.page_aligned_only,
    )
    assert isinstance(host.device_buffers, gate.GatedLayerBuffers)  # the very list the gate wraps
    received = []
    monkeypatch.setattr(mph, "transfer_kv_per_layer_mla", lambda src, dst, **kw: received.append(dst), raising=False)
    gd.StreamWaits.on(pool).start_load()

    host.load_to_device_per_layer(pool.c4_indexer_kv_pool, torch.arange(256), torch.arange(256, 512), 1, "kernel")
    assert received == [raw_item(pool.c4_indexer_kv_pool.index_k_with_scale_buffer, 1)]


# ---------------------------------------------------------------------------------------
# V4.1 low-ratio layers share their kv_source layer's sub-pool layer
# ---------------------------------------------------------------------------------------


def test_shared_low_ratio_layers_are_gated_on_their_source_load(ext_active, gate_mode):
    """Ratio-2 sub-pool layer k is loaded with its kv_source layer (HiCache's layer mapping).

    Regression for gate.py, which mapped it to the LAST layer sharing it: strict mode then
    refused SGLang's own gated getter for the source layer, and auto mode waited early.
    """
    gate_mode("strict")
    pool = gd.build_low_ratio_pool()
    sub = pool.index_pools[2]
    slots = torch.arange(4)
    waits = gd.StreamWaits.on(pool)
    waits.start_load()

    payload, _ = pool.get_low_ratio_index_k_fp4(1, slots)  # source layer 1, waits for load 1 only
    assert payload.shape == (4, 64) and waits.covered() == 1
    pool.get_low_ratio_index_k_fp4(2, slots)  # layer 2 reads layer 1's storage
    with pytest.raises(errors.DSV4IndexKGateError, match="layer 3's"):
        sub.get_index_k_fp4(1, slots)  # sub-pool layer 1 is layer 3's load: not waited yet
    assert pool.get_low_ratio_index_k_dequant(3, slots).shape == (4, 128)
    assert sub.get_index_k_dequant(1, slots).shape == (4, 128)

    # The mapping itself, against HiCache's own (hybrid_pool_assembler._dsv4_low_ratio_regions).
    expected = {k: source for k, source in enumerate(gd.LOW_KV_SOURCES)}
    assert sub._dsv4_gate_global_layers == expected


# ---------------------------------------------------------------------------------------
# 4. The regression replay: stock leaves a stale-read window, the gate closes it
# ---------------------------------------------------------------------------------------


def covered_when_the_read_returns(pool, read) -> int:
    """Start a load, run ``read`` (a sub-pool read of layer 3), return the highest layer the stream had waited for."""
    waits = gd.StreamWaits.on(pool)
    waits.start_load()
    read(pool)
    return waits.covered()


SUBPOOL_READ_OF_LAYER_3 = {
    "sub-pool getter": lambda pool: pool.c4_indexer_kv_pool.get_index_k_with_scale_buffer(1),
    "raw list item": lambda pool: pool.c4_indexer_kv_pool.index_k_with_scale_buffer[1],
}


@pytest.mark.parametrize("how", list(SUBPOOL_READ_OF_LAYER_3))
def test_stock_subpool_read_has_a_stale_window_and_the_gate_closes_it(ext_active, gate_mode, monkeypatch, how):
    from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4IndexerPool

    read = SUBPOOL_READ_OF_LAYER_3[how]
    gate_mode("auto")

    with monkeypatch.context() as stock:  # SGLang as shipped: original reader, plain list
        name = "get_index_k_with_scale_buffer"
        stock.setattr(DeepSeekV4IndexerPool, name, compat.unwrap_to_original(getattr(DeepSeekV4IndexerPool, name)))
        pool = gd.build_pool()
        sub = pool.c4_indexer_kv_pool
        sub.index_k_with_scale_buffer = list(sub.index_k_with_scale_buffer)
        stale = covered_when_the_read_returns(pool, read)
    assert stale < 3, "stock SGLang must hand out layer 3's index-K before its load was waited for"

    gate_mode("off")  # the extension installed but the gate switched off: same window
    assert covered_when_the_read_returns(gd.build_pool(), read) < 3

    gate_mode("auto")
    assert covered_when_the_read_returns(gd.build_pool(), read) >= 3
