"""The Protocols of sglang_dsv4_ext/runtime/sglang_types.py describe SGLang's real classes (0.5.23).

Each method a Protocol lists exists on the SGLang class it names, with the same parameter names: a hook
annotated with a Protocol then relies on nothing SGLang does not have. Attributes set in ``__init__``
are not visible on the class and are not checked here (the hooks' tests build the real objects).
"""

from __future__ import annotations

import inspect
import pkgutil

import pytest

from sglang_dsv4_ext.runtime import sglang_types


def differences(protocol, cls) -> dict:
    """Each method of ``protocol`` that ``cls`` lacks or takes other parameters in: name -> what differs."""
    out = {}
    for name, fn in vars(protocol).items():
        if not inspect.isfunction(fn) or name.startswith("__"):
            continue  # typing.Protocol's own __init__ / __subclasshook__
        expected = list(inspect.signature(fn).parameters)
        actual = getattr(cls, name, None)
        if actual is None:
            out[name] = "missing"
        elif list(inspect.signature(actual).parameters) != expected:
            out[name] = f"{list(inspect.signature(actual).parameters)} != {expected}"
    return out


@pytest.mark.parametrize("protocol", list(sglang_types.IMPLEMENTED_BY), ids=lambda p: p.__name__)
def test_each_protocol_method_is_on_the_sglang_class_with_the_same_parameters(protocol):
    cls = pkgutil.resolve_name(sglang_types.IMPLEMENTED_BY[protocol])
    assert any(inspect.isfunction(v) and not n.startswith("__") for n, v in vars(protocol).items())
    assert differences(protocol, cls) == {}


def test_a_protocol_that_differs_from_sglang_is_found():
    class Drifted(sglang_types.TopKBackend):
        def is_tilelang(self) -> bool: ...

        def is_torch(self, strict: bool) -> bool: ...

    cls = pkgutil.resolve_name(sglang_types.IMPLEMENTED_BY[sglang_types.TopKBackend])
    assert differences(Drifted, cls) == {"is_tilelang": "missing", "is_torch": "['self'] != ['self', 'strict']"}
