"""Machine mutation testing with mutmut over a chosen module set, the fast unit tests as the test command.

Run from the repository root (``make mutmut``, docs/mutation-testing.md):

    python -m tests.support.mutmut_run --set config
    python -m tests.support.mutmut_run --set config --survivors   # after adding tests: survivors and untested again
    python -m tests.support.mutmut_run --modules sglang_dsv4_ext/config.py --tests tests/unit/cli
    python -m tests.support.mutmut_run --list

mutmut copies the package into ``build/mutmut/SET/mutants/``, rewrites every function there into a
dispatcher over its mutants, runs the chosen tests once to learn which tests reach which function,
then runs, per mutant, only the tests that reach its function, in a process forked from the one that
already imported SGLang (so a mutant costs its tests, not an SGLang import). A test that starts a
fresh Python process runs the unmutated tree there: such cases stay in the hand-kept table
(tests/support/mutation_pass.py), as do the two-release cases.

The module sets below name the modules and the unit tests that exercise them. ``--modules`` and
``--tests`` replace a set's. ``--summary`` prints the per-module counts of the last run. Exits 0 (a
survivor is a finding to triage, not a failure of the run) and 2 on a bad argument.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sglang_dsv4_ext.tools.exit_codes import OK, USAGE

ROOT = Path(__file__).resolve().parents[2]
# One working directory per module set (links to the tree), so each set's mutants/ and results stay
# beside each other: mutmut writes mutants/ in its working directory and puts back unmutated copies of
# the files a run does not mutate.
WORK_ROOT = ROOT / "build" / "mutmut"
_LINKED = (
    "sglang_dsv4_ext",
    "tests",
    "kernels_sm120",
    "docs",
    "serve",
    "patches",
    "benchmarks",
    "pyproject.toml",
    "README.md",
    "CHANGELOG.md",
    "Makefile",
    "setup.py",
    "MANIFEST.in",
)


@dataclass(frozen=True)
class ModuleSet:
    modules: tuple[str, ...]  # files relative to the repository root
    tests: tuple[str, ...]  # pytest paths or node ids that exercise them


_REPRO = "tests/unit/repro"
_HOOKS = "tests/unit/hooks"
MODULE_SETS: dict[str, ModuleSet] = {
    "config": ModuleSet(
        ("sglang_dsv4_ext/config.py",),
        (
            "tests/unit/cli/test_settings_rows.py",
            "tests/unit/cli/test_bad_input_config.py",
            "tests/unit/cli/test_mutation_survivors_config.py",
            "tests/unit/cli/test_config_choices.py",
            f"{_HOOKS}/test_evidence.py",
        ),
    ),
    "extension_check": ModuleSet(
        ("sglang_dsv4_ext/tools/repro/extension_check.py",),
        (f"{_REPRO}/test_expect_extension.py", f"{_REPRO}/test_mutation_survivors_extension_check.py"),
    ),
    "pairing": ModuleSet(
        ("sglang_dsv4_ext/tools/repro/pairing.py",),
        (f"{_REPRO}/test_bad_input_compare.py", f"{_REPRO}/test_mutation_survivors_pairing.py"),
    ),
    "verdict": ModuleSet(
        ("sglang_dsv4_ext/tools/repro/verdict.py",),
        (
            f"{_REPRO}/test_verdict_table.py",
            f"{_REPRO}/test_repro_units.py",
            f"{_REPRO}/test_settings_table.py",
            f"{_REPRO}/test_mutation_survivors_verdict.py",
            f"{_REPRO}/test_abort_verdict.py::test_a_finish_reason_outside_stop_length_tool_calls_is_its_own_transport_class",
        ),
    ),
    "integrity": ModuleSet(
        ("sglang_dsv4_ext/runtime/index_k/integrity.py",),
        (
            f"{_HOOKS}/test_integrity.py",
            f"{_HOOKS}/test_integrity_counts.py",
            f"{_HOOKS}/test_integrity_host_reuse.py",
            f"{_HOOKS}/test_integrity_sampling.py",
            f"{_HOOKS}/test_mutation_survivors_integrity.py",
            # Reads the process's Prometheus counters as totals: it passes once per process, and mutmut runs the
            # tests again in the process it forks each mutant from (every mutant would be "killed" by it).
            f"--deselect={_HOOKS}/test_integrity_counts.py::test_every_loaded_page_is_counted_once_checked_or_why_not",
        ),
    ),
    "compat": ModuleSet(
        ("sglang_dsv4_ext/runtime/compat.py",),
        (
            f"{_HOOKS}/test_called_names.py",
            f"{_HOOKS}/test_release_paths.py",
            f"{_HOOKS}/test_hook_module_blocks.py",
            f"{_HOOKS}/test_mutation_survivors_compat.py",
        ),
    ),
    "capture": ModuleSet(
        ("sglang_dsv4_ext/tools/recall/capture_files.py", "sglang_dsv4_ext/tools/recall/capture_check.py"),
        ("tests/unit/recall", f"{_HOOKS}/test_index_k_capture.py"),
    ),
}

# The runtime modules, in five sets that can run side by side (each set works in its own build/mutmut/SET/).
_RUNTIME_MODULES: dict[str, tuple[str, ...]] = {
    "activation": (
        "sglang_dsv4_ext/runtime/activation.py",
        "sglang_dsv4_ext/runtime/launch_identity.py",
        "sglang_dsv4_ext/runtime/bootstrap.py",
        "sglang_dsv4_ext/runtime/rank_census.py",
        "sglang_dsv4_ext/runtime/hooks/__init__.py",
        "sglang_dsv4_ext/runtime/hooks/evidence.py",
    ),
    "indexer_hook": (
        "sglang_dsv4_ext/runtime/hooks/indexer.py",
        "sglang_dsv4_ext/runtime/index_k/fp8_logits.py",
    ),
    "pool_hooks": (
        "sglang_dsv4_ext/runtime/hooks/pool.py",
        "sglang_dsv4_ext/runtime/hooks/sizing.py",
        "sglang_dsv4_ext/runtime/hooks/pd.py",
        "sglang_dsv4_ext/runtime/hooks/hicache.py",
        "sglang_dsv4_ext/runtime/index_k/budget.py",
        "sglang_dsv4_ext/runtime/index_k/dtype.py",
        "sglang_dsv4_ext/runtime/index_k/pool_lifecycle.py",
    ),
    "integrity_gate": (
        "sglang_dsv4_ext/runtime/hooks/integrity.py",
        "sglang_dsv4_ext/runtime/hooks/gate/*.py",
    ),
    "capture_runtime": (
        "sglang_dsv4_ext/runtime/index_k/capture.py",
        "sglang_dsv4_ext/runtime/index_k/capture_format.py",
    ),
}
_RUNTIME_TESTS = (
    _HOOKS,
    # Pass once per process (mutmut runs the tests again in the process it forks each mutant from): the
    # Prometheus totals, and the gate's log, given once per call site.
    f"--deselect={_HOOKS}/test_integrity_counts.py::test_every_loaded_page_is_counted_once_checked_or_why_not",
    f"--deselect={_HOOKS}/test_integrity_launch.py",
    f"--deselect={_HOOKS}/test_gate.py::test_auto_waits_for_the_layer_before_the_read_and_logs_once_per_call_site",
    # Name the caller of a refused read, the first frame outside the gate: under mutmut that is its trampoline.
    f"--deselect={_HOOKS}/test_gate.py::test_ungated_toplevel_reader_is_found_and_wrapped_through_hook_registry",
    f"--deselect={_HOOKS}/test_gate.py::test_strict_refuses_a_subpool_read_during_a_pending_load_naming_the_caller",
)
# The runtime capture's own tests: the capturer end to end (with recall reading its files back), and the recall tests
# whose files are checksummed with capture_format's content_checksum and that compute the checksum independently.
_CAPTURE_RUNTIME_TESTS = (
    f"{_HOOKS}/test_index_k_capture.py",
    f"{_HOOKS}/test_mutation_survivors_capture_runtime.py",
    "tests/unit/recall/test_recall.py",
)
MODULE_SETS.update({name: ModuleSet(modules, _RUNTIME_TESTS) for name, modules in _RUNTIME_MODULES.items()})
# The pool area's own tests: every test that builds a pool reaches its hooks, so the whole of tests/unit/hooks
# would make each of its survivors cost a minute or more of pool builds that pin nothing of these modules.
MODULE_SETS["pool_hooks"] = ModuleSet(
    _RUNTIME_MODULES["pool_hooks"],
    (
        f"{_HOOKS}/test_bf16_storage.py",
        f"{_HOOKS}/test_sizing.py",
        f"{_HOOKS}/test_sizing_v41.py",
        f"{_HOOKS}/test_fp4_budget.py",
        f"{_HOOKS}/test_index_k_page_aligned.py",
        f"{_HOOKS}/test_external_linker.py",
        f"{_HOOKS}/test_release_paths.py",
        f"{_HOOKS}/test_evidence_built.py",
        f"{_HOOKS}/test_mutation_survivors_pool_hooks.py",
    ),
)
# The gate and the integrity hook: the test files that reach them (a pool built with HiCache's counter, its host
# pool, the prefill-graph replay), not all of tests/unit/hooks (the first run and every survivor cost all of them).
MODULE_SETS["integrity_gate"] = ModuleSet(
    _RUNTIME_MODULES["integrity_gate"],
    (
        f"{_HOOKS}/test_gate.py",
        f"{_HOOKS}/test_gate_v41.py",
        f"{_HOOKS}/test_configured_hooks.py",
        f"{_HOOKS}/test_v41_coverage.py",
        f"{_HOOKS}/test_bf16_storage.py",
        f"{_HOOKS}/test_integrity.py",
        f"{_HOOKS}/test_integrity_counts.py",
        f"{_HOOKS}/test_integrity_host_reuse.py",
        f"{_HOOKS}/test_integrity_sampling.py",
        f"{_HOOKS}/test_mutation_survivors_integrity.py",
        f"{_HOOKS}/test_mutation_survivors_integrity_gate.py",
        "tests/integration/test_gate_prefill_replay.py",
        f"{_HOOKS}/test_integrity_launch.py",
        # Reads the process's Prometheus counters as totals (it passes once per process, as above).
        f"--deselect={_HOOKS}/test_integrity_counts.py::test_every_loaded_page_is_counted_once_checked_or_why_not",
        f"--deselect={_HOOKS}/test_integrity_launch.py::test_the_last_verifications_reach_the_counters_without_another_load",
    ),
)
# The indexer hook and the logits router are reached only by the indexer's own tests (the rest of tests/unit/hooks
# calls neither): each survivor costs the whole test command, and the Triton-interpreted kernel tests are slow.
MODULE_SETS["indexer_hook"] = ModuleSet(
    _RUNTIME_MODULES["indexer_hook"],
    (
        f"{_HOOKS}/test_indexer.py",
        f"{_HOOKS}/test_fp8_logits_route.py",
        f"{_HOOKS}/test_fp4_logits_route.py",
        f"{_HOOKS}/test_index_k_capture.py",
        f"{_HOOKS}/test_mutation_survivors_indexer_hook.py",
    ),
)
# Activation runs once per process (the session's ``ext_active``): mutmut's forked mutants find it done, so its
# functions are reached only by the tests that activate afresh inside the test (the survivor tests) and by those
# that read what activation recorded, the evidence and the pools that report to it.
MODULE_SETS["activation"] = ModuleSet(
    _RUNTIME_MODULES["activation"],
    (
        f"{_HOOKS}/test_mutation_survivors_activation.py",
        f"{_HOOKS}/test_evidence.py",
        f"{_HOOKS}/test_evidence_built.py",
        f"{_HOOKS}/test_release_paths.py",
        f"{_HOOKS}/test_v41_coverage.py",
        f"{_HOOKS}/test_bf16_storage.py",
        f"{_HOOKS}/test_indexer.py",
        f"{_HOOKS}/test_gate.py",
        *(t for t in _RUNTIME_TESTS if t.startswith(f"--deselect={_HOOKS}/test_gate.py")),
    ),
)
MODULE_SETS["capture_runtime"] = ModuleSet(_RUNTIME_MODULES["capture_runtime"], _CAPTURE_RUNTIME_TESTS)
# All of them in one run (hours on two cores).
MODULE_SETS["runtime"] = ModuleSet(tuple(m for ms in _RUNTIME_MODULES.values() for m in ms), _RUNTIME_TESTS)


_STATUS_BY_EXIT_CODE = {
    None: "not run yet",
    1: "killed",
    3: "killed",
    0: "survived",
    5: "no tests",
    33: "no tests",
    36: "timeout",
    -24: "timeout",  # SIGXCPU: the CPU-time limit mutmut sets per mutant
    -9: "timeout",  # SIGKILL: mutmut's second stop after SIGXCPU (or a mutant stopped by hand)
}


def _existing(paths: Sequence[str]) -> list[str]:
    """Test paths of a set that this tree has (a set may name a file another branch adds); options kept."""
    return [p for p in paths if p.startswith("-") or (ROOT / p.split("::")[0]).exists()]


def work_dir(name: str) -> Path:
    """The set's working directory under build/mutmut/, its links to the tree made where missing."""
    directory = WORK_ROOT / name
    directory.mkdir(parents=True, exist_ok=True)
    for entry in _LINKED:
        link = directory / entry
        if not link.is_symlink() and (ROOT / entry).exists():
            link.symlink_to(ROOT / entry)
    return directory


