"""The package's import rules, read from the source (every import statement, also those inside functions).

The package holds two worlds (README, "Layout"). The runtime side runs inside SGLang: ``plugin/``, the hooks it
installs (``hooks/``) and what they share (``index_k/``). The tools run as ``sglang-dsv4 COMMAND``. The rules:

1. a hook area (``hooks/X.py``, or the ``hooks/gate/`` package) imports no other hook area: areas share through
   ``index_k/``, the hook registry (``hooks/__init__.py``), ``plugin/`` and the shared top-level modules;
2. nothing on the runtime side (``plugin/``, ``index_k/``, ``hooks/``, ``bootstrap``) imports a tool;
3. ``index_k/`` imports neither ``hooks/`` nor ``plugin/`` (it is the layer both stand on), and ``sglang_cpu/``
   (SGLang's own code run on CPU) imports nothing of the runtime side or of the tools;
4. a tool never imports ``hooks/``, and takes only public names (no leading ``_``) from ``plugin/`` and ``index_k/``.

The checker is tested on synthetic sources first (each rule on a deliberate bad import), then run on the tree.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import sglang_dsv4_ext

PACKAGE_DIR = Path(sglang_dsv4_ext.__file__).resolve().parent
TOP = "sglang_dsv4_ext"
RUNTIME = ("plugin", "index_k", "hooks", "bootstrap")
TOOLS = ("cli", "doctor", "plan", "tool_support", "serving", "repro", "series", "recall", "report")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    """Whether ``name`` (dotted) is a module or package of the tree."""
    relative = Path(*name.split(".")[1:]) if "." in name else Path()
    return (PACKAGE_DIR / relative).with_suffix(".py").is_file() or (PACKAGE_DIR / relative / "__init__.py").is_file()


def imports(module: str, source: str, is_package: bool = False) -> Iterator[tuple[int, str, str | None]]:
    """``(line, imported module, imported name or None)`` for every import of ``source`` into our package.

    ``from A import b`` yields module ``A.b`` when that is a module of ours (``b`` then names no attribute).
    """
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == TOP or alias.name.startswith(TOP + "."):
                    yield node.lineno, alias.name, None
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            if base != TOP and not base.startswith(TOP + "."):
                continue
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                if is_module(candidate):
                    yield node.lineno, candidate, None
                else:
                    yield node.lineno, base, alias.name


def world(module: str) -> tuple[str, str]:
    """``(first part below the package, second part)`` of a dotted module name: ``("hooks", "gate")``."""
    parts = module.split(".")[1:] + ["", ""]
    return parts[0], parts[1]


def _hook_area(module: str) -> str | None:
    first, second = world(module)
    return second or None if first == "hooks" else None


def violations(module: str, source: str, is_package: bool = False) -> list[str]:
    found = []
    first, _ = world(module)
    for line, target, name in imports(module, source, is_package):
        target_first, _ = world(target)
        where = f"{module}:{line} imports {target}" + (f".{name}" if name else "")
        area, target_area = _hook_area(module), _hook_area(target)
        if area and target_area and target_area != area:
            found.append(f"{where}: hook areas share only through index_k/ (rule 1)")
        if first in RUNTIME and target_first in TOOLS:
            found.append(f"{where}: the runtime side never imports a tool (rule 2)")
        if first == "index_k" and target_first in ("hooks", "plugin"):
            found.append(f"{where}: index_k/ is below hooks/ and plugin/ (rule 3)")
        if first == "sglang_cpu" and target_first in RUNTIME + TOOLS:
            found.append(f"{where}: sglang_cpu/ runs SGLang's code only (rule 3)")
        if first in TOOLS and target_first == "hooks":
            found.append(f"{where}: tools never import hooks (rule 4)")
        if first in TOOLS and target_first in ("plugin", "index_k") and (name or target).rpartition(".")[2][:1] == "_":
            found.append(f"{where}: tools take only public names from the runtime side (rule 4)")
    return found


BAD = [
    ("sglang_dsv4_ext.hooks.pool", "from sglang_dsv4_ext.hooks import indexer\n", "rule 1"),
    ("sglang_dsv4_ext.hooks.pool", "def f():\n    from sglang_dsv4_ext.hooks.gate import waits\n", "rule 1"),
    ("sglang_dsv4_ext.hooks.gate.subpool", "from sglang_dsv4_ext.hooks.indexer import hooks\n", "rule 1"),
    ("sglang_dsv4_ext.hooks.sizing", "from . import pool\n", "rule 1"),
    ("sglang_dsv4_ext.index_k.dtype", "from sglang_dsv4_ext.serving import cli\n", "rule 2"),
    ("sglang_dsv4_ext.plugin.activation", "import sglang_dsv4_ext.repro.cli\n", "rule 2"),
    ("sglang_dsv4_ext.hooks.evidence", "from sglang_dsv4_ext.tool_support.stop_signals import raising\n", "rule 2"),
    ("sglang_dsv4_ext.bootstrap", "from sglang_dsv4_ext import cli\n", "rule 2"),
    ("sglang_dsv4_ext.index_k.capture", "from sglang_dsv4_ext.plugin import compat\n", "rule 3"),
    ("sglang_dsv4_ext.index_k.capture", "from ..hooks import indexer\n", "rule 3"),
    ("sglang_dsv4_ext.sglang_cpu.dsv4_model", "from sglang_dsv4_ext.index_k.dtype import BF16\n", "rule 3"),
    ("sglang_dsv4_ext.repro.server_info", "from sglang_dsv4_ext.hooks.evidence import RECORD_KEY\n", "rule 4"),
    ("sglang_dsv4_ext.doctor.cli", "from sglang_dsv4_ext.hooks import gate\n", "rule 4"),
    ("sglang_dsv4_ext.serving.cli", "from sglang_dsv4_ext.plugin.activation import _TABLE\n", "rule 4"),
]
GOOD = [
    ("sglang_dsv4_ext.hooks.pool", "from sglang_dsv4_ext.hooks import Hook\n"),  # the registry, not an area
    ("sglang_dsv4_ext.hooks.pool", "from sglang_dsv4_ext.index_k import budget, pool_lifecycle\n"),
    ("sglang_dsv4_ext.hooks.pool", "from sglang_dsv4_ext.plugin import compat\nfrom sglang_dsv4_ext import config\n"),
    ("sglang_dsv4_ext.hooks.gate.subpool", "from sglang_dsv4_ext.hooks.gate.waits import waited_upto\n"),
    ("sglang_dsv4_ext.hooks.gate", "from . import replay\n"),  # the package's own helper module
    ("sglang_dsv4_ext.repro.extension_check", "from sglang_dsv4_ext.plugin.activation import EVIDENCE_FIELDS\n"),
    ("sglang_dsv4_ext.recall.capture_files", "from sglang_dsv4_ext.index_k import capture_format as fmt\n"),
    ("sglang_dsv4_ext.index_k.capture_check", "from sglang_dsv4_ext.sglang_cpu.dsv4_model import load_model\n"),
]


@pytest.mark.parametrize("module, source, rule", BAD, ids=[f"{m}: {s.strip()}" for m, s, _ in BAD])
def test_the_checker_refuses_a_deliberate_bad_import(module, source, rule):
    is_package = module == "sglang_dsv4_ext.hooks.gate"
    found = violations(module, source, is_package)
    assert len(found) == 1 and f"({rule})" in found[0], found


@pytest.mark.parametrize("module, source", GOOD, ids=[f"{m}: {s.strip()}" for m, s in GOOD])
def test_the_checker_passes_what_the_rules_allow(module, source):
    assert violations(module, source, module == "sglang_dsv4_ext.hooks.gate") == []


def test_the_checker_sees_every_module_of_the_tree():
    modules = {module_name(p) for p in PACKAGE_DIR.rglob("*.py")}
    for part in RUNTIME + TOOLS + ("sglang_cpu",):
        assert any(m == f"{TOP}.{part}" or m.startswith(f"{TOP}.{part}.") for m in modules), part
    assert is_module("sglang_dsv4_ext.hooks.gate") and not is_module("sglang_dsv4_ext.hooks.Hook")


def test_the_tree_keeps_the_import_rules():
    found = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        found += violations(module_name(path), path.read_text(), path.name == "__init__.py")
    assert found == []
