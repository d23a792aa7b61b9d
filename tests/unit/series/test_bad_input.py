"""`sglang-dsv4 patches`: the bad-input rows of docs/bad-input.md, each walked through the real CLI on small
synthetic git repositories (tests/support/series_synthetic.py). Every refusal is one line on stderr,
exit 2, and the repository and the series directory are left as they were."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglang_dsv4_ext.errors import GitError
from sglang_dsv4_ext.tools.cli import main as cli_main
from sglang_dsv4_ext.tools.series import checkrepo
from sglang_dsv4_ext.tools.series.gitrepo import GitRepo
from sglang_dsv4_ext.tools.series.series import read_pin
from tests.support import series_synthetic as S


def patches(*argv: str) -> int:
    return cli_main(["patches", *argv])


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def scenario(tmp_path):
    repo, series_dir = S.build_scenario(tmp_path, ["applies", "applies-3way"])
    repo.run("checkout", "-q", "-B", "work", "v1")
    return repo, series_dir


def test_apply_with_a_stale_index_lock_is_refused_and_changes_nothing(scenario, capsys):
    repo, series_dir = scenario
    lock = repo.git_dir / "index.lock"
    lock.write_text("")
    before = S.snapshot(repo, series_dir)
    assert patches("apply", "--repo", str(repo.path), "--series-dir", str(series_dir)) == 2
    line = _one_error_line(capsys)
    assert str(lock) in line and "nothing was changed" in line
    assert S.snapshot(repo, series_dir) == before
    assert not (repo.git_dir / "rebase-apply").exists()  # no `git am` session left behind


def test_apply_that_fails_midway_leaves_the_repository_as_it_was(scenario, monkeypatch):
    # A git failure that is not a conflict (disk full, a lock taken by another process) on the
    # second patch: stand in for it by failing classify_and_apply after the first patch applied.
    repo, series_dir = scenario
    before = S.snapshot(repo, series_dir)
    real = checkrepo.classify_and_apply
    calls = []

    def fail_on_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise GitError("git am: fatal: Unable to create '.git/index.lock': File exists")
        return real(*args, **kwargs)

    monkeypatch.setattr(checkrepo, "classify_and_apply", fail_on_second)
    assert patches("apply", "--repo", str(repo.path), "--series-dir", str(series_dir)) == 2
    assert len(calls) == 2  # the first patch was applied before the failure ...
    assert S.snapshot(repo, series_dir) == before  # ... and undone
    assert not (repo.git_dir / "rebase-apply").exists()


def test_export_into_a_series_dir_git_does_not_track_keeps_a_backup(scenario, capsys):
    repo, series_dir = scenario
    assert patches("apply", "--repo", str(repo.path), "--series-dir", str(series_dir)) == 0
    first = sorted(p for p in series_dir.glob("*.patch"))[0]
    hand_edit = first.read_text().replace("Forwarded: no", "Forwarded: no (hand edit)")
    first.write_text(hand_edit)
    capsys.readouterr()
    earlier = set(series_dir.parent.glob(f"{series_dir.name}.backup-*"))
    assert patches("export", "--repo", str(repo.path), "--series-dir", str(series_dir), "--base", "v1") == 0
    out = capsys.readouterr()
    backups = sorted(set(series_dir.parent.glob(f"{series_dir.name}.backup-*")) - earlier)
    assert len(backups) == 1
    assert str(backups[0]) in out.out + out.err
    assert (backups[0] / first.name).read_text() == hand_edit  # the hand edit survives in the backup
    assert "(hand edit)" not in first.read_text()  # the export rewrote the series


def test_export_into_a_git_tracked_series_dir_with_edits_is_refused(tmp_path, capsys):
    repo, series_dir = S.build_scenario(tmp_path, ["applies"])
    # Put the series directory under git (its own repository) and leave an uncommitted edit.
    tracking = GitRepo.init(series_dir)
    tracking.run("add", "-A")
    tracking.run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "series")
    patch = next(series_dir.glob("*.patch"))
    patch.write_text(patch.read_text() + "\n")
    repo.run("checkout", "-q", "-B", "work", "v1")
    assert patches("apply", "--repo", str(repo.path), "--series-dir", str(series_dir)) == 0
    capsys.readouterr()
    assert patches("export", "--repo", str(repo.path), "--series-dir", str(series_dir), "--base", "v1") == 2
    line = _one_error_line(capsys)
    assert "uncommitted changes" in line and patch.name in line


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["apply", "--series-dir", "{tmp}"], "give exactly one of --repo"),
        (["status", "--series-dir", "{tmp}/nowhere"], "nowhere"),
        (["rebase", "--repo", "{tmp}", "--onto", "v2", "--drop", "x"], "every --drop NAME needs its own --reason"),
    ],
)
def test_usage_mistakes_are_one_line(tmp_path, capsys, argv, needle):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert patches(*argv) == 2
    assert needle in _one_error_line(capsys)


@pytest.mark.parametrize("argv", [["export", "--base", "nope"], ["rebase", "--onto", "nope"]], ids=["export", "rebase"])
def test_a_refused_export_or_rebase_does_not_leave_a_backup_behind(tmp_path, capsys, argv):
    repo, series_dir = S.build_scenario(tmp_path, ["applies"])
    earlier = set(Path(series_dir).parent.glob("*.backup-*"))
    assert patches(*argv, "--repo", str(repo.path), "--series-dir", str(series_dir)) == 2
    _one_error_line(capsys)
    assert set(Path(series_dir).parent.glob("*.backup-*")) == earlier


# ---- the series tooling says what it is doing ------------------------------------------------


def _another_project(tmp_path) -> GitRepo:
    other = GitRepo.init(tmp_path / "other")
    S.commit(other, {"README.md": "another project\n", "src/main.py": "print('hi')\n"}, "init", 1_700_000_000)
    return other


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "--repo", "{repo}"],
        ["check", "--repo", "{repo}"],
        ["apply", "--repo", "{repo}"],
        ["rebase", "--repo", "{repo}", "--onto", "HEAD"],
        ["export", "--repo", "{repo}", "--base", "HEAD"],
    ],
    ids=lambda argv: argv[0],
)
def test_a_repository_of_another_project_is_refused_naming_what_is_missing(tmp_path, capsys, argv):
    _, series_dir = S.build_scenario(tmp_path, ["applies"])
    other = _another_project(tmp_path)
    before, backups = S.snapshot(other, series_dir), set(tmp_path.glob("*.backup-*"))
    argv = [a.replace("{repo}", str(other.path)) for a in argv]
    assert patches(*argv, "--series-dir", str(series_dir)) == 2
    line = _one_error_line(capsys)
    assert "is not an SGLang source tree" in line
    assert "no python/sglang/__init__.py and no python/sglang/srt" in line
    assert S.snapshot(other, series_dir) == before
    assert set(tmp_path.glob("*.backup-*")) == backups


def test_sglang_of_another_version_is_classified_not_refused(tmp_path, capsys):
    # SGLang's package is there, the series' files are not: that is target-gone (a rebase's
    # question), not "another project".
    repo, series_dir = S.build_scenario(tmp_path, ["applies"])
    S.commit(repo, {S.file_of("applies"): None}, "upstream removes applies.py", 1_700_300_000)
    assert patches("status", "--repo", str(repo.path), "--series-dir", str(series_dir), "--json") == 0
    rows = json.loads(capsys.readouterr().out)["patches"]
    assert [r["result"] for r in rows] == ["target-gone"]


def test_apply_on_a_detached_head_is_refused_with_the_way_to_a_branch(scenario, capsys):
    repo, series_dir = scenario
    repo.run("checkout", "-q", "--detach", "v1")
    before = S.snapshot(repo, series_dir)
    assert patches("apply", "--repo", str(repo.path), "--series-dir", str(series_dir)) == 2
    line = _one_error_line(capsys)
    assert f"HEAD of {repo.path} is detached at v1" in line
    assert f"`git -C {repo.path} switch -c NAME`" in line and "nothing was changed" in line
    assert S.snapshot(repo, series_dir) == before  # no commit was made anywhere


def test_a_second_apply_names_our_own_commits_not_upstream(tmp_path, capsys):
    repo, series_dir = S.build_scenario(tmp_path, ["applies", "applies-3way"])
    repo.run("checkout", "-q", "-B", "work", "v2")  # on v2 the second patch needs the three-way merge
    args = ["--repo", str(repo.path), "--series-dir", str(series_dir)]
    assert patches("apply", *args) == 0
    first = capsys.readouterr().out
    assert "applies-3way" in first
    ours = repo.commits_between("v2", "HEAD")
    assert len(ours) == 2
    assert patches("apply", *args) == 0
    second = capsys.readouterr()
    assert repo.commits_between("v2", "HEAD") == ours  # nothing new
    for commit in ours:
        assert f"already-applied (from this series: commit {commit[:12]}" in second.out
    assert "totals: already-applied 2\n" in second.out
    assert "upstream" not in second.out + second.err
    # status on the patched checkout says the same, and calls none of them upstream
    assert patches("status", *args) == 0
    status = capsys.readouterr().out
    assert status.count("already applied") == 2 and "already upstream" not in status
    assert patches("status", *args, "--json") == 0
    rows = json.loads(capsys.readouterr().out)["patches"]
    assert [(r["result"], r["upstream"]) for r in rows] == [("already-applied", False)] * 2


PINNED_WHEEL = "sglang-1-cp311-cp311-manylinux_2_34_x86_64.whl"
PINNED_SHA = "ab" * 32


@pytest.fixture
def pinned_to_a_wheel(scenario):
    """The scenario's series pinned the way the project's is (wheel, sha256, tree of a wheel-built
    history), exported from a repository whose tag records no wheel (a plain clone)."""
    repo, series_dir = scenario
    assert patches("apply", "--repo", str(repo.path), "--series-dir", str(series_dir)) == 0
    pin = f'tag = "v1"\nwheel = "{PINNED_WHEEL}"\nwheel_sha256 = "{PINNED_SHA}"\nsource_tree = "{"0" * 40}"\n'
    (series_dir / "UPSTREAM_PIN").write_text(pin)
    return repo, series_dir


def test_export_keeps_the_wheel_it_cannot_recompute_and_says_what_changed(pinned_to_a_wheel, capsys):
    repo, series_dir = pinned_to_a_wheel
    args = ["--repo", str(repo.path), "--series-dir", str(series_dir)]
    capsys.readouterr()
    assert patches("export", *args, "--check") == 1
    checked = capsys.readouterr().out
    assert patches("export", *args) == 0
    out = capsys.readouterr().out
    tree, commit = repo.tree_of("v1", "python/sglang"), repo.must_rev_parse("v1")
    for text in (checked, out):
        assert f"UPSTREAM_PIN: wheel: kept {PINNED_WHEEL}: this repository's v1 does not record its wheel" in text
        assert f"UPSTREAM_PIN: wheel_sha256: kept {PINNED_SHA}" in text
        assert f"UPSTREAM_PIN: source_tree: {'0' * 40} -> {tree}" in text
        assert f"UPSTREAM_PIN: commit: (none) -> {commit}" in text
    pin = read_pin(series_dir)
    assert pin == {
        "tag": "v1",
        "commit": commit,
        "wheel": PINNED_WHEEL,
        "wheel_sha256": PINNED_SHA,
        "source_tree": tree,
    }


def test_export_sets_the_wheel_the_operator_gives(pinned_to_a_wheel, capsys):
    repo, series_dir = pinned_to_a_wheel
    args = ["--repo", str(repo.path), "--series-dir", str(series_dir)]
    wheel, sha = "sglang-1-py3-none-any.whl", "CD" * 32
    assert patches("export", *args, "--wheel", wheel, "--wheel-sha256", sha) == 0
    out = capsys.readouterr().out
    assert f"UPSTREAM_PIN: wheel: {PINNED_WHEEL} -> {wheel} (given on the command line)" in out
    assert (read_pin(series_dir)["wheel"], read_pin(series_dir)["wheel_sha256"]) == (wheel, sha.lower())


def test_export_onto_another_release_leaves_the_old_wheel_out_and_says_so(tmp_path, capsys):
    repo, series_dir = S.build_scenario(tmp_path, ["applies"])
    repo.run("checkout", "-q", "-B", "work", "v2")
    assert patches("apply", "--repo", str(repo.path), "--series-dir", str(series_dir)) == 0
    (series_dir / "UPSTREAM_PIN").write_text(f'tag = "v1"\nwheel = "{PINNED_WHEEL}"\nwheel_sha256 = "{PINNED_SHA}"\n')
    capsys.readouterr()
    assert patches("export", "--repo", str(repo.path), "--series-dir", str(series_dir), "--base", "v2") == 0
    out = capsys.readouterr().out
    assert f"UPSTREAM_PIN: wheel: {PINNED_WHEEL} -> (none): it described v1; this repository's v2" in out
    assert "UPSTREAM_PIN: tag: v1 -> v2" in out
    assert "wheel" not in read_pin(series_dir)


@pytest.mark.parametrize(
    "extra,needle",
    [
        (["--wheel", PINNED_WHEEL], "give --wheel NAME and --wheel-sha256 HEX together"),
        (["--wheel", PINNED_WHEEL, "--wheel-sha256", "xyz"], "--wheel-sha256 'xyz': allowed: 64 hexadecimal digits"),
        (["--wheel", "dist/x.tar.gz", "--wheel-sha256", PINNED_SHA], "--wheel 'dist/x.tar.gz': allowed: a wheel file"),
        (["--wheel", "sglang-2-py3-none-any.whl", "--wheel-sha256", PINNED_SHA], "is not a wheel of sglang"),
    ],
    ids=["wheel without sha256", "bad sha256", "not a wheel name", "another version"],
)
def test_export_refuses_a_bad_wheel_and_writes_nothing(tmp_path, capsys, extra, needle):
    repo, series_dir = S.build_scenario(tmp_path, ["applies"])
    (series_dir / "UPSTREAM_PIN").write_text('tag = "v1.0"\n')  # a tag with a version, for the version check
    repo.run("tag", "v1.0", "v1")
    repo.run("checkout", "-q", "-B", "work", "v1")
    assert patches("apply", "--repo", str(repo.path), "--series-dir", str(series_dir)) == 0
    capsys.readouterr()
    before = S.snapshot(repo, series_dir)
    assert patches("export", "--repo", str(repo.path), "--series-dir", str(series_dir), *extra) == 2
    assert needle in _one_error_line(capsys)
    assert S.snapshot(repo, series_dir) == before


def test_a_hunk_header_the_parser_cannot_read_is_a_patch_file_error():
    """The type check showed the hunk splitter assumed its header regex matched. ``patches`` lets git
    refuse a corrupt hunk first (``load_patch``), so this is the splitter's own contract: a PatchFileError naming
    the file and the header, not an AttributeError."""
    from sglang_dsv4_ext.errors import PatchFileError
    from sglang_dsv4_ext.tools.series.series import split_hunks

    text = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -x +y @@\n-a\n+b\n"
    with pytest.raises(PatchFileError, match=r"x.py: hunk #1 has a malformed header '@@ -x \+y @@'"):
        split_hunks(text)