def _one_torch_thread() -> None:
    """torch's CPU work on one thread, set before the tests run: mutmut forks each mutant's process from the one
    that ran them, and a fork taken while torch's thread pool is up hangs at the child's first tensor operation."""
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)


def _configure(modules: Sequence[str], tests: Sequence[str]) -> None:
    """Point mutmut's configuration (pyproject's [tool.mutmut]) at this module set and test command."""
    from mutmut import configuration

    # The tests must import the package and tests/support from mutants/, not the tree this driver came from.
    for name in [n for n in sys.modules if n.split(".")[0] in ("sglang_dsv4_ext", "tests")]:
        del sys.modules[name]

    base = configuration._load_config()
    configuration._config = dataclasses.replace(
        base, only_mutate=list(modules), pytest_add_cli_args_test_selection=list(tests)
    )


def survivors_by_module(name: str) -> dict[str, Counter[str]]:
    """Status counts per mutated module of one set's run, read from mutmut's ``mutants/<module>.meta`` files."""
    mutants = WORK_ROOT / name / "mutants"
    counts: dict[str, Counter[str]] = {}
    for meta in sorted(mutants.rglob("*.py.meta")):
        data = json.loads(meta.read_text())
        module = str(meta.relative_to(mutants))[: -len(".meta")]
        counts[module] = Counter(
            _STATUS_BY_EXIT_CODE.get(code, "suspicious") for code in data["exit_code_by_key"].values()
        )
    return counts


