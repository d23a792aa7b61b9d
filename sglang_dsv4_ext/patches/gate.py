"""Index-K read gate: no reader sees a layer's index-K before its HiCache load has landed.

Why: HiCache loads a layer's index-K host-to-device on a side stream and records one event
per layer; a reader must make its stream wait for that event first
(``wait_layer_transfer``). A missed wait corrupted ~18% of tool calls at 80 concurrent
sessions with bf16 index-K (seeds; upstream #22811 fixed the NSA analogue). In SGLang
0.5.23 the top-level ``DeepSeekV4TokenToKVPool.get_index_k_*`` getters wait, but
(code map A.3, D.5):
  R1  the ``DeepSeekV4IndexerPool`` sub-pool getters and raw attributes never wait;
  R3  in a breakable / piecewise prefill CUDA-graph replay only attention runs eagerly; layer
      L's C4 indexer and compressor are captured and replay right after layer L-1's eager
      break, which waited for load L-1 only. ``_wait_for_layer_loads`` covers only the
      full-graph backend.

How:
  * A probe at activation drives each top-level index-K reader with a recording counter and
    reports whether the installed SGLang already waits for the right layer; only readers that
    do not wait get our wait (the rest are reported ``not-needed``, upstream-gated).
  * Every sub-pool reader, and item access on the raw ``index_k_with_scale_buffer`` list, are
    gated through the parent pool (linked at pool creation; each sub-pool layer maps to the
    layer whose load carries it, the kv_source layer for V4.1's shared low-ratio layers):
    while a load is pending and the layer has not been waited for, mode ``auto`` waits and
    logs once per call site, mode ``strict`` raises naming the caller. Writers indexing the
    raw list and HiCache's own host-pool transfers are not reads and pass. Waits are recorded
    per counter (``LayerDoneCounter.wait_until`` / ``set_consumer`` hooks), so a read after
    the wait passes untouched. The record is per counter, not per stream: a read on another
    stream than the one that waited (code map R2) is not caught.
  * R3, "wait ahead": before a non-full prefill-graph replay with a pending load we wait for
    layer 0, and inside the replay every ``wait_layer_transfer(L)`` (issued at the eager
    attention break of layer L) also waits for L+1, the layer whose captured indexer and
    compressor replay next. Waits are GPU stream waits on SGLang's own events: the host never
    synchronises, and layer-wise overlap is kept (cost measured in ``gpu/gate_replay.py``).
  * With no counter registered (HiCache off) every hook returns after a weakref call and one
    attribute check (``bench/gate_overhead.py`` measures it; no host synchronisation).

Upstream status: top-level getters gated upstream (0.5.12+); sub-pool getters and the
breakable-graph replay are not (scheduler.py carries a TODO at the consumer index).
Retire when: the probe reports every accessor upstream-gated and SGLang waits ahead (or
runs eagerly) in non-full prefill-graph replays with a pending load.
"""

from __future__ import annotations

import contextvars
import logging
import sys
import threading
import weakref
from typing import Callable, Dict, Optional

logger = logging.getLogger(__name__)

_MP = "sglang.srt.mem_cache.deepseek_v4_memory_pool"
_POOL = f"{_MP}.DeepSeekV4TokenToKVPool"
_SUB = f"{_MP}.DeepSeekV4IndexerPool"
_CTRL = "sglang.srt.managers.cache_controller.LayerDoneCounter"
_PGR = "sglang.srt.model_executor.runner.prefill_cuda_graph_runner.PrefillCudaGraphRunner"

UPSTREAM_GATED = "upstream-gated"
EXTENSION_GATED = "extension-gated"

# Top-level readers: (method name, extra positional args after layer_id).
TOPLEVEL_READERS: Dict[str, int] = {
    "get_index_k_with_scale_buffer": 0,
    "get_index_k_scale_buffer": 4,
    "get_index_k_fp4_payload_buffer": 0,
    "get_index_k_fp4_scale_buffer": 0,
    "get_low_ratio_index_k_dequant": 0,
    "get_low_ratio_index_k_fp4": 1,
}
SUBPOOL_READERS: Dict[str, int] = {
    "get_index_k_with_scale_buffer": 0,
    "get_index_k_scale_buffer": 4,
    "get_index_k_fp4_payload_buffer": 0,
    "get_index_k_fp4_scale_buffer": 0,
    "get_index_k_fp4": 1,
    "get_index_k_dequant": 0,
}


class IndexKGateError(RuntimeError):
    """Strict mode: index-K was read while its layer's HiCache load was pending and not waited for."""


# ---------------------------------------------------------------------------------------
# Probe: does the installed SGLang already wait in this accessor?
# ---------------------------------------------------------------------------------------

