"""`sglang-dsv4 repro run` / `repro ab`: each row of the README's bad-input table, through the real CLI.

Every row must end with exit 2, a message naming the input, no traceback, and nothing written or
changed (an earlier run stays byte for byte; the stand-in server sees no request).
"""

from __future__ import annotations

import os

import pytest

from tests.support.repro_cli import TINY, assert_refused, make_run, requests_file, run_cli, tree_digest
from tests.support.repro_server import InjectingServer

# (flag values, fragments the message must hold). Refused by the flag parser before anything runs.
FLAG_ROWS = {
    "time-limit nan": (["--time-limit", "nan"], ["--time-limit", "finite"]),
    "time-limit inf": (["--time-limit", "inf"], ["--time-limit", "finite"]),
    "time-limit 0": (["--time-limit", "0"], ["--time-limit", "> 0"]),
    "request-timeout nan": (["--request-timeout", "nan"], ["--request-timeout", "finite"]),
    "request-timeout=-inf": (["--request-timeout=-inf"], ["--request-timeout", "finite"]),
    "temperature nan": (["--temperature", "nan"], ["--temperature", "finite"]),
    "temperature inf": (["--temperature", "inf"], ["--temperature", "finite"]),
    "temperature=-1": (["--temperature=-1"], ["--temperature", ">= 0"]),
    "concurrency 0": (["--concurrency", "8,0"], ["--concurrency", ">= 1"]),
    "concurrency words": (["--concurrency", "eight"], ["--concurrency", "comma-separated integers"]),
    "sessions 0": (["--sessions", "0"], ["--sessions", ">= 1"]),
    "repetition 1,1,1": (["--repetition", "1,1,1"], ["--repetition", "MIN_REPEATS >= 2"]),
    "thinking maybe": (["--thinking", "maybe"], ["--thinking", "on or off"]),
    "extra-body messages": (["--extra-body", '{"messages": []}'], ["--extra-body", "messages", "harness owns"]),
    "extra-body tools": (["--extra-body", '{"tools": []}'], ["--extra-body", "tools", "harness owns"]),
    "extra-body model": (["--extra-body", '{"model": "other"}'], ["--extra-body", "model", "--model"]),
    "extra-body max_tokens": (["--extra-body", '{"max_tokens": 9}'], ["--extra-body", "--max-tokens"]),
    "extra-body seed": (["--extra-body", '{"seed": 1}'], ["--extra-body", "--seed"]),
    "extra-body thinking": (["--extra-body", '{"chat_template_kwargs": {"thinking": true}}'],
                            ["--extra-body", "chat_template_kwargs.thinking", "--thinking"]),
    "extra-body a list": (["--extra-body", "[1]"], ["--extra-body", "JSON object"]),
    "extra-body not JSON": (["--extra-body", "{messages"], ["--extra-body", "not JSON"]),
}


@pytest.fixture
def server():
    with InjectingServer({}, seed=0) as srv:
        yield srv


@pytest.mark.parametrize("row", sorted(FLAG_ROWS))
def test_run_refuses_bad_flag_values(row, server, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    flags, fragments = FLAG_ROWS[row]
    out = tmp_path / "run"
    rc, _, err = run_cli(["repro", "run", "--endpoint", server.url, "--out", str(out), *TINY, *flags], capsys)
    assert_refused(rc, err, *fragments)
    assert not out.exists() and server.requests == 0


def test_run_refuses_an_endpoint_that_is_not_a_url(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, _, err = run_cli(["repro", "run", "--endpoint", "127.0.0.1:8000", "--out", str(tmp_path / "r"), *TINY], capsys)
    assert_refused(rc, err, "--endpoint", "http://")
    assert os.listdir(tmp_path) == []


def test_run_never_overwrites_an_earlier_run(server, tmp_path, capsys):
    run = make_run(str(tmp_path / "run"), capsys)
    before = tree_digest(run)
    served = server.requests
    rc, _, err = run_cli(["repro", "run", "--endpoint", server.url, "--out", run, *TINY], capsys)
    assert_refused(rc, err, f"--out {run}", "never overwritten")
    assert tree_digest(run) == before and server.requests == served


def test_run_refuses_an_out_that_is_a_file(server, tmp_path, capsys):
    path = tmp_path / "notes.txt"
    path.write_text("keep me")
    rc, _, err = run_cli(["repro", "run", "--endpoint", server.url, "--out", str(path), *TINY], capsys)
    assert_refused(rc, err, str(path), "not a directory")
    assert path.read_text() == "keep me" and server.requests == 0


def test_missing_api_key_variable_is_refused_before_anything_is_written(server, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("REPRO_TEST_NO_SUCH_KEY", raising=False)
    run = make_run(str(tmp_path / "run"), capsys)
    before = tree_digest(run)
    assert os.path.getsize(requests_file(run)) > 0
    for out in (run, str(tmp_path / "fresh")):
        rc, _, err = run_cli(["repro", "run", "--endpoint", server.url, "--out", out, *TINY,
                              "--api-key-env", "REPRO_TEST_NO_SUCH_KEY"], capsys)  # fmt: skip
        assert_refused(rc, err, "--api-key-env REPRO_TEST_NO_SUCH_KEY", "not set")
    assert tree_digest(run) == before
    assert not (tmp_path / "fresh").exists()


def test_default_out_gets_a_new_directory_each_time(server, tmp_path, capsys, monkeypatch):
    """Without --out, two runs in the same second go to two directories; the second says where."""
    monkeypatch.chdir(tmp_path)
    outs = []
    for _ in range(2):
        rc, out, err = run_cli(["repro", "run", "--endpoint", server.url, *TINY], capsys)
        assert rc == 0, err
        outs.append(out.strip().splitlines()[-1])
    runs = sorted(os.listdir(tmp_path / "repro-runs"))
    assert len(runs) == 2
    for name, line in zip(runs, outs):
        assert os.path.join("repro-runs", name, "requests.jsonl") in "\n".join(outs)
        assert len(open(tmp_path / "repro-runs" / name / "requests.jsonl").readlines()) == 8, line


def test_ab_refuses_bad_alpha_and_a_used_out_before_running(tmp_path, capsys):
    with InjectingServer({}, seed=0) as a, InjectingServer({}, seed=0) as b:
        base = ["repro", "ab", "--endpoint-a", a.url, "--endpoint-b", b.url, *TINY]
        for alpha in ("nan", "0", "1.5"):
            rc, _, err = run_cli([*base, "--out", str(tmp_path / "ab"), "--alpha", alpha], capsys)
            assert_refused(rc, err, "--alpha", "(0, 1)")
        used = tmp_path / "used"
        used.mkdir()
        (used / "ab.json").write_text("{}")
        rc, _, err = run_cli([*base, "--out", str(used)], capsys)
        assert_refused(rc, err, f"--out {used}", "never overwritten")
        assert a.requests == b.requests == 0
        assert os.listdir(used) == ["ab.json"] and not (tmp_path / "ab").exists()
