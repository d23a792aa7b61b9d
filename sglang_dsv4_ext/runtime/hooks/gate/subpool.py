"""Sub-pool and raw-attribute gate (R1): sub-pool readers wait for (or refuse) a pending load."""

from __future__ import annotations

import logging
import os
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from types import CodeType, FrameType
from typing import TYPE_CHECKING, Any, Protocol, SupportsIndex

from sglang_dsv4_ext.config import GateMode
from sglang_dsv4_ext.errors import DSV4IndexKGateError
from sglang_dsv4_ext.runtime.hooks.gate.waits import waited_upto

if TYPE_CHECKING:
    import torch

    from sglang_dsv4_ext.runtime.sglang_types import DSV4TokenToKVPool, IndexerSubPool

    class GatedPool(DSV4TokenToKVPool, Protocol):
        """A DSV4 pool :func:`link_subpools` linked: the gate's mode is set on it."""

        _dsv4_gate_mode: str

    class GatedSubPool(IndexerSubPool, Protocol):
        """An index-K sub-pool :func:`link_subpools` linked to its parent pool."""

        _dsv4_gate_parent: weakref.ref[GatedPool]
        _dsv4_gate_global_layers: dict[int, int]  # sub-pool layer -> the global layer whose load carries it


logger = logging.getLogger("sglang_dsv4_ext.runtime.hooks.gate")

# Frames in our hook modules are never "the caller" a gate message names.
_HOOKS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


# Files of code that only passes a call on, whose frames the gate looks through: none in a server; a test run
# whose harness wraps every function in its own frame (mutation testing's trampolines) names its file here.
_PASS_THROUGH_FILES: tuple[str, ...] = ()

_logged_sites: set[str] = set()
_logged_lock = threading.Lock()


def _outer_frames(frame: FrameType | None) -> Iterator[FrameType]:
    """``frame`` and the frames calling it, innermost first, less the pass-through ones."""
    while frame is not None:
        if not frame.f_code.co_filename.endswith(_PASS_THROUGH_FILES):
            yield frame
        frame = frame.f_back


def _caller_site() -> str:
    """The first frame outside the gate, SGLang's pool module and the hook wrappers."""
    for frame in _outer_frames(sys._getframe(1)):
        filename = frame.f_code.co_filename
        if not filename.startswith(_HOOKS_DIR) and not filename.endswith(
            ("deepseek_v4_memory_pool.py", "hook_registry.py")
        ):
            return f"{filename}:{frame.f_lineno} in {frame.f_code.co_name}"
    return "<unknown caller>"


def _raw_list_indexer() -> CodeType:
    """The code that indexed the raw list: the caller of ``GatedLayerBuffers.__getitem__``, which called
    ``before_subpool_read``, which called this function."""
    frames = _outer_frames(sys._getframe(1))
    next(frames)  # before_subpool_read
    next(frames)  # GatedLayerBuffers.__getitem__
    return next(frames).f_code


def _parent_of(sub_pool: IndexerSubPool) -> GatedPool | None:
    ref = sub_pool.__dict__.get("_dsv4_gate_parent")
    return ref() if ref is not None else None


# SGLang's (and our) index-K writers index the raw buffer list; they are not reads.
_RAW_BUFFER_WRITERS = frozenset({"set_index_fused", "set_index_k_scale_buffer", "set_index_fp4"})
# HiCache's host pool keeps the raw list (``_dsv4_indexer_regions`` hands it over) and indexes
# it to copy layers in and out: that is the load itself, ordered by HiCache's own events.
_RAW_BUFFER_TRANSFER_FILES = ("memory_pool_host.py",)


def _raw_access_is_not_a_read(code: CodeType) -> bool:
    return code.co_name in _RAW_BUFFER_WRITERS or code.co_filename.endswith(_RAW_BUFFER_TRANSFER_FILES)


