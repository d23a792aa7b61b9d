"""Probe: does the installed SGLang already wait for the layer's load in an index-K reader?"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sglang_dsv4_ext.runtime import compat

UPSTREAM_GATED = "upstream-gated"
EXTENSION_GATED = "extension-gated"

# {method name: positional args after layer_id}, derived from the compat table's signatures.
TOPLEVEL_READERS: dict[str, int] = {
    t.attribute: t.required_args_after_layer_id() for t in compat.TOPLEVEL_INDEX_K_READERS
}
SUBPOOL_READERS: dict[str, int] = {
    t.attribute: t.required_args_after_layer_id() for t in compat.SUBPOOL_INDEX_K_READERS
}


class RecordingCounter:
    """Stands in for ``LayerDoneCounter``: records ``wait_until`` thresholds, never blocks."""

    def __init__(self, num_layers: int = 1 << 16, consumer_index: int = 0) -> None:
        self.num_layers = num_layers
        self.consumer_index = consumer_index
        self.waits: list[int] = []

    def wait_until(self, threshold: int) -> None:
        self.waits.append(threshold)


class _Absorb:
    """Absorbs whatever an accessor does with the pool's internals after (or before) waiting."""

    def __getattr__(self, name: str) -> _Absorb:
        return _Absorb()

    def __call__(self, *args: object, **kwargs: object) -> _Absorb:
        return _Absorb()

    def __getitem__(self, key: object) -> _Absorb:
        return _Absorb()

    def __iter__(self) -> Iterator[_Absorb]:  # tuple unpacking of layer_mapping items: (ratio, local_id, pool)
        return iter((_Absorb(), _Absorb(), _Absorb()))

    def __bool__(self) -> bool:
        return True

    def __index__(self) -> int:
        return 0

    __int__ = __index__

    def __sub__(self, other: object) -> _Absorb:
        return _Absorb()

    __rsub__ = __add__ = __radd__ = __mul__ = __rmul__ = __floordiv__ = __sub__


def probe_accessor(cls: type, name: str, extra_args: int, *, probe_layer: int = 7, start_layer: int = 2) -> bool:
    """True if ``cls.name`` (as SGLang ships it, through ``__wrapped__``) waits for its layer.

    The accessor runs on a probe instance whose layer-transfer counter records waits and
    whose other internals absorb every use; it must call ``wait_until(layer - start_layer)``.
    """
    fn = compat.unwrap_to_original(getattr(cls, name))
    probe_cls = type(f"_Probe{cls.__name__}", (cls,), {"__getattr__": lambda self, attr: _Absorb()})
    probe: Any = object.__new__(probe_cls)
    counter = RecordingCounter()
    probe.__dict__.update(layer_transfer_counter=counter, start_layer=start_layer)
    try:
        fn(probe, probe_layer, *([_Absorb()] * extra_args))
    except Exception:  # the accessor reached internals the probe cannot fake; the wait came first or never
        pass
    return (probe_layer - start_layer) in counter.waits


def probe_readers(pool_cls: type, readers: dict[str, int]) -> dict[str, str]:
    return {
        name: (UPSTREAM_GATED if probe_accessor(pool_cls, name, extra) else EXTENSION_GATED)
        for name, extra in readers.items()
    }