class RecordingCounter:
    """Stands in for ``LayerDoneCounter``: records ``wait_until`` thresholds, never blocks."""

    def __init__(self, num_layers: int = 1 << 16, consumer_index: int = 0):
        self.num_layers = num_layers
        self.consumer_index = consumer_index
        self.waits = []

    def wait_until(self, threshold: int) -> None:
        self.waits.append(threshold)


class _Absorb:
    """Absorbs whatever an accessor does with the pool's internals after (or before) waiting."""

    def __getattr__(self, name):
        return _Absorb()

    def __call__(self, *args, **kwargs):
        return _Absorb()

    def __getitem__(self, key):
        return _Absorb()

    def __iter__(self):  # tuple unpacking of layer_mapping items: (ratio, local_id, pool)
        return iter((_Absorb(), _Absorb(), _Absorb()))

    def __bool__(self):
        return True

    def __index__(self):
        return 0

    __int__ = __index__

    def __sub__(self, other):
        return _Absorb()

    __rsub__ = __add__ = __radd__ = __mul__ = __rmul__ = __floordiv__ = __sub__


def probe_accessor(cls, name: str, extra_args: int, *, probe_layer: int = 7, start_layer: int = 2) -> bool:
    """True if ``cls.name`` (as SGLang ships it, through ``__wrapped__``) waits for its layer.

    The accessor runs on a probe instance whose layer-transfer counter records waits and
    whose other internals absorb every use; it must call ``wait_until(layer - start_layer)``.
    """
    from sglang_dsv4_ext.compat import unwrap_to_original

    fn = unwrap_to_original(getattr(cls, name))
    probe_cls = type(f"_Probe{cls.__name__}", (cls,), {"__getattr__": lambda self, attr: _Absorb()})
    probe = object.__new__(probe_cls)
    counter = RecordingCounter()
    probe.__dict__.update(layer_transfer_counter=counter, start_layer=start_layer)
    try:
        fn(probe, probe_layer, *([_Absorb()] * extra_args))
    except Exception:  # the accessor reached internals the probe cannot fake; the wait came first or never
        pass
    return (probe_layer - start_layer) in counter.waits


def probe_readers(pool_cls, readers: Dict[str, int]) -> Dict[str, str]:
    return {
        name: (UPSTREAM_GATED if probe_accessor(pool_cls, name, extra) else EXTENSION_GATED)
        for name, extra in readers.items()
    }


# ---------------------------------------------------------------------------------------
# Wait bookkeeping
# ---------------------------------------------------------------------------------------

def _note_wait(counter, threshold: int) -> None:
    consumer = getattr(counter, "consumer_index", -1)
    if consumer is None or consumer < 0:
        return
    record = getattr(counter, "_dsv4_ext_waited", None)
    if record is None or record[0] != consumer or record[1] < threshold:
        try:
            counter._dsv4_ext_waited = (consumer, threshold)
        except AttributeError:  # a counter without __dict__: reads stay gated by waiting
            pass


def waited_upto(counter) -> int:
    """Highest stage-local layer waited for under the counter's current consumer, else -1."""
    record = getattr(counter, "_dsv4_ext_waited", None)
    if record is None or record[0] != getattr(counter, "consumer_index", -1):
        return -1
    return record[1]


def load_pending(counter) -> bool:
    return counter is not None and getattr(counter, "consumer_index", -1) >= 0


def _around_set_consumer(original, self, index):
    original(self, index)
    self._dsv4_ext_waited = None  # a new batch: nothing waited for yet


def _around_wait_until(original, self, threshold):
    original(self, threshold)
    if self.consumer_index >= 0:
        _note_wait(self, threshold)


# The pool whose waits look one layer ahead: set while a non-full prefill graph replays.
_wait_ahead_pool: contextvars.ContextVar[Optional[int]] = contextvars.ContextVar("dsv4_ext_wait_ahead", default=None)


def _around_wait_layer_transfer(original, self, layer_id):
    counter = self.layer_transfer_counter
    if counter is None:  # HiCache off: the stock method would do nothing either
        return
    original(self, layer_id)
    if counter.consumer_index < 0:
        return  # no load pending for this batch: nothing to record or wait ahead for
    local = layer_id - self.start_layer
    _note_wait(counter, local)
    if _wait_ahead_pool.get() == id(self) and getattr(self, "_dsv4_gate_mode", "auto") != "off":
        ahead = local + 1
        if ahead < counter.num_layers and load_pending(counter):
            counter.wait_until(ahead)
            _note_wait(counter, ahead)


# ---------------------------------------------------------------------------------------
# Sub-pool and raw-attribute gate (R1)
# ---------------------------------------------------------------------------------------

_logged_sites = set()
_logged_lock = threading.Lock()
_INTERNAL_FILES = (__file__,)


