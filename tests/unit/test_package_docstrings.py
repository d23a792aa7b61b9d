"""Each package's ``__init__.py`` docstring lists its modules: every module and subpackage, and nothing else.

A listed module is written ``:mod:`.name``` (relative to the package); a module added without its line, or a
line left for a module moved away, fails here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import sglang_dsv4_ext

PACKAGE_DIR = Path(sglang_dsv4_ext.__file__).resolve().parent
PACKAGES = sorted(p.parent for p in PACKAGE_DIR.rglob("__init__.py"))
LISTED = re.compile(r":mod:`\.(\w+)`")


def members(package: Path) -> set[str]:
    """The package's own modules and subpackages (not theirs)."""
    modules = {p.stem for p in package.glob("*.py") if p.name != "__init__.py"}
    return modules | {p.parent.name for p in package.glob("*/__init__.py")}


def listed(docstring: str) -> set[str]:
    return set(LISTED.findall(docstring))


def test_listed_reads_relative_module_references_only():
    doc = "Modules: :mod:`.a` (x), :mod:`.b_c`; see :mod:`sglang_dsv4_ext.other` and ``.d``."
    assert listed(doc) == {"a", "b_c"}


def test_members_are_the_packages_own_modules_and_subpackages(tmp_path):
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    for name in ("__init__.py", "one.py", "sub/__init__.py", "sub/two.py", "sub/deeper/__init__.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "data").mkdir()  # a directory without __init__.py is not a package
    assert members(tmp_path) == {"one", "sub"}
    assert members(tmp_path / "sub") == {"two", "deeper"}


@pytest.mark.parametrize("package", PACKAGES, ids=[str(p.relative_to(PACKAGE_DIR.parent)) for p in PACKAGES])
def test_the_package_docstring_lists_exactly_its_modules(package):
    docstring = ast.get_docstring(ast.parse((package / "__init__.py").read_text()))
    assert docstring, f"{package / '__init__.py'} has no docstring"
    expected, found = members(package), listed(docstring)
    assert not expected - found, f"not listed in {package.name}/__init__.py: {sorted(expected - found)}"
    assert not found - expected, f"listed but not modules of {package.name}: {sorted(found - expected)}"
