"""The mutmut driver's module sets name what exists, and together they cover the runtime (docs/mutation-testing.md).

A set whose module glob matches nothing mutates nothing and reports no survivor; a test path that is gone is
dropped silently by the driver (``_existing``), and a ``--deselect`` of a renamed test deselects nothing, so the
test that passes only once per process runs again and "kills" every mutant it reaches. None of these fails a run:
this file does. The driver is imported, not run: mutmut itself is not needed here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sglang_dsv4_ext.tools.exit_codes import USAGE
from tests.support import mutmut_run

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = "sglang_dsv4_ext/runtime"

# Runtime modules no set mutates, each with why: mutmut mutates function bodies, and these have none that runs.
NOT_MUTATED = {
    f"{RUNTIME}/__init__.py": "the wing's docstring alone",
    f"{RUNTIME}/index_k/__init__.py": "the package's docstring alone",
    f"{RUNTIME}/record_names.py": "two string constants, no function",
    f"{RUNTIME}/sglang_types.py": "Protocols only (imported under TYPE_CHECKING; nothing in it runs in a server)",
}
# The evidence code outside the runtime that the page's sets name: each must stay in some set.
EVIDENCE_MODULES = (
    "sglang_dsv4_ext/config.py",
    "sglang_dsv4_ext/tools/repro/extension_check.py",
    "sglang_dsv4_ext/tools/repro/pairing.py",
    "sglang_dsv4_ext/tools/repro/verdict.py",
    "sglang_dsv4_ext/tools/recall/capture_files.py",
    "sglang_dsv4_ext/tools/recall/capture_check.py",
)

SETS = sorted(mutmut_run.MODULE_SETS.items())


def _matches(pattern: str) -> set[str]:
    return {str(p.relative_to(ROOT)) for p in ROOT.glob(pattern) if p.is_file()}


def _covered() -> set[str]:
    return {path for _, module_set in SETS for pattern in module_set.modules for path in _matches(pattern)}


@pytest.mark.parametrize(("name", "module_set"), SETS, ids=[name for name, _ in SETS])
def test_every_module_pattern_of_a_set_names_a_file(name, module_set):
    assert module_set.modules, f"set {name} mutates nothing"
    empty = [pattern for pattern in module_set.modules if not _matches(pattern)]
    assert not empty, f"set {name}: no file matches {empty}"


def _deselected(option: str) -> tuple[str, str | None]:
    node = option.removeprefix("--deselect=")
    path, _, test = node.partition("::")
    return path, test or None


@pytest.mark.parametrize(("name", "module_set"), SETS, ids=[name for name, _ in SETS])
def test_every_test_path_of_a_set_exists_and_every_deselected_test_is_defined(name, module_set):
    paths = [t for t in module_set.tests if not t.startswith("-")]
    assert paths, f"set {name} runs no test"
    missing = [t for t in paths if not (ROOT / t.split("::")[0]).exists()]
    assert not missing, f"set {name}: no such test path {missing}"
    for option in (t for t in module_set.tests if t.startswith("--deselect=")):
        path, test = _deselected(option)
        assert (ROOT / path).is_file(), f"set {name} deselects a missing file: {option}"
        if test is not None:
            function = test.split("[")[0]
            source = (ROOT / path).read_text()
            assert re.search(rf"^def {re.escape(function)}\(", source, re.M), f"set {name}: {option} names no test"


def test_every_runtime_module_is_in_a_set_or_said_why_not():
    runtime = _matches(f"{RUNTIME}/**/*.py")
    covered = _covered()
    assert not (covered & set(NOT_MUTATED)), "a module listed as not mutated is in a set"
    assert set(NOT_MUTATED) <= runtime, "a module listed as not mutated no longer exists"
    assert sorted(runtime - covered - set(NOT_MUTATED)) == []


def test_the_evidence_code_the_page_names_is_in_a_set():
    assert sorted(set(EVIDENCE_MODULES) - _covered()) == []


def test_the_runtime_set_is_the_union_of_the_five_runtime_sets():
    runtime_sets = ("activation", "indexer_hook", "pool_hooks", "integrity_gate", "capture_runtime")
    union = {m for name in runtime_sets for m in mutmut_run.MODULE_SETS[name].modules}
    assert set(mutmut_run.MODULE_SETS["runtime"].modules) == union


# ----- bad arguments: exit 2, the input named, before mutmut is imported or anything is written -----
def test_an_unknown_set_exits_2_naming_it_and_the_sets(capsys):
    with pytest.raises(SystemExit) as stopped:
        mutmut_run.main(["--set", "no-such-set"])
    assert stopped.value.code == USAGE
    err = capsys.readouterr().err
    assert "--set" in err and "'no-such-set'" in err and "activation" in err and "config" in err


def test_a_modules_file_that_does_not_exist_exits_2_naming_it(capsys):
    missing = "sglang_dsv4_ext/runtime/no_such_module.py"
    assert mutmut_run.main(["--modules", missing, "--tests", "tests/unit/hooks/test_evidence.py"]) == USAGE
    err = capsys.readouterr().err
    assert "--modules" in err and missing in err


def test_a_modules_glob_that_matches_no_file_exits_2_naming_it(capsys):
    pattern = "sglang_dsv4_ext/runtime/no_such_dir/*.py"
    assert mutmut_run.main(["--modules", pattern, "--tests", "tests/unit/hooks/test_evidence.py"]) == USAGE
    err = capsys.readouterr().err
    assert "--modules" in err and pattern in err


def test_no_set_and_no_modules_exits_2_naming_both_ways(capsys):
    assert mutmut_run.main([]) == USAGE
    err = capsys.readouterr().err
    assert "--set" in err and "--modules" in err and "activation" in err


def test_tests_that_do_not_exist_exit_2_naming_the_option(capsys):
    code = mutmut_run.main(["--modules", "sglang_dsv4_ext/config.py", "--tests", "tests/unit/no_such_test.py"])
    assert code == USAGE
    assert "--tests" in capsys.readouterr().err


@pytest.mark.parametrize("workers", ["0", "two", "-1"])
def test_a_worker_count_below_one_exits_2_naming_the_value_and_the_allowed(workers, capsys):
    with pytest.raises(SystemExit) as stopped:
        mutmut_run.main(["--set", "config", "--workers", workers])
    assert stopped.value.code == USAGE
    err = capsys.readouterr().err
    assert "--workers" in err and repr(workers) in err and "a whole number >= 1" in err