def _caller_site() -> str:
    """The first frame outside the gate, SGLang's pool module and the hook wrappers."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if (
            filename not in _INTERNAL_FILES
            and not filename.endswith(("deepseek_v4_memory_pool.py", "hook_registry.py"))
            and not filename.endswith(("sglang_dsv4_ext/patches/pool.py",))
        ):
            return f"{filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    return "<unknown caller>"


def _parent_of(sub_pool):
    ref = sub_pool.__dict__.get("_dsv4_gate_parent")
    return ref() if ref is not None else None


# SGLang's (and our) index-K writers index the raw buffer list; they are not reads.
_RAW_BUFFER_WRITERS = frozenset({"set_index_fused", "set_index_k_scale_buffer", "set_index_fp4"})
# HiCache's host pool keeps the raw list (``_dsv4_indexer_regions`` hands it over) and indexes
# it to copy layers in and out: that is the load itself, ordered by HiCache's own events.
_RAW_BUFFER_TRANSFER_FILES = ("memory_pool_host.py",)


def _raw_access_is_not_a_read(code) -> bool:
    return code.co_name in _RAW_BUFFER_WRITERS or code.co_filename.endswith(_RAW_BUFFER_TRANSFER_FILES)


def before_subpool_read(sub_pool, local_layer_id: int, what: str, *, raw_access: bool = False) -> None:
    """Make a sub-pool read of layer ``local_layer_id`` safe, or refuse it in strict mode."""
    parent = _parent_of(sub_pool)
    if parent is None:
        return  # not part of a DSV4 pool (or not linked): nothing can load into it
    counter = parent.layer_transfer_counter
    if counter is None or getattr(counter, "consumer_index", -1) < 0:
        return  # HiCache off, or no load pending for this batch
    mode = parent.__dict__.get("_dsv4_gate_mode", "auto")
    if mode == "off":
        return
    global_layer = sub_pool._dsv4_gate_global_layers.get(local_layer_id)
    if global_layer is None:
        return  # not a layer of this stage: no load targets it (an out-of-range index raises on its own)
    local = global_layer - parent.start_layer
    if waited_upto(counter) >= local:
        return
    if raw_access and _raw_access_is_not_a_read(sys._getframe(2).f_code):
        return  # a writer (fresh pages, code map D.5 R4) or HiCache's own transfer indexing the raw list
    site = _caller_site()
    message = (
        f"{what} read layer {global_layer}'s index-K through the sub-pool while its HiCache "
        f"load is pending and not yet waited for (caller: {site}); read through "
        f"DeepSeekV4TokenToKVPool.get_index_k_* or call wait_layer_transfer({global_layer}) first"
    )
    if mode == "strict":
        raise IndexKGateError(message)
    with _logged_lock:
        first = site not in _logged_sites
        _logged_sites.add(site)
    if first:
        logger.warning("index-K gate: %s; waiting for the load (logged once per call site)", message)
    parent.wait_layer_transfer(global_layer)


def _make_subpool_reader_gate(name: str) -> Callable:
    label = f"DeepSeekV4IndexerPool.{name}"

    def gate_subpool_reader(original, self, layer_id, *args, **kwargs):
        # Hot path with HiCache off: one dict lookup, one weakref call, one attribute.
        ref = self.__dict__.get("_dsv4_gate_parent")
        if ref is not None:
            parent = ref()
            if parent is not None:
                counter = parent.layer_transfer_counter
                if counter is not None and counter.consumer_index >= 0:
                    before_subpool_read(self, layer_id, label)
        if args or kwargs:
            return original(self, layer_id, *args, **kwargs)
        return original(self, layer_id)  # no re-packing: this wrapper sits on every index-K read

    gate_subpool_reader.__name__ = f"gate_{name}"
    return gate_subpool_reader


class GatedLayerBuffers(list):
    """The raw per-layer index-K buffer list, gated on item access (``buffers[layer]``).

    Iteration and ``len`` stay ungated: PD and HiCache take all buffers at construction,
    when no load can be pending.
    """

    __slots__ = ("_sub_pool_ref", "_parent_ref")

    def __getitem__(self, key):
        parent = self._parent_ref()  # hot path with HiCache off: this and one attribute
        counter = None if parent is None else parent.layer_transfer_counter
        if counter is not None and counter.consumer_index >= 0 and isinstance(key, int):
            n = len(self)  # slices (whole-list views for PD/HiCache setup) stay ungated
            sub_pool = self._sub_pool_ref()
            if sub_pool is not None and -n <= key < n:
                before_subpool_read(
                    sub_pool, key % n, "DeepSeekV4IndexerPool.index_k_with_scale_buffer[...]", raw_access=True
                )
        return list.__getitem__(self, key)


def loading_layers(pool) -> Dict[int, Dict[int, int]]:
    """``{ratio: {sub-pool layer: global layer whose HiCache load carries it}}``.

    That is the layer's *source*: for ratios 4/128 each sub-pool layer belongs to one layer;
    for the V4.1 low ratios 1/2 several layers share the sub-pool layer of their kv_source
    layer, and HiCache loads it with the source's transfer layer
    (``hybrid_pool_assembler._dsv4_low_ratio_regions``), not with the later readers'.
    """
    sources = getattr(pool, "sources_by_ratio", None) or {}
    result: Dict[int, Dict[int, int]] = {
        ratio: {local_id: global_layer for local_id, global_layer in enumerate(layers)}
        for ratio, layers in sources.items()
    }
    for global_layer, item in enumerate(getattr(pool, "layer_mapping", ()) or ()):
        if item is None:
            continue
        ratio, local_id, _ = item
        # Without sources_by_ratio (older SGLang): the first, lowest, layer is the source.
        result.setdefault(ratio, {}).setdefault(local_id, global_layer)
    return result


def link_subpools(pool) -> None:
    """Connect a freshly built DSV4 pool's index-K sub-pools to it for the gate (pool creation)."""
    from sglang_dsv4_ext.config import load_config

    mode = load_config().gate
    pool._dsv4_gate_mode = mode
    if mode == "off":
        return
    global_layers = loading_layers(pool)
    for ratio, sub_pool in getattr(pool, "index_pools", {}).items():
        sub_pool._dsv4_gate_parent = weakref.ref(pool)
        sub_pool._dsv4_gate_global_layers = global_layers.get(ratio, {})
        buffers = getattr(sub_pool, "index_k_with_scale_buffer", None)
        if type(buffers) is list:  # SGLang's list of per-layer tensors; leave any other storage as it is
            gated = GatedLayerBuffers(buffers)
            gated._sub_pool_ref = weakref.ref(sub_pool)
            gated._parent_ref = weakref.ref(pool)
            sub_pool.index_k_with_scale_buffer = gated


