"""`sglang-dsv4 repro reparse`: each row of its bad-input table (docs/bad-input.md), through the real CLI.

Every row: exit 2, a message naming the input, no traceback, and the run directory unchanged.
"""

from __future__ import annotations

import os

import pytest

from tests.support.repro_cli import assert_refused, copy_run, make_run, requests_file, run_cli, tree_digest
from tests.support.repro_server import InjectingServer


@pytest.fixture
def run(tmp_path, capsys):
    return make_run(str(tmp_path / "run"), capsys, rates={"swallowed_ok": 0.5, "malformed_dsml": 0.3})


def test_reparse_tokenizer_that_does_not_exist(run, capsys):
    before = tree_digest(run)
    rc, _, err = run_cli(["repro", "reparse", run, "--tokenizer", "/nonexistent"], capsys)
    assert_refused(rc, err, "--tokenizer /nonexistent", "not a directory")
    assert tree_digest(run) == before


def test_reparse_tokenizer_directory_without_a_tokenizer(run, tmp_path, capsys):
    """Loads transformers (about 10 s on its own; SGLang's tests load it anyway)."""
    empty = tmp_path / "empty-checkpoint"
    empty.mkdir()
    before = tree_digest(run)
    rc, _, err = run_cli(["repro", "reparse", run, "--tokenizer", str(empty)], capsys)
    assert_refused(rc, err, f"--tokenizer {empty}", "no usable tokenizer")
    assert tree_digest(run) == before


def test_reparse_tokenizer_and_url_together(run, capsys):
    rc, _, err = run_cli(["repro", "reparse", run, "--tokenizer", "/x", "--detokenize-url", "http://127.0.0.1:9"],
                         capsys)  # fmt: skip
    assert_refused(rc, err, "--tokenizer or --detokenize-url, not both")


def test_reparse_detokenize_url_that_is_not_a_url(run, capsys):
    rc, _, err = run_cli(["repro", "reparse", run, "--detokenize-url", "127.0.0.1:30000"], capsys)
    assert_refused(rc, err, "--detokenize-url", "http://")


def test_reparse_directory_that_is_not_a_run(tmp_path, capsys):
    rc, _, err = run_cli(["repro", "reparse", str(tmp_path)], capsys)
    assert_refused(rc, err, "requests.jsonl not found")
    assert os.listdir(tmp_path) == []


def test_reparse_run_without_summary(run, tmp_path, capsys):
    """A run killed with SIGKILL has no summary: refused, naming it (its verdict settings are there)."""
    killed = copy_run(run, str(tmp_path / "killed"))
    os.remove(os.path.join(killed, "summary.json"))
    before = tree_digest(killed)
    rc, _, err = run_cli(["repro", "reparse", killed], capsys)
    assert_refused(rc, err, os.path.join(killed, "summary.json"), "not found")
    assert tree_digest(killed) == before


@pytest.mark.parametrize("bad_line, fragment", [("[1]\n", "expected a JSON object"), ("{oops\n", "not a JSON line"),
                                                ('{"key": "k"}\n', "lacks 'prompt_sha256'")])  # fmt: skip
def test_reparse_bad_record_line(bad_line, fragment, run, capsys):
    path = requests_file(run)
    with open(path, "a") as f:
        f.write(bad_line)
    before = tree_digest(run)
    rc, _, err = run_cli(["repro", "reparse", run], capsys)
    assert_refused(rc, err, f"{path}:9:", fragment)
    assert tree_digest(run) == before  # no half-written reparsed file


def test_reparse_never_overwrites_an_earlier_reparse(run, capsys):
    with InjectingServer({}, seed=0) as srv:
        rc, out1, err = run_cli(["repro", "reparse", run, "--detokenize-url", srv.url], capsys)
        assert rc == 0, err
        first = open(os.path.join(run, "reparsed.jsonl")).read()
        rc, out2, err = run_cli(["repro", "reparse", run, "--detokenize-url", srv.url], capsys)
        assert rc == 0, err
    assert open(os.path.join(run, "reparsed.jsonl")).read() == first
    second = [n for n in os.listdir(run) if n.startswith("reparsed-") and n.endswith(".jsonl")]
    assert len(second) == 1 and second[0] in out2
