"""Index-K read gate: no reader sees a layer's index-K before its HiCache load has landed.

Why: HiCache loads a layer's index-K host-to-device on a side stream and records one event
per layer; a reader must make its stream wait for that event first
(``wait_layer_transfer``). A missed wait corrupted about 18% of tool calls at 80 concurrent
sessions with bf16 index-K (https://github.com/sgl-project/sglang/pull/22811 fixed the NSA
analogue). In SGLang 0.5.23 the top-level ``DeepSeekV4TokenToKVPool.get_index_k_*`` getters wait,
but (docs/patch-point-map.md, "Index-K readers"):
  R1  the ``DeepSeekV4IndexerPool`` sub-pool getters and raw attributes never wait;
  R3  in a breakable / piecewise prefill CUDA-graph replay only attention runs eagerly; layer
      L's C4 indexer and compressor are captured and replay right after layer L-1's eager
      break, which waited for load L-1 only. ``_wait_for_layer_loads`` covers only the
      full-graph backend (SGLang 0.5.22 has no such method: no replay waits at all).

How: one module per concern.
  * :mod:`.probe`: at activation, drives each top-level index-K reader with a recording
    counter and reports whether the installed SGLang already waits for the right layer; only
    readers that do not wait get our wait (the rest are reported ``not-needed``).
  * :mod:`.subpool`: every sub-pool reader, and item access on the raw
    ``index_k_with_scale_buffer`` list, are gated through the parent pool (linked when the pool
    is built; each sub-pool layer maps to the layer whose load carries it, the kv_source layer
    for V4.1's shared low-ratio layers). While a load is pending and the layer has not been
    waited for, mode ``auto`` waits and logs once per call site, ``strict`` raises naming the
    caller. Writers indexing the raw list and HiCache's own host-pool transfers pass.
  * :mod:`.waits`: waits are recorded per counter (``LayerDoneCounter.wait_until`` /
    ``set_consumer``), so a read after the wait passes untouched. The record is per counter,
    not per stream: a read on another stream than the one that waited (R2) is not caught.
  * :mod:`.replay`: R3, "wait ahead": before a non-full prefill-graph replay with a pending
    load we wait for layer 0, and inside the replay every ``wait_layer_transfer(L)`` (issued at
    the eager attention break of layer L) also waits for L+1, the layer whose captured indexer
    and compressor replay next. GPU stream waits on SGLang's own events: the host never
    synchronises, and layer-wise overlap is kept (cost: ``benchmarks/gate_replay.py``). On
    SGLang 0.5.22 the hook on ``execute`` also waits before the replay: every layer for a full
    graph, layer 0 otherwise.
  * With HiCache off (no counter) every hook returns after a weakref call and one attribute
    check (``benchmarks/gate_overhead.py`` measures it; no host synchronisation).

Upstream status: top-level getters gated upstream (0.5.12+); sub-pool getters and the
breakable-graph replay are not (scheduler.py carries a TODO at the consumer index).
Retire when: SGLang gates the indexer sub-pool readers and waits ahead (or runs eagerly) in
non-full prefill-graph replays with a pending load (the probe then reports every accessor
upstream-gated).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from sglang_dsv4_ext.errors import DSV4IndexKGateError
from sglang_dsv4_ext.runtime import compat
from sglang_dsv4_ext.runtime.hooks.gate import replay, subpool, waits
from sglang_dsv4_ext.runtime.hooks.gate.probe import (
    EXTENSION_GATED,
    SUBPOOL_READERS,
    TOPLEVEL_READERS,
    UPSTREAM_GATED,
    probe_readers,
)
from sglang_dsv4_ext.runtime.hooks.gate.subpool import (
    GatedLayerBuffers,
    before_subpool_read,
    gate_toplevel_reader,
    link_subpools,
    logger,
)
from sglang_dsv4_ext.runtime.index_k import pool_lifecycle

if TYPE_CHECKING:
    from sglang_dsv4_ext.runtime.compat import Target
    from sglang_dsv4_ext.runtime.hooks import Hook, HookContext

__all__ = [
    "DSV4IndexKGateError",
    "EXTENSION_GATED",
    "GatedLayerBuffers",
    "SUBPOOL_READERS",
    "TOPLEVEL_READERS",
    "UPSTREAM_GATED",
    "before_subpool_read",
    "gate_toplevel_reader",
    "hooks",
    "link_subpools",
    "logger",
    "probe_readers",
]


def _reader_hooks(
    ctx: HookContext, readers: Iterable[Target], make_gate: Callable[[str], Callable[..., Any]]
) -> list[Hook]:
    from sglang_dsv4_ext.runtime.hooks import Hook

    result = []
    for target in readers:
        if not ctx.wants(target):
            continue  # its module is not imported yet: probe it when SGLang imports it
        verdicts = probe_readers(compat.owner_of(target), {target.attribute: target.required_args_after_layer_id()})
        verdict = verdicts[target.attribute]
        ctx.accessor_verdicts[target.path] = verdict
        if verdict == UPSTREAM_GATED:
            ctx.not_needed[target.path] = "SGLang already waits for the layer's load (probe)"
        else:
            result.append(Hook(target, make_gate(target.attribute), "around"))
    return result


def hooks(ctx: HookContext) -> list[Hook]:
    from sglang_dsv4_ext.runtime.hooks import Hook

    # The gate links each DSV4 pool's sub-pools when the pool is built (the pool hook announces it).
    pool_lifecycle.subscribe_pool_created("index-K read gate", link_subpools)
    result = [
        Hook(compat.POOL_WAIT_LAYER_TRANSFER, waits.around_wait_layer_transfer, "around"),
        Hook(compat.COUNTER_SET_CONSUMER, waits.around_set_consumer, "around"),
        Hook(compat.COUNTER_WAIT_UNTIL, waits.around_wait_until, "around"),
        Hook(compat.PREFILL_GRAPH_WAIT_FOR_LAYER_LOADS, replay.around_wait_for_layer_loads, "around"),
        # Where SGLang has no _wait_for_layer_loads (0.5.22), the replay's own hook waits first.
        Hook(
            compat.PREFILL_GRAPH_EXECUTE,
            replay.around_prefill_execute
            if ctx.has(compat.PREFILL_GRAPH_WAIT_FOR_LAYER_LOADS)
            else replay.around_prefill_execute_waiting_first,
            "around",
        ),
    ]
    result += _reader_hooks(ctx, compat.TOPLEVEL_INDEX_K_READERS, lambda name: gate_toplevel_reader)
    result += _reader_hooks(ctx, compat.SUBPOOL_INDEX_K_READERS, subpool.make_subpool_reader_gate)
    return result
