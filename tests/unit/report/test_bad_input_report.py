"""`sglang-dsv4 report`: each row of its bad-input table (docs/bad-input.md), through the real CLI.

The runs are real (8 requests against the stand-in server, tests/support/repro_server.py), then one field
is broken on purpose. Every row: exit 2, one line naming the input (``FILE:LINE: field: ...`` for a record),
no traceback, no page written, and no file of a run directory changed (byte for byte).
"""

from __future__ import annotations

import json
import os

import pytest

from tests.support.fresh_interpreter import run_python
from tests.support.repro_cli import NoCapture, assert_refused, copy_run, make_run, requests_file, run_cli, tree_digest


@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    return make_run(str(tmp_path_factory.mktemp("runs") / "good"), NoCapture())


@pytest.fixture
def run(good_run, tmp_path):
    """A fresh copy of the good run, with its files' digests before the command."""
    copy = copy_run(good_run, str(tmp_path / "run"))
    return copy, tree_digest(copy)


def _report(capsys, *argv):
    return run_cli(["report", *map(str, argv)], capsys)


# ----- -o: outputs never replace inputs ------------------------------------------------------------
@pytest.mark.parametrize("name", ["requests.jsonl", "summary.json"])
@pytest.mark.parametrize("force", [True, False])
def test_a_file_of_the_run_directory_is_never_written_over(name, force, run, capsys):
    """`report RUN -o RUN/requests.jsonl --force` used to replace the run's records with HTML (and `compare`
    then called the run cut short)."""
    run_dir, before = run
    target = os.path.join(run_dir, name)
    rc, _, err = _report(capsys, run_dir, "-o", target, *(["--force"] if force else []))
    assert_refused(rc, err, f"-o {target}: a file of the run directory {run_dir}", "never written over, --force or not")
    assert tree_digest(run_dir) == before
    rc, out, err = run_cli(["repro", "reparse", run_dir], capsys)  # the run reads as it did
    assert rc == 0 and "re-parsed" in out, err


def test_a_link_to_a_run_file_is_never_written_over(run, tmp_path, capsys):
    run_dir, before = run
    for how, make in (("symlink", os.symlink), ("hard link", os.link)):
        link = tmp_path / f"page-{how.replace(' ', '-')}.html"
        make(requests_file(run_dir), link)
        rc, _, err = _report(capsys, run_dir, "-o", link, "--force")
        assert_refused(rc, err, f"-o {link}: a file of the run directory", "--force or not")
    assert tree_digest(run_dir) == before


def test_a_new_page_inside_the_run_directory_is_written(run, capsys):
    """Not an overwrite: a new file next to the run's is allowed."""
    run_dir, before = run
    page = os.path.join(run_dir, "report.html")
    rc, out, err = _report(capsys, run_dir, "-o", page)
    assert rc == 0 and f"wrote {page}" in out, err
    assert {k: v for k, v in tree_digest(run_dir).items() if k != "report.html"} == before


@pytest.mark.parametrize("force", [True, False])
def test_an_output_that_is_a_directory_is_refused(force, run, tmp_path, capsys):
    """`-o DIR --force` used to end with IsADirectoryError; without --force the message said "pass --force"."""
    run_dir, _ = run
    rc, _, err = _report(capsys, run_dir, "-o", tmp_path, *(["--force"] if force else []))
    assert_refused(rc, err, f"-o {tmp_path}: is a directory; give the HTML file to write, e.g. {tmp_path}/report.html")
    assert "--force" not in err


def test_an_output_in_a_missing_directory_is_refused(run, tmp_path, capsys):
    """Used to build the page, then end with FileNotFoundError."""
    run_dir, _ = run
    target = tmp_path / "missing" / "report.html"
    rc, _, err = _report(capsys, run_dir, "-o", target)
    assert_refused(rc, err, f"-o {target}: directory {tmp_path / 'missing'} does not exist")
    assert not (tmp_path / "missing").exists()


