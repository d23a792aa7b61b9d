"""Two rules of the evidence code that nothing else pins, through the real CLI against the loopback stand-in
server (tests/support/repro_server.py, which answers ``/server_info`` with the schedulers' activation records
as SGLang carries them):

- `repro run --expect-extension on`: schedulers of one server that report different launches are not one
  active server (tools/repro/extension_check.py, the "several launches" rule, here for /server_info records);
- `repro compare` and `report`: a setting one summary does not record is said at the top, never passed over
  (tools/repro/pairing.py, the "not recorded in both summaries" note).

Each test fails when its rule is taken out (checked by hand: the rule's lines removed, the test run, restored).
"""

from __future__ import annotations

import json
import os

import pytest

from tests.support.repro_cli import TINY, NoCapture, assert_refused, copy_run, make_run, run_cli
from tests.support.repro_server import ACTIVE_BF16, InjectingServer

RESTARTED_RANK = dict(ACTIVE_BF16, launch="5151@1764593600.00", process="5152@1764593603.50")


def test_schedulers_of_several_launches_are_not_one_active_server(tmp_path, capsys):
    """Rank 1 restarted into another launch (both report active, with every field): which launch the URL serves
    cannot be told, so the server is not shown active and the run is refused before any request."""
    records = [dict(ACTIVE_BF16, active=True), dict(RESTARTED_RANK, active=True)]
    out = tmp_path / "run"
    with InjectingServer({}, records=records) as srv:
        rc, _, err = run_cli(["repro", "run", "--endpoint", srv.url, "--out", str(out), *TINY], capsys)
        assert_refused(
            rc,
            err,
            "--expect-extension on: sglang-dsv4-ext is not shown active on every server",
            f"its schedulers report several launches: {ACTIVE_BF16['launch']}, {RESTARTED_RANK['launch']}",
        )
        assert srv.requests == 0
    assert not out.exists()


def test_schedulers_of_several_launches_are_recorded_as_unknown_with_expect_any(tmp_path, capsys):
    records = [dict(ACTIVE_BF16, active=True), dict(RESTARTED_RANK, active=True)]
    out = tmp_path / "run"
    with InjectingServer({}, records=records) as srv:
        rc, _, err = run_cli(
            ["repro", "run", "--endpoint", srv.url, "--out", str(out), *TINY, "--expect-extension", "any"], capsys
        )
    assert rc == 0, err
    with open(out / "summary.json") as f:
        [state] = json.load(f)["extension"]["servers"]
    assert state["state"] == "unknown" and state["source"] is None and state["label_sets"] == []


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    return make_run(str(root / "a"), NoCapture()), make_run(str(root / "b"), NoCapture())


@pytest.fixture
def pair(two_runs, tmp_path):
    """Fresh copies of two runs of the same settings (each test edits one of them)."""
    return tuple(copy_run(run, str(tmp_path / side)) for run, side in zip(two_runs, "ab"))


def _drop_setting(run_dir: str, name: str) -> None:
    """As a summary written before the setting was recorded: its config has no such key."""
    path = os.path.join(run_dir, "summary.json")
    with open(path) as f:
        summary = json.load(f)
    del summary["config"][name]
    with open(path, "w") as f:
        json.dump(summary, f)


NOTE = (
    "cannot check that the runs had the same settings: --temperature not recorded in both summaries; "
    "pairs are checked on prompt hash and concurrency only"
)


def test_compare_says_when_one_summary_lacks_a_setting(pair, capsys):
    a, b = pair
    rc, out, err = run_cli(["repro", "compare", a, b], capsys)
    assert rc == 0 and "cannot check" not in out, err  # both record every setting: nothing to say
    _drop_setting(b, "temperature")
    rc, out, err = run_cli(["repro", "compare", a, b], capsys)
    assert rc == 0, err
    lines = out.splitlines()
    pairing = next(i for i, line in enumerate(lines) if "paired requests" in line)
    assert f"WARNING: {NOTE}" in lines[:pairing]  # among the warnings above the comparison, after each side's line


def test_report_says_when_one_summary_lacks_a_setting(pair, tmp_path, capsys):
    a, b = pair
    _drop_setting(a, "temperature")
    page = tmp_path / "page.html"
    rc, _, err = run_cli(["report", a, b, "-o", str(page)], capsys)
    assert rc == 0, err
    text = page.read_text()
    assert '<div class="warnings"><h2>Read this first</h2>' in text
    assert NOTE in text