# ---------------------------------------------------------------------------------------
# Top-level readers that the probe found ungated (older SGLang, or a drifted method)
# ---------------------------------------------------------------------------------------

def gate_toplevel_reader(original, self, layer_id, *args, **kwargs):
    """Wait for the layer's load before an ungated top-level index-K reader returns data."""
    if self.layer_transfer_counter is not None and getattr(self, "_dsv4_gate_mode", "auto") != "off":
        self.wait_layer_transfer(layer_id)
    return original(self, layer_id, *args, **kwargs)


# ---------------------------------------------------------------------------------------
# R3: breakable / piecewise prefill-graph replay
# ---------------------------------------------------------------------------------------

def _dsv4_pool_of(runner):
    pool = getattr(getattr(runner, "model_runner", None), "token_to_kv_pool", None)
    return pool if pool is not None and "_dsv4_gate_mode" in getattr(pool, "__dict__", {}) else None


def _around_wait_for_layer_loads(original, self):
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
        _note_wait(counter, 0)


def _around_prefill_execute(original, self, forward_batch, **kwargs):
    pool = _dsv4_pool_of(self)
    if pool is None or getattr(self, "_is_full_backend", False) or pool._dsv4_gate_mode == "off":
        return original(self, forward_batch, **kwargs)
    token = _wait_ahead_pool.set(id(pool))
    try:
        return original(self, forward_batch, **kwargs)
    finally:
        _wait_ahead_pool.reset(token)


def hooks(ctx):
    from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4IndexerPool, DeepSeekV4TokenToKVPool

    from sglang_dsv4_ext.patches import Hook

    result = [
        Hook(f"{_POOL}.wait_layer_transfer", _around_wait_layer_transfer, "around"),
        Hook(f"{_CTRL}.set_consumer", _around_set_consumer, "around"),
        Hook(f"{_CTRL}.wait_until", _around_wait_until, "around"),
        Hook(f"{_PGR}._wait_for_layer_loads", _around_wait_for_layer_loads, "around"),
        Hook(f"{_PGR}.execute", _around_prefill_execute, "around"),
    ]
    for name, verdict in probe_readers(DeepSeekV4TokenToKVPool, TOPLEVEL_READERS).items():
        target = f"{_POOL}.{name}"
        ctx.accessor_verdicts[target] = verdict
        if verdict == UPSTREAM_GATED:
            ctx.not_needed[target] = "SGLang already waits for the layer's load (probe)"
        else:
            result.append(Hook(target, gate_toplevel_reader, "around"))
    for name, verdict in probe_readers(DeepSeekV4IndexerPool, SUBPOOL_READERS).items():
        target = f"{_SUB}.{name}"
        ctx.accessor_verdicts[target] = verdict
        if verdict == UPSTREAM_GATED:
            ctx.not_needed[target] = "SGLang already waits for the layer's load (probe)"
        else:
            result.append(Hook(target, _make_subpool_reader_gate(name), "around"))
    return result
