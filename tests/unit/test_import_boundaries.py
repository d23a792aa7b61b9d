"""The package's import rules, read from the source (every import statement, also those inside functions).

The package holds two wings (docs/layout.md). ``runtime/`` runs inside SGLang's processes: activation
(``runtime/activation.py``), the hook table and the helpers at the top of the wing (``runtime/compat.py``,
``launch_identity``, ``rank_census``, ``record_names``, ``sglang_types``), the startup hook that hands over to
activation (``runtime/bootstrap.py``), the hooks activation installs (``runtime/hooks/``) and what they share
(``runtime/index_k/``). ``tools/`` runs as ``sglang-dsv4 COMMAND``. The rules:

1. a hook area (``runtime/hooks/X.py``, or the ``runtime/hooks/gate/`` package) imports no other hook area: areas
   share through ``runtime/index_k/``, the hook registry (``runtime/hooks/__init__.py``), the top of the runtime
   wing and the shared top-level modules;
2. nothing in the runtime wing imports the tools wing;
3. ``runtime/index_k/`` imports neither ``runtime/hooks/`` nor activation (it is the layer both stand on), and
   ``tools/sglang_cpu/`` (SGLang's own code run on CPU) imports nothing of the runtime wing or of the other tools
   (``tools/input_files`` and ``tools/exit_codes`` aside);
4. a tool never imports ``runtime/hooks/``, and takes only public names (no leading ``_``) from the runtime wing;
5. no arrow runs back up the runtime wing: the hooks never import activation (what they need of it, the
   evidence record and the pools built, reaches them through their ``HookContext``), and the top of the wing
   (the hook table and its helpers) imports neither activation, the hooks nor ``runtime/index_k/``.

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
RUNTIME, TOOLS = "runtime", "tools"
# the runtime wing's top: the hook table and the helpers every part of the wing may import
RUNTIME_TOP = ("compat", "launch_identity", "rank_census", "record_names", "sglang_types")
# the wing's two ways in: SGLang's plugin entry point and the startup hook, which hands over to activation
RUNTIME_ENTRIES = ("activation", "bootstrap")
# what tools/sglang_cpu/ may import of the tools wing: itself and the two small helpers every tool shares
SGLANG_CPU_MAY = ("sglang_cpu", "input_files", "exit_codes")


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


def world(module: str) -> tuple[str, str, str]:
    """``(wing, part, sub-part)`` of a dotted module name: ``("runtime", "hooks", "gate")``; ``""`` where absent.

    A top-level module (``config``, ``errors``) has no wing: its first part is returned as the part.
    """
    parts = module.split(".")[1:] + ["", "", ""]
    if parts[0] in (RUNTIME, TOOLS):
        return parts[0], parts[1], parts[2]
    return "", parts[0], parts[1]


def _hook_area(module: str) -> str | None:
    wing, part, sub = world(module)
    return sub or None if (wing, part) == (RUNTIME, "hooks") else None


def _is_private(module: str, name: str | None) -> bool:
    return (name or module).rpartition(".")[2][:1] == "_"


def _rule_violations(module: str, target: str, name: str | None) -> list[str]:
    """The rules ``module``'s import of ``target`` (``name`` from it) breaks, by number."""
    (wing, part, _), (target_wing, target_part, _) = world(module), world(target)
    broken = []
    area, target_area = _hook_area(module), _hook_area(target)
    if area and target_area and target_area != area:
        broken.append("hook areas share only through runtime/index_k/ (rule 1)")
    if wing == RUNTIME and target_wing == TOOLS:
        broken.append("the runtime wing never imports the tools wing (rule 2)")
    if (wing, part) == (RUNTIME, "index_k") and target_wing == RUNTIME and target_part in ("hooks", "activation"):
        broken.append("runtime/index_k/ is below the hooks and activation (rule 3)")
    if (wing, part) == (TOOLS, "sglang_cpu") and target_wing in (RUNTIME, TOOLS) and target_part not in SGLANG_CPU_MAY:
        broken.append("tools/sglang_cpu/ runs SGLang's code only (rule 3)")
    if wing == TOOLS and (target_wing, target_part) == (RUNTIME, "hooks"):
        broken.append("tools never import the hooks (rule 4)")
    if wing == TOOLS and target_wing == RUNTIME and _is_private(target, name):
        broken.append("tools take only public names from the runtime wing (rule 4)")
    upward = (part == "hooks" and target_part == "activation") or (
        part in RUNTIME_TOP and target_part in ("activation", "hooks", "index_k")
    )
    if wing == RUNTIME and target_wing == RUNTIME and upward:
        broken.append("no arrow runs back up the runtime wing (rule 5)")
    return broken


def violations(module: str, source: str, is_package: bool = False) -> list[str]:
    found = []
    for line, target, name in imports(module, source, is_package):
        where = f"{module}:{line} imports {target}" + (f".{name}" if name else "")
        found += [f"{where}: {why}" for why in _rule_violations(module, target, name)]
    return found