# What --survivors runs again once tests were added: a survivor, and a mutant whose function no test reached
# (mutmut records either as done and does not run it again on its own).
_RUN_AGAIN = ("survived", "no tests")


def mutants_to_run_again(name: str) -> list[str]:
    """The names of the mutants of one set's last run that survived or that no test reached."""
    names = []
    for meta in sorted((WORK_ROOT / name / "mutants").rglob("*.py.meta")):
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        names += [key for key, code in codes.items() if _STATUS_BY_EXIT_CODE.get(code) in _RUN_AGAIN]
    return names


def _print_summary(name: str, modules: Sequence[str]) -> None:
    import fnmatch

    for module, counts in survivors_by_module(name).items():
        if not any(fnmatch.fnmatch(module, pattern) for pattern in modules):
            continue
        total = sum(counts.values())
        detail = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        print(f"  {module}: {total} mutants: {detail}")
    print(
        f"list the survivors: cd {WORK_ROOT / name} && python -m mutmut results; show one: python -m mutmut show NAME"
    )


def _at_least_one(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not valid; allowed values: a whole number >= 1")
    return int(text)


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.support.mutmut_run", description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=sorted(MODULE_SETS), help="a named module set with its tests")
    parser.add_argument("--modules", nargs="+", help="files (or globs) to mutate, relative to the repository root")
    parser.add_argument("--tests", nargs="+", help="pytest paths that exercise them (the test command)")
    parser.add_argument("--workers", type=_at_least_one, default=1, help="mutants run at once (default 1)")
    parser.add_argument("--list", action="store_true", help="print the module sets and exit")
    parser.add_argument("--summary", action="store_true", help="print the counts of the last run and exit")
    parser.add_argument(
        "--survivors",
        action="store_true",
        help="run again only the mutants of the set's last run that survived or that no test reached",
    )
    return parser.parse_args(argv)


def _chosen(args: argparse.Namespace) -> tuple[list[str], list[str]] | str:
    """The modules and tests to run, or the reason the arguments name none."""
    chosen = MODULE_SETS[args.set] if args.set else ModuleSet((), ())
    modules = list(args.modules or chosen.modules)
    tests = _existing(args.tests or chosen.tests)
    if not modules:
        return f"name a module set (--set, one of: {', '.join(sorted(MODULE_SETS))}) or --modules"
    if not tests:
        return "no test path exists: name the unit tests that exercise the modules with --tests"
    # A glob that matches nothing would mutate nothing and report no survivor: refused like a missing file.
    missing = [m for m in modules if not any(p.is_file() for p in ROOT.glob(m))]
    if missing:
        return f"--modules names no file: {', '.join(missing)}"
    return modules, tests


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    if args.list:
        for name, module_set in MODULE_SETS.items():
            print(f"{name}: {' '.join(module_set.modules)}\n    tests: {' '.join(module_set.tests)}")
        return OK
    name = args.set or "custom"
    if args.summary:
        _print_summary(name, args.modules or (MODULE_SETS[args.set].modules if args.set else ["*"]))
        return OK
    chosen = _chosen(args)
    if isinstance(chosen, str):
        print(f"mutmut_run: {chosen}", file=sys.stderr)
        return USAGE
    modules, tests = chosen
    if importlib.util.find_spec("mutmut") is None:
        print(
            "mutmut_run: mutmut is not installed: pip install -e '.[test,mutation]' (the mutation extra pins mutmut)",
            file=sys.stderr,
        )
        return USAGE
    os.chdir(work_dir(name))
    _one_torch_thread()
    _configure(modules, tests)
    from mutmut.__main__ import _run

    survivors = mutants_to_run_again(name) if args.survivors else []
    if args.survivors and not survivors:
        print(
            f"mutmut_run: no survivor or untested mutant recorded under {WORK_ROOT / name}: run the set first",
            file=sys.stderr,
        )
        return USAGE
    start = time.monotonic()
    _run(survivors, max_children=args.workers)
    print(f"\nmutmut ran {len(modules)} module pattern(s) in {time.monotonic() - start:.0f} s")
    return OK


if __name__ == "__main__":
    sys.exit(main())
