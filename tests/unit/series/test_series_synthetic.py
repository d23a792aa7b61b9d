"""The patch tool on small synthetic repositories (see tests/support/series_synthetic.py).

Each scenario is built so that exactly one classification holds per patch; the tests drive
the real CLI entry point (``sglang_dsv4_ext.tools.cli.main``) wherever a user would.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from sglang_dsv4_ext.tools.cli import main as cli_main
from sglang_dsv4_ext.tools.series import checkrepo, rebase
from sglang_dsv4_ext.tools.series.classify import Kind
from sglang_dsv4_ext.tools.series.gitrepo import GitRepo
from sglang_dsv4_ext.tools.series.package_dir import classify_against_package
from sglang_dsv4_ext.tools.series.series import load_series, read_pin, read_tombstones
from tests.support import series_synthetic as S
from tests.support.cli_calls import run_patches as run_cli

ALL = list(S.PATCHES)


def name_of(series_dir: Path, key: str) -> str:
    """The series file name of the synthetic patch ``key`` (e.g. 'conflict')."""
    stem = Path(S.PATCHES[key][0]).stem
    return next(n for n in load_series(series_dir).names if f"-{stem}-" in n)


def test_check_classifies_every_kind_without_touching_the_checkout(tmp_path, capsys):
    repo, series_dir = S.build_scenario(tmp_path, ALL)
    before = S.snapshot(repo, series_dir)
    results = checkrepo.classify_in_scratch_worktree(repo.path, load_series(series_dir), "v2", lambda m: None)
    got = {r.name: r.kind for r in results}
    assert got == {name_of(series_dir, key): Kind(key) for key in ALL}
    by_kind = {r.kind: r for r in results}
    assert "python/sglang/srt/conflict.py hunk #1 @@ -7,7 +7,7 @@" in by_kind[Kind.CONFLICT].failing_hunks
    assert by_kind[Kind.CONFLICT].conflicted_files == ["python/sglang/srt/conflict.py"]
    assert by_kind[Kind.TARGET_GONE].missing_files == ["python/sglang/srt/gone.py"]
    assert by_kind[Kind.APPLIES_3WAY].failing_hunks  # it did need the merge
    upstream_fix = repo.out("log", "--format=%H", "--grep=upstream takes the patch-id fix", "main")
    assert upstream_fix[:12] in by_kind[Kind.UPSTREAM_PATCH_ID].detail
    assert S.snapshot(repo, series_dir) == before
    assert repo.out("worktree", "list").count("\n") == 0  # the scratch worktree is gone
    # the CLI: exit 1 because not everything applies, and a readable table
    assert run_cli("check", "--repo", str(repo.path), "--onto", "v2", "--series-dir", str(series_dir)) == 1
    out = capsys.readouterr().out
    for key in ALL:
        assert key in out


def test_rebase_stops_at_conflict_and_resumes(tmp_path, capsys):
    repo, series_dir = S.build_scenario(tmp_path, ["applies", "conflict", "applies-3way"])
    conflict = name_of(series_dir, "conflict")
    old_series = tmp_path / "old-series"
    shutil.copytree(series_dir, old_series)
    args = ["--repo", str(repo.path), "--series-dir", str(series_dir)]
    assert run_cli("rebase", *args, "--onto", "v2") == 1
    out = capsys.readouterr().out
    assert f"stopped at {conflict}: conflict" in out
    assert "hunk that does not apply: python/sglang/srt/conflict.py hunk #1" in out
    assert "conflict region: python/sglang/srt/conflict.py:" in out
    assert repo.am_in_progress() and rebase.in_progress(repo)
    # the series directory is not written while the rebase is open
    assert read_pin(series_dir)["tag"] == "v1"

    # --continue before resolving is refused and changes nothing
    assert run_cli("rebase", *args, "--continue") == 2
    assert "still unresolved in python/sglang/srt/conflict.py" in capsys.readouterr().err
    assert repo.am_in_progress()

    # resolve: keep upstream's line 10 and add ours below it
    resolved = S.lines("conflict", changes={10: "conflict line 10 UPSTREAM\nconflict line 10 FIXED"})
    (repo.work_tree / "python/sglang/srt/conflict.py").write_text(resolved)
    repo.run("add", "python/sglang/srt/conflict.py")
    assert run_cli("rebase", *args, "--continue") == 0
    out = capsys.readouterr().out
    assert "rebase done: 3 patches on v2" in out and "## range-diff" in out
    assert "UPSTREAM_PIN: tag: v1 -> v2" in out  # the pin's changes are said, field by field
    assert f"back to where you were: `git -C {repo.path} switch main`" in out  # HEAD is left detached
    assert not rebase.in_progress(repo) and not repo.am_in_progress()

    series = load_series(series_dir)
    assert series.names == [name_of(series_dir, k) for k in ("applies", "conflict", "applies-3way")]
    assert read_pin(series_dir)["tag"] == "v2"
    # the new series applies cleanly to v2 and carries the resolution
    results = checkrepo.classify_in_scratch_worktree(repo.path, series, "v2", lambda m: None)
    assert [r.kind for r in results] == [Kind.APPLIES] * 3
    assert "+conflict line 10 FIXED" in series.get(conflict).text
    assert (repo.work_tree / "python/sglang/srt/conflict.py").read_text() == resolved
    # the standalone range-diff of the two series directories (each on its pinned base)
    capsys.readouterr()
    assert (
        run_cli(
            "range-diff", "--repo", str(repo.path), "--old-series", str(old_series), "--new-series", str(series_dir)
        )
        == 0
    )
    pairs = capsys.readouterr().out
    assert re.search(r"^1: +[0-9a-f]+ = 1: +[0-9a-f]+ applies: change line 10$", pairs, re.M)
    assert re.search(r"^3: +[0-9a-f]+ ! 3: +[0-9a-f]+ threeway: change line 10$", pairs, re.M)


def test_abort_restores_the_original_state_exactly(tmp_path, capsys):
    repo, series_dir = S.build_scenario(tmp_path, ["applies", "conflict", "upstream-reverse-applies"])
    args = ["--repo", str(repo.path), "--series-dir", str(series_dir)]
    before = S.snapshot(repo, series_dir)
    assert before["head"][0] == "refs/heads/main"

    # 1) abort while `git am` is stopped on a conflict, after the user started editing
    assert run_cli("rebase", *args, "--onto", "v2") == 1
    (repo.work_tree / "python/sglang/srt/conflict.py").write_text("half-way edit\n")
    assert run_cli("rebase", *args, "--abort") == 0
    assert S.snapshot(repo, series_dir) == before

    # 2) abort at a stop on an upstream patch (no git am in progress), from a detached HEAD
    repo.run("checkout", "-q", "--detach", "v1")
    before_detached = S.snapshot(repo, series_dir)
    repo_conflict = name_of(series_dir, "conflict")
    assert run_cli("rebase", *args, "--onto", "v2", "--drop", repo_conflict, "--reason", "test") == 1
    assert "upstream-reverse-applies" in capsys.readouterr().out
    assert run_cli("rebase", *args, "--abort") == 0
    assert S.snapshot(repo, series_dir) == before_detached
    assert run_cli("rebase", *args, "--abort") == 2  # nothing left to abort
    assert "no patch-series rebase is in progress" in capsys.readouterr().err


def test_upstream_and_gone_patches_leave_only_with_a_reason(tmp_path, capsys):
    keys = ["applies", "upstream-reverse-applies", "upstream-patch-id", "upstream-absorbed", "target-gone"]
    repo, series_dir = S.build_scenario(tmp_path, keys)
    names = {k: name_of(series_dir, k) for k in keys}
    args = ["--repo", str(repo.path), "--series-dir", str(series_dir)]
    original = {k: (series_dir / n).read_text() for k, n in names.items()}

    assert run_cli("rebase", *args, "--onto", "v2") == 1
    assert f"stopped at {names['upstream-reverse-applies']}: upstream-reverse-applies" in capsys.readouterr().out
    # no silent drop: --continue alone is refused
    assert run_cli("rebase", *args, "--continue") == 2
    assert "nothing to continue with" in capsys.readouterr().err
    # a drop needs a reason, and names must exist
    assert run_cli("rebase", *args, "--continue", "--drop", names["upstream-reverse-applies"]) == 2
    assert "needs its own --reason" in capsys.readouterr().err
    assert run_cli("rebase", *args, "--continue", "--drop", "nope.patch", "--reason", "x") == 2
    assert "'nope.patch': no such patch" in capsys.readouterr().err

    assert (
        run_cli(
            "rebase",
            *args,
            "--continue",
            "--drop",
            names["upstream-reverse-applies"],
            "--reason",
            "in upstream v2",
            "--drop",
            names["upstream-patch-id"],
            "--reason",
            "upstream took it verbatim",
            "--drop",
            names["upstream-absorbed"],
            "--reason",
            "upstream absorbed it",
        )
        == 1
    )
    assert f"stopped at {names['target-gone']}: target-gone" in capsys.readouterr().out
    continued = run_cli(
        "rebase", *args, "--continue", "--drop", names["target-gone"], "--reason", "gone.py was removed"
    )
    assert continued == 0

    assert load_series(series_dir).names == [names["applies"]]
    stones = {s["Tombstone"]: s for s in read_tombstones(series_dir)}
    assert set(stones) == {names[k] for k in keys[1:]}
    assert stones[names["upstream-patch-id"]]["Classification"] == "upstream-patch-id"
    assert stones[names["upstream-absorbed"]]["Classification"] == "upstream-absorbed"
    assert stones[names["target-gone"]]["Reason"] == "gone.py was removed"
    assert stones[names["target-gone"]]["Dropped-On"].startswith("v2 (")
    for key in keys[1:]:
        assert not (series_dir / names[key]).exists()
        stone_text = (series_dir / "dropped" / (names[key] + ".tombstone")).read_text()
        assert stone_text.endswith(original[key])  # the dropped patch is kept whole


def test_dirty_work_tree_is_refused_and_nothing_is_lost(tmp_path, capsys):
    repo, series_dir = S.build_scenario(tmp_path, ["applies", "conflict"])
    tracked = repo.work_tree / "python/sglang/srt/applies.py"
    staged = repo.work_tree / "python/sglang/srt/threeway.py"
    tracked.write_text("my uncommitted work\n")
    staged.write_text("my staged work\n")
    repo.run("add", str(staged))
    (repo.work_tree / "notes.txt").write_text("untracked notes\n")
    before = S.snapshot(repo, series_dir)
    args = ["--repo", str(repo.path), "--series-dir", str(series_dir)]
    for argv in (["rebase", *args, "--onto", "v2"], ["apply", *args]):
        assert run_cli(*argv) == 2
        err = capsys.readouterr().err
        assert "uncommitted changes in" in err and "python/sglang/srt/applies.py" in err
        assert "python/sglang/srt/threeway.py" in err and "nothing was changed" in err
        assert S.snapshot(repo, series_dir) == before
    assert not rebase.in_progress(repo)


def test_dirty_series_directory_is_refused(tmp_path, capsys):
    repo, series_dir = S.build_scenario(tmp_path, ["applies"])
    project = GitRepo.init(tmp_path / "project")
    moved = project.work_tree / "patches"
    series_dir.rename(moved)
    project.run("add", "-A")
    project.run("commit", "-q", "-m", "series", env=S.AUTHOR)
    (moved / "series").write_text((moved / "series").read_text() + "# my unsaved note\n")
    assert run_cli("rebase", "--repo", str(repo.path), "--series-dir", str(moved), "--onto", "v2") == 2
    assert "has uncommitted changes (patches/series)" in capsys.readouterr().err
    assert "# my unsaved note" in (moved / "series").read_text()
    assert repo.head_state()[0] == "refs/heads/main" and not rebase.in_progress(repo)


def test_corrupt_patch_file_is_reported_by_name(tmp_path, capsys):
    repo, series_dir = S.build_scenario(tmp_path, ["applies", "conflict"])
    victim = series_dir / name_of(series_dir, "conflict")
    text = victim.read_text()
    victim.write_text(text.replace("@@ -7,7 +7,7 @@", "@@ -7,7 +7,9 @@"))  # the hunk now lies about its length
    before = S.snapshot(repo, series_dir)
    for argv in (
        ["rebase", "--repo", str(repo.path), "--onto", "v2"],
        ["check", "--repo", str(repo.path)],
        ["apply", "--repo", str(repo.path)],
        ["status", "--repo", str(repo.path)],
    ):
        assert run_cli(*argv, "--series-dir", str(series_dir)) == 2
        err = capsys.readouterr().err
        assert f"{victim}: corrupt patch" in err and "line" in err
    assert S.snapshot(repo, series_dir) == before
    victim.write_text("this is not a patch\n")
    assert run_cli("check", "--repo", str(repo.path), "--series-dir", str(series_dir)) == 2
    assert f"{victim}: corrupt patch: no 'diff --git' section" in capsys.readouterr().err
    (series_dir / "series").write_text((series_dir / "series").read_text() + "missing.patch\n")
    victim.write_text(text)
    assert run_cli("check", "--repo", str(repo.path), "--series-dir", str(series_dir)) == 2
    assert "lists 'missing.patch'" in capsys.readouterr().err


def test_reexport_of_an_unchanged_series_is_a_zero_diff(tmp_path, capsys, monkeypatch):
    repo, series_dir = S.build_scenario(tmp_path, ["applies", "applies-3way", "conflict"])
    files_before = {p.name: p.read_bytes() for p in series_dir.iterdir() if p.is_file()}
    # apply the series to v1 as a user would, then export it back, under a hostile git config
    repo.run("checkout", "-q", "-b", "work", "v1")
    assert run_cli("apply", "--repo", str(repo.path), "--series-dir", str(series_dir)) == 0
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(
        "[diff]\n\tnoprefix = true\n\tmnemonicPrefix = true\n\talgorithm = patience\n\trenames = copies\n"
        "\tcontext = 5\n[core]\n\tabbrev = 7\n[format]\n\tsignature = hostile\n\tnumbered = true\n"
        "\theaders = X-Hostile: 1\n\tcoverLetter = true\n\tuseAutoBase = true\n"
    )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    assert run_cli("export", "--repo", str(repo.path), "--series-dir", str(series_dir), "--check") == 0
    assert "zero diff" in capsys.readouterr().out
    assert run_cli("export", "--repo", str(repo.path), "--series-dir", str(series_dir)) == 0
    assert {p.name: p.read_bytes() for p in series_dir.iterdir() if p.is_file()} == files_before
    # a rebase onto the same base is a zero diff too (pin included)
    repo.run("checkout", "-q", "main")
    assert run_cli("rebase", "--repo", str(repo.path), "--series-dir", str(series_dir), "--onto", "v1") == 0
    assert "0 files changed" in capsys.readouterr().out
    assert {p.name: p.read_bytes() for p in series_dir.iterdir() if p.is_file()} == files_before


def test_apply_onto_a_checkout_is_idempotent_and_stops_on_conflict(tmp_path, capsys):
    repo, series_dir = S.build_scenario(tmp_path, ["applies", "applies-3way", "conflict"])
    args = ["--repo", str(repo.path), "--series-dir", str(series_dir)]
    repo.run("checkout", "-q", "-b", "on-v1", "v1")
    assert run_cli("apply", *args) == 0
    assert len(repo.commits_between("v1", "HEAD")) == 3
    assert run_cli("apply", *args) == 0  # again: every patch is already present, nothing new
    assert len(repo.commits_between("v1", "HEAD")) == 3
    assert "totals: already-applied 3\n" in capsys.readouterr().out  # our own commits, not upstream's
    repo.run("checkout", "-q", "-b", "on-v2", "v2")
    assert run_cli("apply", *args) == 1
    out = capsys.readouterr().out
    assert "conflict region: python/sglang/srt/conflict.py" in out and "git am --continue" in out
    assert repo.am_in_progress()
    assert len(repo.commits_between("v2", "HEAD")) == 2  # applies + applies-3way went in
    repo.run("am", "--abort")


def test_export_never_drops_a_patch_silently(tmp_path, capsys):
    repo, series_dir = S.build_scenario(tmp_path, ["applies", "conflict"])
    applies, conflict = name_of(series_dir, "applies"), name_of(series_dir, "conflict")
    repo.run("checkout", "-q", "-b", "only-one", "v1")
    repo.run("am", str(series_dir / applies))
    args = ["--repo", str(repo.path), "--series-dir", str(series_dir)]
    assert run_cli("export", *args) == 2
    assert f"{conflict} would leave the series" in capsys.readouterr().err
    assert (series_dir / conflict).exists()
    assert run_cli("export", *args, "--drop", conflict, "--reason", "superseded") == 0
    assert load_series(series_dir).names == [applies]
    assert [s["Reason"] for s in read_tombstones(series_dir)] == ["superseded"]


def test_status_against_a_package_directory(tmp_path, capsys):
    """Without git history (an installed package): upstream, applies, conflict and gone."""
    repo, series_dir = S.build_scenario(tmp_path, ["applies", "conflict", "upstream-reverse-applies", "target-gone"])
    repo.run("checkout", "-q", "v2")
    pkg = repo.work_tree / "python/sglang"
    (pkg / "srt").mkdir(exist_ok=True)
    results = classify_against_package(load_series(series_dir), pkg)
    assert [r.kind for r in results] == [Kind.APPLIES, Kind.CONFLICT, Kind.UPSTREAM_REVERSE, Kind.TARGET_GONE]
    assert run_cli("status", "--sglang-dir", str(pkg), "--series-dir", str(series_dir), "--json") == 0
    import json

    rows = json.loads(capsys.readouterr().out)["patches"]
    assert [r["upstream"] for r in rows] == [False, False, True, False]
    assert repo.dirty_paths() == []  # status only read the package


def test_cli_help_and_bad_arguments(capsys):
    with pytest.raises(SystemExit) as exc:
        cli_main(["patches", "rebase", "--help"])
    assert exc.value.code == 0
    assert "--drop NAME" in capsys.readouterr().out
    assert run_cli("rebase", "--repo", os.devnull) == 2
    assert "needs --onto REF" in capsys.readouterr().err
    assert run_cli("check", "--repo", "/nonexistent/repo", "--series-dir", "/nonexistent/series") == 2
    assert "/nonexistent/series: not a directory" in capsys.readouterr().err