BAD = [
    ("sglang_dsv4_ext.runtime.hooks.pool", "from sglang_dsv4_ext.runtime.hooks import indexer\n", "rule 1"),
    (
        "sglang_dsv4_ext.runtime.hooks.pool",
        "def f():\n    from sglang_dsv4_ext.runtime.hooks.gate import waits\n",
        "rule 1",
    ),
    (
        "sglang_dsv4_ext.runtime.hooks.gate.subpool",
        "from sglang_dsv4_ext.runtime.hooks.indexer import hooks\n",
        "rule 1",
    ),
    ("sglang_dsv4_ext.runtime.hooks.sizing", "from . import pool\n", "rule 1"),
    ("sglang_dsv4_ext.runtime.index_k.dtype", "from sglang_dsv4_ext.tools.serving import cli\n", "rule 2"),
    ("sglang_dsv4_ext.runtime.activation", "import sglang_dsv4_ext.tools.repro.cli\n", "rule 2"),
    (
        "sglang_dsv4_ext.runtime.hooks.evidence",
        "from sglang_dsv4_ext.tools.tool_support.stop_signals import raising\n",
        "rule 2",
    ),
    ("sglang_dsv4_ext.runtime.bootstrap", "from sglang_dsv4_ext.tools import cli\n", "rule 2"),
    ("sglang_dsv4_ext.runtime.index_k.capture", "from sglang_dsv4_ext.runtime import activation\n", "rule 3"),
    ("sglang_dsv4_ext.runtime.index_k.capture", "from ..hooks import indexer\n", "rule 3"),
    (
        "sglang_dsv4_ext.tools.sglang_cpu.dsv4_model",
        "from sglang_dsv4_ext.runtime.index_k.dtype import BF16\n",
        "rule 3",
    ),
    (
        "sglang_dsv4_ext.tools.repro.server_info",
        "from sglang_dsv4_ext.runtime.hooks.evidence import RECORD_KEY\n",
        "rule 4",
    ),
    ("sglang_dsv4_ext.tools.doctor.cli", "from sglang_dsv4_ext.runtime.hooks import gate\n", "rule 4"),
    ("sglang_dsv4_ext.tools.serving.cli", "from sglang_dsv4_ext.runtime.activation import _TABLE\n", "rule 4"),
    ("sglang_dsv4_ext.runtime.hooks.pool", "def f():\n    from sglang_dsv4_ext.runtime import activation\n", "rule 5"),
    ("sglang_dsv4_ext.runtime.hooks.evidence", "from sglang_dsv4_ext.runtime.activation import X\n", "rule 5"),
    ("sglang_dsv4_ext.runtime.compat", "from sglang_dsv4_ext.runtime.hooks import Hook\n", "rule 5"),
    ("sglang_dsv4_ext.runtime.rank_census", "from sglang_dsv4_ext.runtime.index_k import dtype\n", "rule 5"),
]
GOOD = [
    (
        "sglang_dsv4_ext.runtime.hooks.pool",
        "from sglang_dsv4_ext.runtime.hooks import Hook\n",
    ),  # the registry, not an area
    ("sglang_dsv4_ext.runtime.hooks.pool", "from sglang_dsv4_ext.runtime.index_k import budget, pool_lifecycle\n"),
    (
        "sglang_dsv4_ext.runtime.hooks.pool",
        "from sglang_dsv4_ext.runtime import compat\nfrom sglang_dsv4_ext import config\n",
    ),
    (
        "sglang_dsv4_ext.runtime.hooks.gate.subpool",
        "from sglang_dsv4_ext.runtime.hooks.gate.waits import waited_upto\n",
    ),
    ("sglang_dsv4_ext.runtime.hooks.gate", "from . import replay\n"),  # the package's own helper module
    ("sglang_dsv4_ext.tools.repro.extension_check", "from sglang_dsv4_ext.runtime.activation import EVIDENCE_FIELDS\n"),
    (
        "sglang_dsv4_ext.tools.recall.capture_files",
        "from sglang_dsv4_ext.runtime.index_k import capture_format as fmt\n",
    ),
    (
        "sglang_dsv4_ext.tools.recall.capture_check",
        "from sglang_dsv4_ext.tools.sglang_cpu.dsv4_model import load_model\n",
    ),
    ("sglang_dsv4_ext.runtime.index_k.capture", "from sglang_dsv4_ext.runtime import compat\n"),  # the wing's top
    ("sglang_dsv4_ext.runtime.hooks.pool", "from sglang_dsv4_ext.runtime import rank_census\n"),
    ("sglang_dsv4_ext.runtime.activation", "from sglang_dsv4_ext.runtime import hooks\n"),  # downward
]


@pytest.mark.parametrize("module, source, rule", BAD, ids=[f"{m}: {s.strip()}" for m, s, _ in BAD])
def test_the_checker_refuses_a_deliberate_bad_import(module, source, rule):
    is_package = module == "sglang_dsv4_ext.runtime.hooks.gate"
    found = violations(module, source, is_package)
    assert len(found) == 1 and f"({rule})" in found[0], found


@pytest.mark.parametrize("module, source", GOOD, ids=[f"{m}: {s.strip()}" for m, s in GOOD])
def test_the_checker_passes_what_the_rules_allow(module, source):
    assert violations(module, source, module == "sglang_dsv4_ext.runtime.hooks.gate") == []


def test_the_checker_sees_every_module_of_the_tree():
    modules = {module_name(p) for p in PACKAGE_DIR.rglob("*.py")}
    parts = [f"{RUNTIME}.{p}" for p in ("hooks", "index_k", *RUNTIME_ENTRIES, *RUNTIME_TOP)]
    parts += [f"{TOOLS}.{p}" for p in ("cli", "doctor", "plan", "serving", "repro", "series", "recall", "report")]
    for part in parts + [f"{TOOLS}.sglang_cpu", f"{TOOLS}.tool_support"]:
        assert any(m == f"{TOP}.{part}" or m.startswith(f"{TOP}.{part}.") for m in modules), part
    assert is_module("sglang_dsv4_ext.runtime.hooks.gate") and not is_module("sglang_dsv4_ext.runtime.hooks.Hook")


def test_the_tree_keeps_the_import_rules():
    found = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        found += violations(module_name(path), path.read_text(), path.name == "__init__.py")
    assert found == []
