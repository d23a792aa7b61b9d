"""Signatures of a table row as another SGLang release's source has them, read from that release's files.

No import of that release (its dependencies are not this environment's): each module is parsed with ``ast``
and a row's path is followed as ``pkgutil.resolve_name`` and ``getattr`` follow it on a live SGLang
(:func:`sglang_dsv4_ext.runtime.compat.resolve`): module, then class or function, then attribute, through
base classes and ``from X import Y`` re-exports. The signature is spelled as
:func:`sglang_dsv4_ext.runtime.compat.normalised_signature` spells it (names, kinds, ``repr`` of defaults; a
classmethod without its first parameter, as ``getattr`` on the class binds it).
"""

from __future__ import annotations

import ast
import zipfile
from collections.abc import Callable
from dataclasses import dataclass

MISSING = None


@dataclass
class Found:
    node: ast.AST | None  # a FunctionDef, or None for a non-function attribute (a class member, an assignment)
    classmethod: bool = False


class ReleaseSource:
    """The ``sglang`` package files of one release: ``read(relative_path) -> text or None``."""

    def __init__(self, read: Callable[[str], str | None]):
        self._read = read
        self._modules: dict[str, ast.Module | None] = {}
        self._packages: set[str] = set()

    @classmethod
    def from_wheel(cls, wheel: str) -> ReleaseSource:
        archive = zipfile.ZipFile(wheel)
        names = set(archive.namelist())

        def read(path: str) -> str | None:
            return archive.read(path).decode() if path in names else None

        return cls(read)

    @classmethod
    def from_directory(cls, root: str) -> ReleaseSource:
        import os

        def read(path: str) -> str | None:
            full = os.path.join(root, path)
            if not os.path.isfile(full):
                return None
            with open(full, encoding="utf-8") as f:
                return f.read()

        return cls(read)

    def module(self, dotted: str) -> ast.Module | None:
        if dotted not in self._modules:
            base = dotted.replace(".", "/")
            text = self._read(base + ".py")
            if text is None:
                text = self._read(base + "/__init__.py")
                self._packages.add(dotted) if text is not None else None
            self._modules[dotted] = ast.parse(text) if text is not None else None
        return self._modules[dotted]

    # ---- resolution ----
    def find(self, path: str) -> Found | None:
        """The definition ``path`` names, or None where this release has no such name."""
        parts = path.split(".")
        for split in range(len(parts) - 1, 0, -1):
            module_name = ".".join(parts[:split])
            if self.module(module_name) is not None:
                return self._find_in_module(module_name, parts[split:])
        return None

    def _find_in_module(self, module_name: str, names: list[str], depth: int = 0) -> Found | None:
        if depth > 8:
            return None
        tree = self.module(module_name)
        if tree is None:
            return None
        head, rest = names[0], names[1:]
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == head and not rest:
                return Found(node)
            if isinstance(node, ast.ClassDef) and node.name == head:
                return self._find_in_class(module_name, node, rest, depth) if rest else Found(None)
        return self._find_imported_or_assigned(module_name, tree, names, depth)

    def _find_imported_or_assigned(self, module_name: str, tree: ast.Module, names: list[str], depth: int):
        head, rest = names[0], names[1:]
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and (node.module or node.level):
                source = _absolute(module_name, node, module_name in self._packages)
                for alias in node.names:
                    if (alias.asname or alias.name) == head:
                        return self._find_in_module(source, [alias.name, *rest], depth + 1)
                    if alias.name == "*":  # ``from .common import *`` (sglang.srt.utils): look there too
                        found = self._find_in_module(source, names, depth + 1)
                        if found is not None:
                            return found
            if not rest and isinstance(node, (ast.Assign, ast.AnnAssign)) and head in _assigned(node):
                return Found(None)
        return None

    def _find_in_class(self, module_name: str, cls: ast.ClassDef, names: list[str], depth: int) -> Found | None:
        head, rest = names[0], names[1:]
        for node in cls.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == head and not rest:
                if any(_decorator_name(d) == "property" for d in node.decorator_list):
                    return Found(None)
                return Found(node, classmethod=any(_decorator_name(d) == "classmethod" for d in node.decorator_list))
            if isinstance(node, ast.ClassDef) and node.name == head:
                return self._find_in_class(module_name, node, rest, depth) if rest else Found(None)
            if not rest and isinstance(node, (ast.Assign, ast.AnnAssign)) and head in _assigned(node):
                value = node.value
                if isinstance(value, ast.Name) and value.id != head:  # an alias: ``forward_x = forward_y``
                    return self._find_in_class(module_name, cls, [value.id], depth + 1)
                return Found(None)
        for base in cls.bases:  # inherited: follow the bases as the MRO would, first to last
            base_path = _dotted(base)
            if base_path is None:
                continue
            found = self._find_in_module(module_name, [*base_path.split("."), *names], depth + 1)
            if found is not None:
                return found
        return None

    def signature(self, path: str) -> str | None:
        """``path``'s normalised signature in this release; None where it is missing or not a function."""
        found = self.find(path)
        if found is None or found.node is None:
            return MISSING
        return normalised(found.node, drop_first=found.classmethod)


def _absolute(module_name: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return str(node.module)
    parts = module_name.split(".")
    package = parts[: len(parts) - node.level + (1 if is_package else 0)]
    return ".".join([*package, node.module] if node.module else package)


def _assigned(node: ast.AST) -> set[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]  # type: ignore[attr-defined]
    return {t.id for t in targets if isinstance(t, ast.Name)}


def _decorator_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    if isinstance(node, ast.Subscript):  # Generic[T]-style bases
        return _dotted(node.value)
    return None


def _default(node: ast.expr) -> str:
    try:
        return repr(ast.literal_eval(node))
    except ValueError:
        return ast.unparse(node)


def normalised(fn: ast.FunctionDef | ast.AsyncFunctionDef, drop_first: bool = False) -> str:
    """As ``compat.normalised_signature`` spells a live function's signature."""
    a = fn.args
    positional = [*a.posonlyargs, *a.args]
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    pairs = list(zip(positional, defaults))
    if drop_first:
        pairs = pairs[1:]
    out = [p.arg + ("" if d is None else "=" + _default(d)) for p, d in pairs]
    if a.vararg is not None:
        out.append("*" + a.vararg.arg)
    elif a.kwonlyargs:
        out.append("*")
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append(p.arg + ("" if d is None else "=" + _default(d)))
    if a.kwarg is not None:
        out.append("**" + a.kwarg.arg)
    return "(" + ", ".join(out) + ")"
