"""Every SGLang name a hook module calls or imports is a row of the table (compat.TARGETS or compat.CALLED).

An AST scan of ``sglang_dsv4_ext/runtime/hooks/**`` finds what a hook reaches in SGLang without our table knowing:
  * a name imported from an ``sglang`` module (``from sglang.x import Name``), and each member read off it
    (``Name.member``); a module imported from SGLang (``from sglang.x import mod``, ``import sglang.x as m``)
    and each name read off it (``mod.name``);
  * a call of a private method (``obj._name(...)``, one leading underscore) that our own code does not define:
    on a hook's SGLang objects that is SGLang's private API (``backend._get_paged_compress_metadata``).
A reference is listed when a row's path is the name, or lies under it (a row on ``Class.member`` lists
``Class``); a private call is listed when a row's last component is its name. Public methods called on
SGLang objects cannot be told from ours without types: the rows for those the bf16 path relies on
(the top-k branch selection) are written by hand, and each row must still be spelled in its hook module.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from collections.abc import Iterable
from pathlib import Path

from sglang_dsv4_ext.runtime import compat

ROOT = Path(__file__).resolve().parents[3]
HOOKS = ROOT / "sglang_dsv4_ext" / "runtime" / "hooks"
_PRIVATE = re.compile(r"^_[A-Za-z0-9]\w*$")  # one leading underscore, not a dunder
_SGLANG_DIR = Path(next(iter(importlib.util.find_spec("sglang").submodule_search_locations))).parent


def _is_sglang_module(dotted: str) -> bool:
    """Whether ``dotted`` names a module of the installed SGLang (found on disk: importing it costs seconds)."""
    path = _SGLANG_DIR.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _own_names() -> set[str]:
    """Functions and attributes our own code defines (a private call of one of them is not SGLang's)."""
    names: set[str] = set()
    for path in [*(ROOT / "sglang_dsv4_ext").rglob("*.py"), *(ROOT / "kernels_sm120").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _PRIVATE.match(node.value):
                names.add(node.value)  # __slots__ entries, setattr names
    return names


def _imports(tree: ast.AST) -> tuple[dict, dict, set[str]]:
    """(local name -> SGLang module, local name -> SGLang object path, local names of other modules)."""
    modules, objects, others = {}, {}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "sglang":
            for alias in node.names:
                full, local = f"{node.module}.{alias.name}", alias.asname or alias.name
                (modules if _is_sglang_module(full) else objects)[local] = full
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "sglang":
                    modules[alias.asname or "sglang"] = alias.name if alias.asname else "sglang"
                else:
                    others.add(alias.asname or alias.name.split(".")[0])
    return modules, objects, others


def sglang_references(source: str, own: set[str]) -> tuple[set[str], set[str]]:
    """(dotted SGLang names ``source`` imports or reads, private method names it calls that ``own`` lacks)."""
    tree = ast.parse(source)
    modules, objects, others = _imports(tree)
    references = set(objects.values())
    private_calls = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            base = modules.get(node.value.id) or objects.get(node.value.id)
            if base is not None:
                references.add(f"{base}.{node.attr}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _PRIVATE.match(node.func.attr):
            receiver = node.func.value
            if isinstance(receiver, ast.Name) and (receiver.id in modules or receiver.id in others):
                continue  # a module's private name: read off an SGLang module it is a reference above
            if node.func.attr not in own:
                private_calls.add(node.func.attr)
    return references, private_calls


def unlisted(source: str, rows: Iterable[compat.Target], own: set[str]) -> list[str]:
    """What ``source`` reaches in SGLang that no row lists."""
    paths = [row.path for row in rows]
    attributes = {row.attribute for row in rows}
    references, private_calls = sglang_references(source, own)
    missing = [name for name in references if not any(p == name or p.startswith(name + ".") for p in paths)]
    missing += [f"<obj>.{name}(...)" for name in private_calls if name not in attributes]
    return sorted(missing)


TABLE = [*compat.TARGETS, *compat.CALLED]


def _hook_files() -> list[Path]:
    return sorted(HOOKS.rglob("*.py"))


def test_every_sglang_name_a_hook_calls_or_imports_is_a_row():
    own = _own_names()
    found = {str(path.relative_to(ROOT)): unlisted(path.read_text(), TABLE, own) for path in _hook_files()}
    assert {path: names for path, names in found.items() if names} == {}
    assert len(found) >= 10  # the scan saw the hook modules (gate's package included)


def test_an_unlisted_call_or_import_fails_the_scan():
    source = (
        "from sglang.srt.layers.attention.dsv4 import indexer as sg_indexer\n"
        "from sglang.srt.mem_cache.hicache_storage import PoolName, PoolTransfer\n"
        "def f(backend, rows):\n"
        "    sg_indexer.plan_topk_v2(rows)\n"  # listed
        "    sg_indexer.topk_transform_paged_v3(rows)\n"  # not listed
        "    backend._get_out_loc(4)\n"  # listed
        "    backend._forward_prepare_speculative(rows)\n"  # not listed
        "    return PoolName.KV, PoolName.SWA\n"  # KV listed, SWA not
    )
    assert unlisted(source, TABLE, _own_names()) == [
        "<obj>._forward_prepare_speculative(...)",
        "sglang.srt.layers.attention.dsv4.indexer.topk_transform_paged_v3",
        "sglang.srt.mem_cache.hicache_storage.PoolName.SWA",
        "sglang.srt.mem_cache.hicache_storage.PoolTransfer",
    ]


def test_a_hook_calling_a_name_the_table_drops_fails_the_scan():
    """The real indexer hook against a table without one of its called rows."""
    source = (HOOKS / "indexer.py").read_text()
    dropped = [row for row in TABLE if row.attribute not in ("_forward_prepare_normal", "plan_topk_v2")]
    assert unlisted(source, dropped, _own_names()) == [
        "<obj>._forward_prepare_normal(...)",
        "sglang.srt.layers.attention.dsv4.indexer.plan_topk_v2",
    ]


def test_table_names_are_spelled_once():
    paths = [row.path for row in TABLE]
    assert sorted(p for p in set(paths) if paths.count(p) > 1) == []


def test_every_called_row_is_spelled_in_its_hook_module():
    """No stale row: the name a called row lists appears in the source of the hook module it names."""
    stale = []
    for row in compat.CALLED:
        area = HOOKS / f"{row.area}.py"
        sources = [area] if area.exists() else sorted((HOOKS / row.area).rglob("*.py"))
        text = "".join(path.read_text() for path in sources)
        name = row.owner_path.rpartition(".")[2] if row.attribute == "__init__" else row.attribute
        if not re.search(rf"\b{re.escape(name)}\b", text):
            stale.append(row.path)
    assert sources and stale == []


def test_called_rows_match_the_installed_sglang():
    """The rows of the installed release (each row's own signature, or its 0.5.22 one on 0.5.22)."""
    rows = compat.table_for(compat.installed_sglang_version(), compat.CALLED)
    assert len(rows) == len(compat.CALLED)  # every name the hooks call exists on each supported release
    assert [d.describe() for d in compat.check_targets(rows)] == []
