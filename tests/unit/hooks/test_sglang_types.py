"""The Protocols of sglang_dsv4_ext/runtime/sglang_types.py describe SGLang's real classes (the installed release).

Each method a Protocol lists exists on the SGLang class it names, with the same parameter names, and each
attribute it lists is one the class has: a class attribute, a field annotation, or an attribute its methods
(or its bases') assign on ``self``, read from their source. A hook annotated with a Protocol then relies on
nothing SGLang does not have, and the type checker checks the hooks against these Protocols. The pool
Protocols are also checked on real pools built on CPU (tests/support/dsv4_pools.py).
"""

from __future__ import annotations

import ast
import inspect
import pkgutil
import textwrap

import pytest

from sglang_dsv4_ext.runtime import sglang_types
from tests.support import dsv4_pools


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


def methods(protocol) -> list[str]:
    """The methods ``protocol`` lists (typing.Protocol's own dunders left out)."""
    return [name for name, fn in vars(protocol).items() if inspect.isfunction(fn) and not name.startswith("__")]


@pytest.mark.parametrize("protocol", [p for p in sglang_types.IMPLEMENTED_BY if methods(p)], ids=lambda p: p.__name__)
def test_each_protocol_method_is_on_the_sglang_class_with_the_same_parameters(protocol):
    cls = pkgutil.resolve_name(sglang_types.IMPLEMENTED_BY[protocol])
    assert differences(protocol, cls) == {}


def test_every_protocol_lists_a_member_and_names_its_sglang_class():
    protocols = [
        v
        for v in vars(sglang_types).values()
        if isinstance(v, type) and getattr(v, "_is_protocol", False) and v.__module__ == sglang_types.__name__
    ]
    assert sorted(p.__name__ for p in protocols) == sorted(p.__name__ for p in sglang_types.IMPLEMENTED_BY)
    assert [p.__name__ for p in protocols if not methods(p) and not attributes(p)] == []


def test_a_protocol_that_differs_from_sglang_is_found():
    class Drifted(sglang_types.TopKBackend):
        def is_tilelang(self) -> bool: ...

        def is_torch(self, strict: bool) -> bool: ...

    cls = pkgutil.resolve_name(sglang_types.IMPLEMENTED_BY[sglang_types.TopKBackend])
    assert differences(Drifted, cls) == {"is_tilelang": "missing", "is_torch": "['self'] != ['self', 'strict']"}


def attributes(protocol) -> list[str]:
    """The data members ``protocol`` lists (its own annotations; methods are checked by ``differences``)."""
    return [name for name in vars(protocol).get("__annotations__", {}) if not name.startswith("__")]


def self_assigned(cls) -> set[str]:
    """Every ``self.X = ...`` / ``self.X: T = ...`` target in the source of ``cls`` and its bases."""
    names: set[str] = set()
    for klass in cls.__mro__:
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):  # a builtin or C base: no source
            continue
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            for target in targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "self"
                ):
                    names.add(target.attr)
    return names


def missing_attributes(protocol, cls) -> list[str]:
    """The attributes of ``protocol`` that ``cls`` neither has, nor annotates, nor assigns on ``self``."""
    annotated = {name for klass in cls.__mro__ for name in vars(klass).get("__annotations__", {})}
    found = annotated | self_assigned(cls)
    return [name for name in attributes(protocol) if not hasattr(cls, name) and name not in found]


@pytest.mark.parametrize(
    "protocol", [p for p in sglang_types.IMPLEMENTED_BY if attributes(p)], ids=lambda p: p.__name__
)
def test_each_protocol_attribute_is_one_the_sglang_class_has(protocol):
    cls = pkgutil.resolve_name(sglang_types.IMPLEMENTED_BY[protocol])
    assert missing_attributes(protocol, cls) == []


def test_an_attribute_sglang_does_not_have_is_found():
    class Drifted(sglang_types.IndexerSubPool):
        index_k_pages: int  # no such attribute on SGLang's indexer pool

    cls = pkgutil.resolve_name(sglang_types.IMPLEMENTED_BY[sglang_types.IndexerSubPool])
    assert missing_attributes(Drifted, cls) == ["index_k_pages"]
    assert "index_head_dim" in self_assigned(cls)  # what the check reads: an attribute set in __init__


def test_a_real_pool_has_every_member_its_protocols_list(cpu_server_args):
    """A real DeepSeekV4TokenToKVPool built on CPU, and its c4 indexer sub-pool, have each listed member."""
    pool = dsv4_pools.small_pool()
    sub_pool = pool.index_pools[4]
    for protocol, obj in ((sglang_types.DSV4TokenToKVPool, pool), (sglang_types.IndexerSubPool, sub_pool)):
        assert [name for name in [*attributes(protocol), *methods(protocol)] if not hasattr(obj, name)] == [], protocol
    assert pool.c4_indexer_kv_pool is sub_pool