def test_an_existing_page_needs_force(run, tmp_path, capsys):
    run_dir, _ = run
    page = tmp_path / "report.html"
    page.write_text("an earlier page")
    rc, _, err = _report(capsys, run_dir, "-o", page)
    assert_refused(rc, err, f"-o {page}: exists; pass --force to overwrite it")
    assert page.read_text() == "an earlier page"
    rc, _, err = _report(capsys, run_dir, "-o", page, "--force")
    assert rc == 0 and page.read_text().startswith("<!DOCTYPE html>"), err


def test_an_output_that_is_not_a_regular_file_is_refused_without_waiting(run, tmp_path):
    """A FIFO nobody reads: opening it to write would wait for a reader without end. A process of its own, so
    that a regression hangs that process (killed at the timeout), not the suite."""
    run_dir, _ = run
    fifo = tmp_path / "page.html"
    os.mkfifo(fifo)
    proc = run_python("-m", "sglang_dsv4_ext.tools.cli", "report", run_dir, "-o", str(fifo), "--force", timeout=60)
    assert_refused(proc.returncode, proc.stderr, f"-o {fifo}: exists and is not a regular file")


# ----- fields the page reads -----------------------------------------------------------------------
def _edit_record(run_dir: str, line: int, edit) -> None:
    path = requests_file(run_dir)
    with open(path) as f:
        lines = f.readlines()
    rec = json.loads(lines[line - 1])
    edit(rec)
    lines[line - 1] = json.dumps(rec) + "\n"
    with open(path, "w") as f:
        f.writelines(lines)


def _without_concurrency(rec):
    del rec["concurrency"]


RECORD_ROWS = {
    # name: (edit of record 3, what the message says after FILE:3:)
    "concurrency missing": (_without_concurrency, "record lacks 'concurrency' (the level the request ran at)"),
    "concurrency a word": (
        lambda r: r.update(concurrency="eight"),
        "concurrency: must be an integer >= 1 (the level the request ran at), got 'eight'",
    ),
    "concurrency 0": (lambda r: r.update(concurrency=0), "concurrency: must be an integer >= 1"),
    "concurrency 2.5": (lambda r: r.update(concurrency=2.5), "concurrency: must be an integer >= 1"),
    "latency inf": (
        lambda r: r.update(latency_s=float("inf")),
        "latency_s: must be a finite number of seconds >= 0, got inf",
    ),
    "latency NaN": (lambda r: r.update(latency_s=float("nan")), "latency_s: must be a finite number of seconds >= 0"),
    "latency a word": (lambda r: r.update(latency_s="slow"), "latency_s: must be a finite number of seconds >= 0"),
    "latency negative": (lambda r: r.update(latency_s=-1.0), "latency_s: must be a finite number of seconds >= 0"),
}


@pytest.mark.parametrize("row", sorted(RECORD_ROWS))
def test_a_record_field_the_page_needs_is_refused_naming_file_and_line(row, run, tmp_path, capsys):
    """A missing concurrency used to end with a KeyError traceback, a word with an int() error naming no file,
    an infinite latency showed as NaN on the page."""
    run_dir, _ = run
    edit, message = RECORD_ROWS[row]
    _edit_record(run_dir, 3, edit)
    page = tmp_path / "report.html"
    rc, _, err = _report(capsys, run_dir, "-o", page)
    assert_refused(rc, err, f"{requests_file(run_dir)}:3: {message}")
    assert not page.exists()


@pytest.mark.parametrize("evidence, shown", [
    ({"url": "http://prefill:30000", "aborted_requests": 3}, "got dict"),
    (["http://prefill:30000"], "got a list holding other things"),
    ([{"aborted_requests": 3}], "got a list holding other things"),  # a row without its url
    ("none", "got str"),
])  # fmt: skip
def test_server_evidence_that_is_not_a_list_of_servers_is_refused(evidence, shown, run, tmp_path, capsys):
    """A list or a dict there used to end with an AttributeError traceback."""
    run_dir, _ = run
    path = os.path.join(run_dir, "summary.json")
    with open(path) as f:
        summary = json.load(f)
    summary["server_evidence"] = evidence
    with open(path, "w") as f:
        json.dump(summary, f)
    page = tmp_path / "report.html"
    rc, _, err = _report(capsys, run_dir, "-o", page)
    assert_refused(rc, err, f"{path}: server_evidence: expected a list of objects, one per server with its url", shown)
    assert not page.exists()
