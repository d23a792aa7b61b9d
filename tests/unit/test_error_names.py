"""Every exception class of the package is named ``...Error``, except the two the table says why.

Read from the source: a class whose bases name an exception (ours, or a builtin one) is an exception class.
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import pytest

import sglang_dsv4_ext

PACKAGE_DIR = Path(sglang_dsv4_ext.__file__).resolve().parent
# name -> why it has no "Error" suffix
EXCEPTIONS_NOT_ERRORS = {
    "Bf16IndexKUnsupported": "named as its twin in the source patches (errors.py says why)",
    "Stopped": "a BaseException for a signal that stops a command, as KeyboardInterrupt is: not an error",
}
BUILTIN_EXCEPTIONS = {
    name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)
}


def exception_classes(sources: dict[str, str]) -> set[str]:
    """Names of the classes that derive, directly or through each other, from an exception."""
    bases = {}
    for source in sources.values():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = {
                    b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases
                }
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, of in bases.items():
            if name not in found and of & (BUILTIN_EXCEPTIONS | found):
                found.add(name)
                changed = True
    return found


@pytest.mark.parametrize(
    "source, expected",
    [
        ("class A(ValueError): pass\nclass B(A): pass\nclass C: pass\n", {"A", "B"}),
        ("class D(errors.Dsv4ExtError): pass\nclass Dsv4ExtError(Exception): pass\n", {"D", "Dsv4ExtError"}),
    ],
)
def test_exception_classes_follows_bases_through_our_own_classes(source, expected):
    assert exception_classes({"m.py": source}) == expected


def test_every_exception_class_is_named_error():
    sources = {str(p): p.read_text() for p in PACKAGE_DIR.rglob("*.py")}
    names = exception_classes(sources)
    assert set(EXCEPTIONS_NOT_ERRORS) <= names  # the exceptions to the rule still exist
    assert sorted(n for n in names - set(EXCEPTIONS_NOT_ERRORS) if not n.endswith("Error")) == []