def before_subpool_read(sub_pool: GatedSubPool, local_layer_id: int, what: str, *, raw_access: bool = False) -> None:
    """Make a sub-pool read of layer ``local_layer_id`` safe, or refuse it in strict mode."""
    parent = _parent_of(sub_pool)
    if parent is None:
        return  # not part of a DSV4 pool (or not linked): nothing can load into it
    counter = parent.layer_transfer_counter
    if counter is None or getattr(counter, "consumer_index", -1) < 0:
        return  # HiCache off, or no load pending for this batch
    mode = parent.__dict__.get("_dsv4_gate_mode", GateMode.AUTO)
    if mode == GateMode.OFF:
        return
    global_layer = sub_pool._dsv4_gate_global_layers.get(local_layer_id)
    if global_layer is None:
        return  # not a layer of this stage: no load targets it (an out-of-range index raises on its own)
    local = global_layer - parent.start_layer
    if waited_upto(counter) >= local:
        return
    if raw_access and _raw_access_is_not_a_read(_raw_list_indexer()):
        return  # a writer (fresh pages, R4 in docs/patch-point-map.md) or HiCache's own transfer indexing the raw list
    site = _caller_site()
    message = (
        f"{what} read layer {global_layer}'s index-K through the sub-pool while its HiCache "
        f"load is pending and not yet waited for (caller: {site}); read through "
        f"DeepSeekV4TokenToKVPool.get_index_k_* or call wait_layer_transfer({global_layer}) first"
    )
    if mode == GateMode.STRICT:
        raise DSV4IndexKGateError(message)
    with _logged_lock:
        first = site not in _logged_sites
        _logged_sites.add(site)
    if first:
        logger.warning("index-K gate: %s; waiting for the load (logged once per call site)", message)
    parent.wait_layer_transfer(global_layer)


def make_subpool_reader_gate(name: str) -> Callable[..., Any]:
    label = f"DeepSeekV4IndexerPool.{name}"

    def gate_subpool_reader(
        original: Callable[..., Any], self: GatedSubPool, layer_id: int, *args: object, **kwargs: Any
    ) -> Any:
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


class GatedLayerBuffers(list["torch.Tensor"]):
    """The raw per-layer index-K buffer list, gated on item access (``buffers[layer]``).

    Iteration and ``len`` stay ungated: PD and HiCache take all buffers at construction,
    when no load can be pending.
    """

    __slots__ = ("_sub_pool_ref", "_parent_ref")
    _sub_pool_ref: weakref.ref[GatedSubPool]
    _parent_ref: weakref.ref[GatedPool]

    def __getitem__(self, key: SupportsIndex | slice) -> Any:
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


def loading_layers(pool: DSV4TokenToKVPool) -> dict[int, dict[int, int]]:
    """``{ratio: {sub-pool layer: global layer whose HiCache load carries it}}``.

    That is the layer's *source*: for ratios 4/128 each sub-pool layer belongs to one layer;
    for the V4.1 low ratios 1/2 several layers share the sub-pool layer of their kv_source
    layer, and HiCache loads it with the source's transfer layer
    (``hybrid_pool_assembler._dsv4_low_ratio_regions``), not with the later readers'.
    """
    sources = getattr(pool, "sources_by_ratio", None) or {}
    result: dict[int, dict[int, int]] = {
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


def link_subpools(pool: DSV4TokenToKVPool) -> None:
    """Connect a freshly built DSV4 pool's index-K sub-pools to it for the gate (pool creation)."""
    from sglang_dsv4_ext.config import load_config  # decided per pool, never at import

    mode = load_config().gate
    pool._dsv4_gate_mode = mode  # type: ignore[attr-defined]  # the gate's mark on SGLang's pool (GatedPool)
    if mode == GateMode.OFF:
        return
    global_layers = loading_layers(pool)
    for ratio, sub_pool in getattr(pool, "index_pools", {}).items():
        sub_pool._dsv4_gate_parent = weakref.ref(pool)
        sub_pool._dsv4_gate_global_layers = global_layers.get(ratio, {})
        buffers = getattr(sub_pool, "index_k_with_scale_buffer", None)
        if type(buffers) is list:  # SGLang's list of per-layer tensors; leave any other storage as it is
            gated = GatedLayerBuffers(buffers)
            gated._sub_pool_ref = weakref.ref(sub_pool)
            gated._parent_ref = weakref.ref(pool)  # type: ignore[arg-type]  # linked just above: a GatedPool
            sub_pool.index_k_with_scale_buffer = gated


# ---------------------------------------------------------------------------------------
# Top-level readers that the probe found ungated (older SGLang, or a drifted method)
# ---------------------------------------------------------------------------------------


def gate_toplevel_reader(
    original: Callable[..., Any], self: DSV4TokenToKVPool, layer_id: int, *args: object, **kwargs: Any
) -> Any:
    """Wait for the layer's load before an ungated top-level index-K reader returns data."""
    if self.layer_transfer_counter is not None and getattr(self, "_dsv4_gate_mode", GateMode.AUTO) != GateMode.OFF:
        self.wait_layer_transfer(layer_id)
    return original(self, layer_id, *args, **kwargs)
