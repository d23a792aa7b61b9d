"""A run directory's records and summary read as one run, by `repro reparse`, `report` and `repro compare`.

The runs are real (8 requests against the stand-in server, tests/support/repro_server.py), then one run's
files are mixed with another's on purpose. Every row: exit 2, one line naming the file (and the line), no
traceback, nothing written (no reparsed file, no page) and no file of a run directory changed.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from tests.support.repro_cli import NoCapture, assert_refused, copy_run, make_run, requests_file, run_cli, tree_digest


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two good runs of the same settings against the same server: one run's files, then another's."""
    root = tmp_path_factory.mktemp("runs")
    return make_run(str(root / "first"), NoCapture()), make_run(str(root / "second"), NoCapture())


@pytest.fixture
def run(runs, tmp_path):
    return copy_run(runs[0], str(tmp_path / "run"))


def _commands(run_dir: str, other: str, tmp_path) -> dict[str, list[str]]:
    return {
        "reparse": ["repro", "reparse", run_dir],
        "report": ["report", run_dir, "-o", str(tmp_path / "page.html")],
        "compare": ["repro", "compare", other, run_dir],
    }


COMMANDS = ("reparse", "report", "compare")


def _lines(path: str) -> list[str]:
    with open(path) as f:
        return f.readlines()


def _write_records(run_dir: str, records: list[dict]) -> None:
    with open(requests_file(run_dir), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)


def _records(run_dir: str) -> list[dict]:
    return [json.loads(line) for line in _lines(requests_file(run_dir))]


def _refused(command: str, run_dir: str, other: str, tmp_path, capsys, *fragments: str) -> None:
    before = {d: tree_digest(d) for d in (run_dir, other)}
    rc, _, err = run_cli(_commands(run_dir, other, tmp_path)[command], capsys)
    assert_refused(rc, err, *fragments)
    assert {d: tree_digest(d) for d in (run_dir, other)} == before  # no reparsed file started
    assert not (tmp_path / "page.html").exists()


def _other_run(runs, tmp_path) -> str:
    return copy_run(runs[1], str(tmp_path / "other"))


@pytest.mark.parametrize("command", COMMANDS)
def test_another_runs_records_beside_the_summary_are_refused(command, run, runs, tmp_path, capsys):
    """Both runs have the same settings and prompts: only the run id tells them apart."""
    shutil.copyfile(requests_file(runs[1]), requests_file(run))
    with open(os.path.join(run, "summary.json")) as f:
        run_id = json.load(f)["run_id"]
    _refused(command, run, _other_run(runs, tmp_path), tmp_path, capsys,
             f"{requests_file(run)}:1: a record of run ", f"but summary.json is of run '{run_id}'")  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS)
def test_records_without_a_run_id_from_another_time_are_refused(command, run, runs, tmp_path, capsys):
    """Records written before they carried a run id: those of a run an hour later are not this summary's."""
    records = _records(run)
    for rec in records:
        rec.pop("run_id", None)  # absent from records of sglang-dsv4-ext 0.3.0
        rec["started_at"] += 3600
    _write_records(run, records)
    _refused(command, run, _other_run(runs, tmp_path), tmp_path, capsys,
             f"{requests_file(run)}:1: started at ", "outside the run summary.json describes")  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS)
def test_a_records_file_that_links_to_another_run_is_refused(command, run, runs, tmp_path, capsys):
    os.remove(requests_file(run))
    os.symlink(requests_file(runs[1]), requests_file(run))
    _refused(command, run, _other_run(runs, tmp_path), tmp_path, capsys,
             f"{requests_file(run)}: a link to {os.path.realpath(requests_file(runs[1]))}",
             "a run's requests.jsonl must be its own")  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS)
def test_a_record_at_a_concurrency_that_is_none_of_the_runs_levels_is_refused(command, run, runs, tmp_path, capsys):
    records = _records(run)
    records[2]["concurrency"] = 5  # the run's one level is 2
    _write_records(run, records)
    _refused(command, run, _other_run(runs, tmp_path), tmp_path, capsys,
             f"{requests_file(run)}:3: concurrency 5 is none of the run's levels",
             "(2, summary.json config.concurrency)")  # fmt: skip


@pytest.mark.parametrize("field, value, message", [
    ("session", 5, "session 5 is past the run's 2 sessions (summary.json config.sessions)"),
    ("round", 2, "round 2 is past the run's 2 rounds (summary.json config.rounds)"),
], ids=["session", "round"])  # fmt: skip
@pytest.mark.parametrize("command", COMMANDS)
def test_a_record_past_the_runs_sessions_or_rounds_is_refused(command, field, value, message, run, runs, tmp_path,
                                                              capsys):  # fmt: skip
    """A summary of a smaller run (--sessions 2 --rounds 2) beside records of a bigger one."""
    records = _records(run)
    records[2][field] = value
    _write_records(run, records)
    _refused(command, run, _other_run(runs, tmp_path), tmp_path, capsys, f"{requests_file(run)}:3: {message}")


def test_an_answer_step_of_a_run_without_answer_steps_is_refused(run, runs, tmp_path, capsys):
    path = os.path.join(run, "summary.json")
    with open(path) as f:
        summary = json.load(f)
    summary["config"]["answer_step"] = False  # as --no-answer-step writes it
    with open(path, "w") as f:
        json.dump(summary, f)
    _refused("reparse", run, _other_run(runs, tmp_path), tmp_path, capsys,
             f"{requests_file(run)}:",  # the first answer step's line (records are written as requests end)
             "an answer step, but the run had none (summary.json config.answer_step is false)")  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS)
def test_records_fewer_than_the_summary_says_are_refused(command, run, runs, tmp_path, capsys):
    _write_records(run, _records(run)[:-1])
    _refused(command, run, _other_run(runs, tmp_path), tmp_path, capsys,
             f"{requests_file(run)}: holds 7 records, but {os.path.join(run, 'summary.json')} says the run "
             "recorded 8 (requests_done)")  # fmt: skip


def test_a_run_directory_that_is_a_link_reads_as_the_run(runs, tmp_path, capsys):
    """Only a file linked into another directory is refused: a link to a whole run directory is that run."""
    link = tmp_path / "latest"
    os.symlink(runs[0], link)
    rc, _, err = run_cli(["report", str(link), "-o", str(tmp_path / "page.html")], capsys)
    assert rc == 0, err


def test_a_record_with_the_runs_id_is_its_record_whatever_the_wall_clock_said(run, capsys):
    """The wall clock set back an hour during the run: the start times are off, the run id decides."""
    records = _records(run)
    records[-1]["started_at"] -= 3600
    _write_records(run, records)
    rc, out, err = run_cli(["repro", "reparse", run], capsys)
    assert rc == 0 and "re-parsed" in out, err
