"""`sglang-dsv4 patches`: the README's bad-input rows, each walked through the real CLI on small
synthetic git repositories (tests/support/series_synthetic.py). Every refusal is one line on stderr,
exit 2, and the repository and the series directory are left as they were."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglang_dsv4_ext.cli import main as cli_main
from sglang_dsv4_ext.errors import GitError
from sglang_dsv4_ext.series import checkrepo
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
    from sglang_dsv4_ext.series.gitrepo import GitRepo

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


@pytest.mark.parametrize("argv,needle", [
    (["apply", "--series-dir", "{tmp}"], "give exactly one of --repo"),
    (["status", "--series-dir", "{tmp}/nowhere"], "nowhere"),
    (["rebase", "--repo", "{tmp}", "--onto", "v2", "--drop", "x"], "every --drop NAME needs its own --reason"),
])
def test_usage_mistakes_are_one_line(tmp_path, capsys, argv, needle):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert patches(*argv) == 2
    assert needle in _one_error_line(capsys)


def test_a_refused_export_does_not_leave_a_backup_behind(tmp_path, capsys):
    repo, series_dir = S.build_scenario(tmp_path, ["applies"])
    earlier = set(Path(series_dir).parent.glob("*.backup-*"))
    assert patches("export", "--repo", str(repo.path), "--series-dir", str(series_dir), "--base", "nope") == 2
    _one_error_line(capsys)
    assert set(Path(series_dir).parent.glob("*.backup-*")) == earlier
