"""The project's own patch series (patches/): headers, applying to SGLang, behaviour, status.

- Every patch of every release's series (patches/ for 0.5.23, patches/sglang-0.5.22/) carries a
  complete DEP-3 header whose Covered-By ids exist and whose Mirrors / Mirrors-Targets name real
  runtime modules and rows of the hook table (compat.TARGETS).
- Each series applies to the tree of its pinned release built from the PyPI wheel by
  upstream-history, and re-exports from it byte for byte.
- The patched sources (a copy of the installed sglang package with the series applied, first on
  sys.path in a pytest subprocess, the extension's kill switch on) pass the extension's own
  sizing / storage / PD / HiCache / gate tests that do not reach into plugin objects, and the
  source-level checks of tests/support/patched_source_checks.py.
- ``status`` and ``doctor`` agree on which fixes the installed SGLang needs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_dsv4_ext.runtime import compat
from sglang_dsv4_ext.runtime.hooks import HOOK_MODULES
from sglang_dsv4_ext.tools.series.package_dir import installed_sglang_dir, overlay_copy
from sglang_dsv4_ext.tools.series.releases import release_series_dirs
from sglang_dsv4_ext.tools.series.series import REQUIRED_DEP3_FIELDS, load_series, read_pin, unlisted_patch_files
from sglang_dsv4_ext.tools.series.upstream import fix_verdicts, mirrors_targets, needed_targets, upstream_targets
from tests.support.cli_calls import run_patches as run_cli
from tests.support.releases import only_on
from tests.support.series_history import clone_history

ONLY_0_5_23_SERIES = only_on(
    "0.5.23",
    "patches/ is the 0.5.23 series, for the 0.5.23 tree; the 0.5.22 series on the "
    "0.5.22 tree: tests/integration/test_series_releases.py",
)

ROOT = Path(__file__).resolve().parents[2]
PROJECT_PATCHES = ROOT / "patches"
RELEASE_SERIES = release_series_dirs(PROJECT_PATCHES)  # patches/ and patches/sglang-X.Y.Z/
RUNTIME_PREFIX = "sglang_dsv4_ext.runtime.hooks."

# The extension's tests that check behaviour only (no plugin objects): they must pass on the
# patched sources with the extension off. The rest of those files test the plugin machinery
# itself (hook wrappers, its exception classes, its probe) and are not about the sources.
PLUGIN_TESTS_ON_PATCHED_SOURCES = [
    "tests/unit/hooks/test_sizing.py::test_flash_numbers_from_the_formula",
    "tests/unit/hooks/test_sizing.py::test_configurator_budget_and_pool_allocation_agree",
    "tests/unit/hooks/test_sizing.py::test_one_source_of_truth_for_bytes_per_token",
    "tests/unit/hooks/test_sizing.py::test_bf16_with_sglang_fp4_flag_is_a_clear_error",
    "tests/unit/hooks/test_sizing.py::test_fp4_without_sglang_flag_is_a_clear_error",
    "tests/unit/hooks/test_bf16_storage.py::test_hicache_host_pool_geometry_follows_bf16_rows",
    "tests/unit/hooks/test_bf16_storage.py::test_fp8_region_keeps_stock_geometry",
    "tests/unit/hooks/test_bf16_storage.py::test_token_granular_index_k_transfers_refused_for_bf16",
    "tests/unit/hooks/test_bf16_storage.py::test_pd_layout_carries_index_k_dtype_and_sglang_refuses_the_pair",
    "tests/unit/hooks/test_bf16_storage.py::test_pd_buffer_infos_use_bf16_item_length",
    "tests/unit/hooks/test_bf16_storage.py::test_bf16_writer_stores_rows_at_their_slots",
    "tests/unit/hooks/test_gate.py::test_strict_is_quiet_with_hicache_off_or_no_load_pending",
    "tests/unit/hooks/test_gate.py::test_auto_read_after_the_stock_getter_adds_no_wait",
    "tests/unit/hooks/test_gate.py::test_off_mode_leaves_subpool_reads_alone",
    "tests/unit/hooks/test_gate.py::test_stock_writers_through_the_raw_list_are_not_reads",
    "tests/unit/hooks/test_indexer.py::test_compute_q_bf16_uses_our_index_q_kernel",
    "tests/unit/hooks/test_indexer.py::test_compute_q_fp8_fp4_stay_on_sglang_kernels",
    "tests/unit/hooks/test_indexer.py::test_compute_q_bf16_env_with_sglang_fp4_indexer_stays_fp4",
    "tests/unit/hooks/test_indexer.py::test_nonpaged_indexer_is_never_chosen_for_bf16",
    "tests/unit/hooks/test_indexer.py::test_forward_c4_indexer_dispatch",
    "tests/unit/hooks/test_indexer.py::test_forward_indexer_compressor_dispatch",
    "tests/unit/hooks/test_indexer.py::test_attention_compressor_passes_through_on_a_bf16_pool",
    "tests/unit/hooks/test_indexer.py::test_idle_batches_do_nothing",
    "tests/unit/hooks/test_indexer.py::test_paged_bf16_branch_selects_reference_topk",
    "tests/unit/hooks/test_indexer.py::test_store_prefill_plan_writes_each_compressed_row_at_its_ragged_slot",
    "tests/unit/hooks/test_indexer.py::test_store_decode_plan_writes_only_rows_that_close_a_group",
    "tests/unit/hooks/test_indexer.py::test_store_writes_through_the_gated_getter_after_the_layer_load",
    "tests/unit/hooks/test_indexer.py::test_logits_read_through_the_gated_getter_after_the_layer_load",
    "tests/support/patched_source_checks.py",
]


def patched_package(tmp_path: Path, series_dir: Path = PROJECT_PATCHES, names=None) -> Path:
    """A copy of the installed sglang package with (some of) the series applied to it."""
    series = load_series(series_dir)
    if names is not None:
        sub = tmp_path / "subseries"
        sub.mkdir()
        for patch in series.patches:
            if patch.name in names:
                (sub / patch.name).write_bytes(patch.path.read_bytes())
        (sub / "series").write_text("".join(n + "\n" for n in series.names if n in names))
        series_dir = sub
    package = overlay_copy(installed_sglang_dir(), tmp_path / "site", load_series(series_dir).patches)
    assert run_cli("apply", "--sglang-dir", str(package), "--series-dir", str(series_dir)) == 0
    return package


def _series_id(series_dir: Path) -> str:
    return read_pin(series_dir)["tag"]


@pytest.mark.parametrize("series_dir", RELEASE_SERIES, ids=_series_id)
def test_every_patch_has_a_complete_dep3_header_naming_real_tests_and_hooks(series_dir):
    series = load_series(series_dir)
    assert series.names and unlisted_patch_files(series) == []
    targets = {t.path: t for t in compat.TARGETS}
    mirrored = []
    for patch in series.patches:
        assert patch.missing_fields() == [], f"{patch.name} lacks {patch.missing_fields()} of {REQUIRED_DEP3_FIELDS}"
        (module,) = patch.mirrors
        assert module.startswith(RUNTIME_PREFIX) and module[len(RUNTIME_PREFIX) :] in HOOK_MODULES, patch.name
        mirrored.append(module[len(RUNTIME_PREFIX) :])
        hooked = mirrors_targets(patch)
        assert hooked, f"{patch.name}: no Mirrors-Targets"
        for target in hooked:
            assert targets[target].area == module[len(RUNTIME_PREFIX) :], (patch.name, target)
        for ref in patch.fields["Covered-By"].split():
            if not ref.startswith(("tests/", "kernels_sm120/")):
                continue  # prose around a path, e.g. "(GPU correctness of the kernels)"
            path, _, name = ref.partition("::")
            assert (ROOT / path).is_file(), f"{patch.name}: Covered-By {ref}: no such file"
            if name:
                assert re.search(rf"^def {re.escape(name)}\(", (ROOT / path).read_text(), re.M), (
                    f"{patch.name}: Covered-By {ref}: no such test"
                )
    # One patch per runtime module, and every module that hooks SGLang has its patch.
    # Hook modules whose every target is runtime-only (compat.WITHOUT_SOURCE_PATCH) have no patch yet.
    runtime_only = {t.area for t in compat.WITHOUT_SOURCE_PATCH} - {
        t.area for t in compat.TARGETS if t not in compat.WITHOUT_SOURCE_PATCH
    }
    assert sorted(mirrored) == sorted(set(HOOK_MODULES) - runtime_only)


@pytest.mark.parametrize("series_dir", RELEASE_SERIES, ids=_series_id)
def test_series_applies_to_its_wheel_built_tree_and_reexports_unchanged(series_dir, tmp_path, capsys):
    series = load_series(series_dir)
    tag = series.pin["tag"]
    touched = sorted({f for p in series.patches for f in p.files})
    repo = clone_history(tmp_path / "sglang", tag, sparse=touched)
    assert run_cli("apply", "--repo", str(repo.path), "--series-dir", str(series_dir)) == 0
    assert f"totals: applies {len(series.patches)}\n" in capsys.readouterr().out
    ours = repo.commits_between(tag, "HEAD")
    assert len(ours) == len(series.patches)
    # Again: every patch is one of our own commits (later patches change the files of earlier ones,
    # so most no longer reverse-apply), none is called upstream, nothing new is committed.
    assert run_cli("apply", "--repo", str(repo.path), "--series-dir", str(series_dir)) == 0
    again = capsys.readouterr()
    assert f"totals: already-applied {len(series.patches)}\n" in again.out
    assert "upstream" not in again.out + again.err
    for commit in ours:
        assert f"from this series: commit {commit[:12]}" in again.out
    assert repo.commits_between(tag, "HEAD") == ours
    # The committed files are exactly what the tool exports from those commits.
    assert run_cli("export", "--repo", str(repo.path), "--series-dir", str(series_dir), "--check") == 0
    assert "zero diff" in capsys.readouterr().out


@ONLY_0_5_23_SERIES
def test_patched_sources_pass_the_plugin_tests(tmp_path):
    package = patched_package(tmp_path)
    report = tmp_path / "killswitch.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(package.parent), str(ROOT)]),
        "PATCHTOOL_KILLSWITCH_REPORT": str(report),
        "SGLANG_DSV4_EXT": "0",
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "tests.support.series_killswitch",
            "-p",
            "no:cacheprovider",
            *PLUGIN_TESTS_ON_PATCHED_SOURCES,
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
    )
    tail = proc.stdout[-4000:]
    assert proc.returncode == 0, tail
    assert re.search(r"\b\d+ passed\b", tail) and "failed" not in tail and "error" not in tail.lower(), tail
    record = json.loads(report.read_text())
    # It was the patched copy that ran, with the extension off and nothing hooked.
    assert record["sglang_file"] == str(package / "__init__.py")
    assert record["kill_switch"] == "0" and record["activated"] is False and record["wrapped"] == []


@ONLY_0_5_23_SERIES
def test_status_reports_a_fix_that_upstream_absorbed(tmp_path, capsys):
    """A future SGLang that took the PD fix: the patch reads as upstream, the others as needed."""
    series = load_series(PROJECT_PATCHES)
    pd = next(p for p in series.patches if p.mirrors == [RUNTIME_PREFIX + "pd"])
    package = patched_package(tmp_path, names={pd.name})
    verdicts = fix_verdicts(package)
    assert {v.patch: v.upstream for v in verdicts} == {p.name: p.name == pd.name for p in series.patches}
    assert upstream_targets(verdicts) == {t: pd.name for t in mirrors_targets(pd)}
    capsys.readouterr()
    assert run_cli("status", "--sglang-dir", str(package), "--json") == 0
    rows = json.loads(capsys.readouterr().out)["patches"]
    assert [r["name"] for r in rows if r["upstream"]] == [pd.name]


def test_status_and_doctor_agree_on_the_installed_sglang(ext_active):
    """For the installed SGLang: a fix status calls needed is one doctor applies (or skips by
    configuration), never one it calls not needed; and every row doctor does apply is a fix the
    series carries, so the series is the complete source form of what the extension patches."""
    from sglang_dsv4_ext.runtime import activation
    from sglang_dsv4_ext.tools.doctor import cli as doctor

    verdicts = fix_verdicts()
    assert [v.upstream for v in verdicts] == [False] * len(verdicts)
    needed = needed_targets(verdicts)
    rows = {row["target"]: row for row in doctor.collect_report()["targets"]}
    rows_release = compat.rows_release(compat.installed_sglang_version())
    for target, patch in needed.items():
        if rows[target]["status"] == activation.NOT_IN_RELEASE:
            # a target this release lacks (0.5.22: pd_kv_layout, _wait_for_layer_loads): the row says what it
            # lacks and what the hooks do there instead
            assert rows[target]["detail"].startswith(f"SGLang {rows_release} has no such target: "), (target, patch)
            continue
        assert rows[target]["status"] in (activation.APPLIED, activation.SKIPPED_BY_CONFIG), (target, patch)
    runtime_only = {t.path for t in compat.WITHOUT_SOURCE_PATCH}
    for target, row in rows.items():
        if row["area"] == "activation" or target in runtime_only:
            continue
        if row["status"] == activation.NOT_NEEDED:
            assert target not in needed, target
        else:
            assert target in needed, f"doctor applies {target}, but no patch in the series carries that fix"
