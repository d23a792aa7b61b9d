"""doctor's list of SGLang entry points that load plugins matches the installed SGLang's source.

Every file of the installed SGLang (its language runtime: ``srt/``, the launchers, the CLI; the diffusion
runtime ``multimodal_gen`` has a plugin loader of its own) is parsed with ``ast``; the files that call
``load_plugins()`` must be exactly doctor's "load plugins" list, and the entry points doctor lists as
never loading them must not call it.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import sglang

from sglang_dsv4_ext.tools.doctor import sglang_entry_points

SGLANG = Path(sglang.__file__).parent


def _calls_load_plugins(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(errors="replace"))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name == "load_plugins":
                return True
    return False


def test_the_files_that_call_load_plugins_are_the_listed_entry_points():
    callers = set()
    for path in SGLANG.rglob("*.py"):
        relative = path.relative_to(SGLANG).as_posix()
        if relative.startswith(("multimodal_gen/", "srt/plugins/", "test/")) or "/test" in relative:
            continue
        if _calls_load_plugins(path):
            callers.add(relative)
    assert callers == {path for _, path in sglang_entry_points.LOAD_PLUGINS}
    for _, path in sglang_entry_points.NEVER_LOAD_PLUGINS:
        assert (SGLANG / path).is_file() and not _calls_load_plugins(SGLANG / path), path


def test_doctor_lists_them_and_says_whether_the_startup_hook_runs_here(ext_active, capsys, monkeypatch):
    from sglang_dsv4_ext.runtime import bootstrap
    from sglang_dsv4_ext.tools import cli

    monkeypatch.setattr(bootstrap, "_INSTALLED", [])  # this test process: checkout on PYTHONPATH, no .pth
    assert cli.main(["doctor", "--json"]) == 0
    entry_points = json.loads(capsys.readouterr().out)["entry_points"]
    assert "python -m sglang.benchmark.one_batch" in entry_points["never_load_plugins"]
    assert entry_points["load_plugins"][0] == "python -m sglang.launch_server"
    assert entry_points["startup_hook"].startswith("NOT running in this interpreter")  # never claimed when absent
    assert "refused by `sglang-dsv4 serve`" in entry_points["use_ray"]
    monkeypatch.setattr(bootstrap, "_INSTALLED", [bootstrap.DSV4ModelImportWatch()])  # what the .pth leaves
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "startup hook: installed: in those entry points the DeepSeek-V4 model build calls load_plugins()" in out
    assert "never load plugins: python -m sglang.benchmark.one_batch" in out
