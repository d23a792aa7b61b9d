"""The resolution record of a rebase (``rebase --resolutions DIR``) and ``--into`` / ``--edit``,
on the small synthetic repositories of tests/support/series_synthetic.py.

A recorded rebase here does what a rebase across a real release does (docs/rebase-0.5.23-to-0.5.22.md):
a conflict resolved with an edit of a file that did not conflict and a new commit message, and a
patch that applied cleanly but is changed after it applied (``--edit``). The same rebase on a fresh
clone with the record goes through without stopping and writes the same series, byte for byte.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sglang_dsv4_ext.tools.series import rebase
from sglang_dsv4_ext.tools.series.gitrepo import GitRepo, run_git_in
from sglang_dsv4_ext.tools.series.resolutions import rr_cache_of
from sglang_dsv4_ext.tools.series.series import load_series, read_pin
from tests.support import series_synthetic as S
from tests.support.cli_calls import run_patches as run_cli

CONFLICT_FILE = S.file_of("conflict")
APPLIES_FILE = S.file_of("applies")  # the conflict patch does not touch it: its edit is beyond the conflict
THREEWAY_FILE = S.file_of("applies-3way")
RESOLVED_CONFLICT = S.lines("conflict", changes={10: "conflict line 10 UPSTREAM\nconflict line 10 FIXED"})


def name_of(series_dir: Path, key: str) -> str:
    stem = Path(S.PATCHES[key][0]).stem
    return next(n for n in load_series(series_dir).names if f"-{stem}-" in n)


def files_of(directory: Path) -> dict:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def fresh_clone(repo: GitRepo, dest: Path) -> GitRepo:
    run_git_in(dest.parent, ["clone", "-q", str(repo.path), str(dest)])
    clone = GitRepo(dest)
    for tag in ("v1", "v2"):
        assert clone.rev_parse(tag) == repo.rev_parse(tag)
    return clone


def message_file(repo: GitRepo) -> Path:
    return repo.git_dir / "dsv4-patches-rebase" / "MESSAGE"


def record_a_rebase(repo: GitRepo, series_dir: Path, into: Path, record: Path, capsys) -> None:
    """Rebase onto v2 keeping a record: the conflict is resolved with an edit of another file and a
    new message; the clean three-way patch is changed after it applies (--edit)."""
    threeway = name_of(series_dir, "applies-3way")
    args = ["--repo", str(repo.path)]
    assert (
        run_cli(
            "rebase",
            *args,
            "--series-dir",
            str(series_dir),
            "--onto",
            "v2",
            "--into",
            str(into),
            "--resolutions",
            str(record),
            "--edit",
            threeway,
        )
        == 1
    )
    assert f"stopped at {name_of(series_dir, 'conflict')}: conflict" in capsys.readouterr().out
    (repo.work_tree / CONFLICT_FILE).write_text(RESOLVED_CONFLICT)
    adapted = S.lines("applies", changes={10: "applies line 10 FIXED", 30: "applies line 30 adapted for v2"})
    (repo.work_tree / APPLIES_FILE).write_text(adapted)
    repo.run("add", CONFLICT_FILE, APPLIES_FILE)
    message = message_file(repo)
    message.write_text(
        message.read_text().replace(
            "Description: test patch conflict", "Description: test patch conflict, as v2 needs it"
        )
    )
    assert run_cli("rebase", *args, "--continue") == 1
    out = capsys.readouterr().out
    assert f"stopped at {threeway}: applies-3way" in out and "(--edit)" in out
    (repo.work_tree / THREEWAY_FILE).write_text(
        (repo.work_tree / THREEWAY_FILE).read_text().replace("threeway line 20\n", "threeway line 20 for v2\n")
    )
    repo.run("add", THREEWAY_FILE)
    assert run_cli("rebase", *args, "--continue") == 0
    assert "resolution record" in capsys.readouterr().out


def test_a_recorded_rebase_replays_on_a_fresh_clone_byte_for_byte(tmp_path, capsys):
    repo, series_dir = S.build_scenario(tmp_path, ["applies", "conflict", "applies-3way"])
    old_series = files_of(series_dir)
    into, record = tmp_path / "new-series", tmp_path / "record"
    record_a_rebase(repo, series_dir, into, record, capsys)

    # --into: the old series is left exactly as it was; the new one is pinned to v2
    assert files_of(series_dir) == old_series
    new = load_series(into)
    assert read_pin(into)["tag"] == "v2" and len(new.names) == 3
    conflict, threeway = name_of(into, "conflict"), name_of(into, "applies-3way")
    assert "+applies line 30 adapted for v2" in new.get(conflict).text  # the edit beyond the conflicted file
    assert "as v2 needs it" in new.get(conflict).fields["Description"]
    assert "+threeway line 20 for v2" in new.get(threeway).text
    # the record: rerere's entry for conflict.py, the conflict's edits (applies.py only) and message,
    # the --edit patch's edits (its message was not changed)
    recorded = files_of(record)
    (entry,) = {Path(k).parent for k in recorded if k.startswith("rr-cache/")}
    assert {str(entry / "preimage"), str(entry / "postimage")} <= set(recorded)
    edits = recorded[conflict + ".edits"].decode()
    assert f"diff --git a/{APPLIES_FILE} b/{APPLIES_FILE}" in edits and CONFLICT_FILE not in edits
    assert set(recorded) - {str(entry / "preimage"), str(entry / "postimage")} == {
        conflict + ".edits",
        conflict + ".message",
        threeway + ".edits",
    }

    # The same rebase on a fresh clone, with a copy of the record and no --edit: no stop, same bytes.
    clone = fresh_clone(repo, tmp_path / "fresh")
    replay_record, replay_into = tmp_path / "record-copy", tmp_path / "replayed-series"
    shutil.copytree(record, replay_record)
    assert (
        run_cli(
            "rebase",
            "--repo",
            str(clone.path),
            "--series-dir",
            str(series_dir),
            "--onto",
            "v2",
            "--into",
            str(replay_into),
            "--resolutions",
            str(replay_record),
        )
        == 0
    )
    out = capsys.readouterr().out
    assert (
        f"{conflict}  resolved (conflict resolved from the resolution record (git rerere, recorded edits, "
        "recorded message))" in out
    )
    assert f"{threeway}  resolved (applies-3way, then edited from the resolution record (recorded edits))" in out
    assert files_of(replay_into) == files_of(into)
    assert files_of(replay_record) == recorded  # replaying adds nothing to the record
    assert not rebase.in_progress(clone)

    # Without the record the same rebase stops at the conflict: the record is what replays it.
    control = fresh_clone(repo, tmp_path / "control")
    assert (
        run_cli(
            "rebase",
            "--repo",
            str(control.path),
            "--series-dir",
            str(series_dir),
            "--onto",
            "v2",
            "--into",
            str(tmp_path / "control-series"),
        )
        == 1
    )
    assert f"stopped at {conflict}: conflict" in capsys.readouterr().out


def test_rerere_replays_only_the_records_resolutions_and_the_repositorys_cache_comes_back(tmp_path, capsys):
    """git rerere is off by default, and a record's rebase never replays what the repository
    remembers from other work; the repository's own rerere cache is put back afterwards."""
    repo, series_dir = S.build_scenario(tmp_path, ["applies", "conflict", "applies-3way"])
    record = tmp_path / "record"
    record_a_rebase(repo, series_dir, tmp_path / "new-series", record, capsys)
    # The repository now "remembers" that very resolution in its own rerere cache.
    own = rr_cache_of(repo)
    shutil.copytree(record / "rr-cache", own, dirs_exist_ok=True)
    remembered = files_of(own)
    repo.run("checkout", "-q", "main")
    args = ["--repo", str(repo.path), "--series-dir", str(series_dir), "--onto", "v2"]

    # without a record: rerere stays off, the conflict is left as git made it
    assert run_cli("rebase", *args, "--into", str(tmp_path / "a")) == 1
    capsys.readouterr()
    assert repo.unmerged_paths() == [CONFLICT_FILE]
    assert "<<<<<<<" in (repo.work_tree / CONFLICT_FILE).read_text()
    assert run_cli("rebase", "--repo", str(repo.path), "--abort") == 0

    # with an empty record: rerere is on, but only the record's resolutions are there to replay
    empty = tmp_path / "empty-record"
    assert run_cli("rebase", *args, "--into", str(tmp_path / "b"), "--resolutions", str(empty)) == 1
    assert f"stopped at {name_of(series_dir, 'conflict')}: conflict" in capsys.readouterr().out
    assert "<<<<<<<" in (repo.work_tree / CONFLICT_FILE).read_text()
    assert run_cli("rebase", "--repo", str(repo.path), "--abort") == 0
    assert files_of(own) == remembered
    assert not empty.exists()  # an aborted rebase writes no record


