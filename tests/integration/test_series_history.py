"""The patch tool across real SGLang releases (0.5.21 -> 0.5.22 -> 0.5.23, from PyPI wheels).

Needs the three wheels: cached under $SGLANG_DSV4_WHEEL_CACHE, downloaded once from PyPI
otherwise (CI has PyPI access).

The series for the rebase test is written against v0.5.21 from real upstream changes, each
chosen so that one classification holds against v0.5.23 (the preconditions are asserted
first, so a different wheel would fail loudly rather than test nothing):

- applies:      mem_cache/evict_policy.py, identical in 0.5.21 and 0.5.23
- applies-3way: utils/profile_utils.py line 357; upstream 0.5.22 changed line 360
- conflict:     models/deepseek.py line 40, which upstream 0.5.23 rewrote
- reverse:      upstream's own 0.5.21->0.5.22 change of mem_cache/hicache_auto_size.py
                (not touched again in 0.5.23)
- patch-id:     upstream's own 0.5.21->0.5.22 change of disaggregation/common/utils.py,
                edited again next to it in 0.5.23 (so it neither applies nor reverse-applies)
- target-gone:  kernels/jit/csrc/deepseek_v4/c4.cuh, deleted by 0.5.23
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglang_dsv4_ext.runtime import compat
from sglang_dsv4_ext.tools.cli import main as cli_main
from sglang_dsv4_ext.tools.series import checkrepo, rebase
from sglang_dsv4_ext.tools.series.classify import Kind
from sglang_dsv4_ext.tools.series.package_dir import installed_sglang_dir
from sglang_dsv4_ext.tools.series.releases import release_series_dirs
from sglang_dsv4_ext.tools.series.series import load_series, read_pin, read_tombstones
from sglang_dsv4_ext.tools.series.upstream_history import HistoryError, build_history, tag_wheel_info
from tests.support import series_synthetic as S
from tests.support.cli_calls import run_patches as run_cli
from tests.support.series_history import clone_history, shared_history

PROJECT_PATCHES = Path(__file__).resolve().parents[2] / "patches"
SRT = "python/sglang/srt/"

EDITS = {
    "applies": SRT + "mem_cache/evict_policy.py",
    "applies-3way": SRT + "utils/profile_utils.py",
    "conflict": SRT + "models/deepseek.py",
    "upstream-reverse-applies": SRT + "mem_cache/hicache_auto_size.py",
    "upstream-patch-id": SRT + "disaggregation/common/utils.py",
    "target-gone": "python/sglang/kernels/jit/csrc/deepseek_v4/c4.cuh",
}


def show(repo, rev: str, path: str) -> str:
    return repo.run("show", f"{rev}:{path}")[1]


def edited_line(text: str, lineno: int, suffix: str) -> str:
    lines = text.splitlines(keepends=True)
    lines[lineno - 1] = lines[lineno - 1].rstrip("\n") + suffix + "\n"
    return "".join(lines)


def write_real_series(repo, series_dir: Path) -> dict:
    """Commit one patch per classification on v0.5.21 and export them as a series."""
    old, mid, new = "v0.5.21", "v0.5.22", "v0.5.23"
    # preconditions on the real releases (see the module docstring)
    assert repo.path_exists(old, EDITS["applies"])
    assert show(repo, old, EDITS["applies"]) == show(repo, new, EDITS["applies"])
    assert "if get_parallel().dp_size > 1:" in show(repo, old, EDITS["applies-3way"]).splitlines()[359]
    assert "if get_parallel().num_dp_ranks > 1:" in show(repo, mid, EDITS["applies-3way"]).splitlines()[359]
    assert show(repo, old, EDITS["conflict"]).splitlines()[39] != show(repo, new, EDITS["conflict"]).splitlines()[39]
    reverse, patch_id = EDITS["upstream-reverse-applies"], EDITS["upstream-patch-id"]
    assert show(repo, old, reverse) != show(repo, mid, reverse) == show(repo, new, reverse)
    assert show(repo, old, patch_id) != show(repo, mid, patch_id) != show(repo, new, patch_id)
    assert not repo.path_exists(new, EDITS["target-gone"])

    contents = {
        "applies": "# sglang-dsv4-ext test: applies\n" + show(repo, old, EDITS["applies"]),
        "applies-3way": edited_line(show(repo, old, EDITS["applies-3way"]), 357, "  # sglang-dsv4-ext test"),
        "conflict": edited_line(show(repo, old, EDITS["conflict"]), 40, "  # sglang-dsv4-ext test"),
        "upstream-reverse-applies": show(repo, mid, EDITS["upstream-reverse-applies"]),
        "upstream-patch-id": show(repo, mid, EDITS["upstream-patch-id"]),
        "target-gone": "// sglang-dsv4-ext test\n" + show(repo, old, EDITS["target-gone"]),
    }
    series_dir.mkdir()
    (series_dir / "series").write_text("# real-history test series\n")
    (series_dir / "UPSTREAM_PIN").write_text(f'tag = "{old}"\n')
    repo.run("checkout", "-q", "-b", "ours", old)
    for i, (key, text) in enumerate(contents.items()):
        S.commit(repo, {EDITS[key]: text}, f"test: {key}\n\nDescription: real-history test patch\n", 1_750_000_000 + i)
    checkrepo.export_range(repo.path, series_dir, old, "HEAD", {}, progress=lambda m: None)
    repo.run("checkout", "-q", "main")
    series = load_series(series_dir)
    return {key: series.names[i] for i, key in enumerate(contents)}


def test_history_matches_the_pin_and_the_installed_release():
    repo = shared_history()
    subjects = repo.out("log", "--first-parent", "--reverse", "--format=%s", "v0.5.23").splitlines()
    assert subjects == [f"sglang {v}: python/sglang from the PyPI wheel" for v in ("0.5.21", "0.5.22", "0.5.23")]
    # every release's series is pinned to a tag of this history, by its wheel and tree
    pins = [read_pin(d) for d in release_series_dirs(PROJECT_PATCHES)]
    assert [p["version"] for p in pins] == ["0.5.23", "0.5.22"]  # patches/ is the installed release's
    for pin in pins:
        assert pin["tag"] == f"v{pin['version']}"
        assert tag_wheel_info(repo, pin["tag"]) == {"wheel": pin["wheel"], "wheel_sha256": pin["wheel_sha256"]}
        # same wheel -> same tree on every machine (compiled extensions are left out)
        assert repo.tree_of(pin["tag"], "python/sglang") == pin["source_tree"]
    names = repo.out("ls-tree", "-r", "--name-only", "v0.5.23").splitlines()
    assert all(n.startswith("python/sglang/") for n in names)
    assert not [n for n in names if n.endswith(".so") or "__pycache__" in n]
    # the installed release's tag holds exactly what is installed here (.ci/run runs this under 0.5.22 too)
    installed = installed_sglang_dir()
    tag = f"v{compat.installed_sglang_version()}"
    for rel in ("srt/mem_cache/deepseek_v4_memory_pool.py", "srt/model_executor/pool_configurator.py"):
        assert show(repo, tag, "python/sglang/" + rel).encode() == (installed / rel).read_bytes()


def test_history_extends_deterministically_and_refuses_foreign_repos(tmp_path, capsys):
    target = tmp_path / "partial"
    build_history(target, ["0.5.21"], checkout=False)
    assert cli_main(["patches", "upstream-history", "--repo", str(target), "--versions", "0.5.21", "0.5.22"]) == 0
    out = capsys.readouterr().out
    shared = shared_history()
    # commit ids depend only on the wheels: an extended build equals the one-shot build
    assert f"v0.5.22 {shared.must_rev_parse('v0.5.22')[:12]}" in out
    with pytest.raises(HistoryError, match="already holds releases"):
        build_history(target, ["0.5.22", "0.5.23"])
    assert cli_main(["patches", "upstream-history", "--repo", str(target), "--versions", "0.5.x"]) == 2
    assert "'0.5.x' is not a release version" in capsys.readouterr().err


def test_rebase_across_real_releases(tmp_path, capsys):
    repo = clone_history(tmp_path / "sglang", "v0.5.21", sparse=list(EDITS.values()))
    series_dir = tmp_path / "patches"
    names = write_real_series(repo, series_dir)
    args = ["--repo", str(repo.path), "--series-dir", str(series_dir)]

    # check: every classification, against the real 0.5.23 tree
    results = checkrepo.classify_in_scratch_worktree(repo.path, load_series(series_dir), "v0.5.23", lambda m: None)
    assert {r.name: r.kind for r in results} == {names[k]: Kind(k) for k in names}
    conflict = next(r for r in results if r.kind is Kind.CONFLICT)
    assert conflict.conflicted_files == [EDITS["conflict"]]
    assert conflict.failing_hunks == [f"{EDITS['conflict']} hunk #1 @@ -37,7 +37,7 @@"]
    assert (
        "same change as upstream commit " + repo.must_rev_parse("v0.5.22")[:12]
        in next(r for r in results if r.kind is Kind.UPSTREAM_PATCH_ID).detail
    )

    # status against the 0.5.22 release in package form (no git): exactly the two patches
    # that are upstream's own 0.5.22 changes are reported as already upstream
    assert run_cli("status", "--sglang-version", "0.5.22", "--series-dir", str(series_dir), "--json") == 0
    rows = {r["name"]: r["upstream"] for r in json.loads(capsys.readouterr().out)["patches"]}
    assert rows == {n: k in ("upstream-reverse-applies", "upstream-patch-id") for k, n in names.items()}

    # rebase with the upstream / gone patches dropped; it stops at the real conflict
    drops = []
    for key, reason in (
        ("upstream-reverse-applies", "in 0.5.22"),
        ("upstream-patch-id", "in 0.5.22"),
        ("target-gone", "c4.cuh removed in 0.5.23"),
    ):
        drops += ["--drop", names[key], "--reason", reason]
    before = S.snapshot(repo, series_dir)
    assert run_cli("rebase", *args, "--onto", "v0.5.23", *drops) == 1
    assert f"stopped at {names['conflict']}: conflict" in capsys.readouterr().out
    assert repo.unmerged_paths() == [EDITS["conflict"]]
    # abort on the real tree: everything back, byte for byte
    assert run_cli("rebase", *args, "--abort") == 0
    assert S.snapshot(repo, series_dir) == before

    # again, and this time resolve: upstream's line 40 plus our marker
    assert run_cli("rebase", *args, "--onto", "v0.5.23", *drops) == 1
    capsys.readouterr()
    resolved = edited_line(show(repo, "v0.5.23", EDITS["conflict"]), 40, "  # sglang-dsv4-ext test")
    (repo.work_tree / EDITS["conflict"]).write_text(resolved)
    repo.run("add", EDITS["conflict"])
    report_file = tmp_path / "report.md"
    assert run_cli("rebase", *args, "--continue", "--report", str(report_file)) == 0
    report = report_file.read_text()
    assert "# Patch series: v0.5.21 -> v0.5.23" in report and "## range-diff" in report
    assert "totals: applies 1, applies-3way 1, dropped 3, resolved 1" in report
    assert "= " in report and "! " in report  # range-diff pairs: unchanged and changed patches

    series = load_series(series_dir)
    assert series.names == [names[k] for k in ("applies", "applies-3way", "conflict")]
    assert read_pin(series_dir) == read_pin(PROJECT_PATCHES)  # same tag, wheel, sha256, tree
    assert sorted(s["Tombstone"] for s in read_tombstones(series_dir)) == sorted(
        names[k] for k in ("upstream-reverse-applies", "upstream-patch-id", "target-gone")
    )
    # the rebased series applies cleanly to 0.5.23 and re-exports to the same bytes
    results = checkrepo.classify_in_scratch_worktree(repo.path, series, "v0.5.23", lambda m: None)
    assert [r.kind for r in results] == [Kind.APPLIES] * 3
    assert run_cli("export", *args, "--check") == 0
    assert not rebase.in_progress(repo)