def test_record_and_edit_options_refuse_bad_input(tmp_path, capsys):
    repo, series_dir = S.build_scenario(tmp_path, ["applies", "conflict"])
    args = ["--repo", str(repo.path), "--series-dir", str(series_dir), "--onto", "v2"]
    not_a_dir = tmp_path / "record.txt"
    not_a_dir.write_text("x\n")
    applies = name_of(series_dir, "applies")
    cases = [
        (["--resolutions", str(not_a_dir)], f"--resolutions {not_a_dir}: not a directory"),
        (["--edit", "nope.patch"], "--edit 'nope.patch': no such patch"),
        (["--edit", applies, "--drop", applies, "--reason", "x"], "a dropped patch cannot be edited"),
    ]
    before = S.snapshot(repo, series_dir)
    for extra, message in cases:
        assert run_cli("rebase", *args, *extra) == 2
        assert message in capsys.readouterr().err
        assert S.snapshot(repo, series_dir) == before
    assert run_cli("rebase", *args) == 1  # stopped at the conflict
    capsys.readouterr()
    for extra in (["--into", str(tmp_path / "x")], ["--resolutions", str(tmp_path / "r")], ["--edit", applies]):
        assert run_cli("rebase", "--repo", str(repo.path), "--continue", *extra) == 2
        assert "the rebase remembers how it was started" in capsys.readouterr().err
    assert run_cli("rebase", "--repo", str(repo.path), "--abort") == 0


def test_a_patch_stopped_for_edit_can_still_be_dropped(tmp_path, capsys):
    repo, series_dir = S.build_scenario(tmp_path, ["applies", "applies-3way"])
    threeway, into = name_of(series_dir, "applies-3way"), tmp_path / "new-series"
    args = ["--repo", str(repo.path)]
    assert (
        run_cli(
            "rebase", *args, "--series-dir", str(series_dir), "--onto", "v2", "--into", str(into), "--edit", threeway
        )
        == 1
    )
    assert f"stopped at {threeway}: applies-3way" in capsys.readouterr().out
    assert run_cli("rebase", *args, "--continue", "--drop", threeway, "--reason", "not wanted on v2") == 0
    assert load_series(into).names == [name_of(series_dir, "applies")]
    assert (into / "dropped" / (threeway + ".tombstone")).is_file()
    assert repo.out("log", "--format=%s", "v2..HEAD").splitlines() == [S.PATCHES["applies"][1]]
