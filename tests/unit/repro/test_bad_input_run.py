"""`sglang-dsv4 repro run` / `repro ab`: each row of its bad-input table (docs/bad-input.md), through the real CLI.

Every row must end with exit 2, a message naming the input, no traceback, and nothing written or
changed (an earlier run stays byte for byte; the stand-in server sees no request). Then what the user
sees of a hostile server (tests/support/repro_server.py: a dripping, cut, non-HTTP answer; a counter
that is not a number): before the run, its /server_info refuses the run naming why, its /metrics makes
its evidence "unavailable"; after the run, the summary is always written, as strict JSON.
"""

from __future__ import annotations

import os

import pytest

from tests.support.repro_cli import (
    TINY,
    assert_refused,
    make_run,
    read_json_strict,
    requests_file,
    run_cli,
    tree_digest,
)
from tests.support.repro_server import InjectingServer

# The repro CLI end to end against stand-in servers: a second or two a test, so `make test-fast` leaves
# these out (the whole suite runs them).
pytestmark = pytest.mark.slow

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
    # one number rule for every command (tools/tool_support/arg_types.py): int() and float() take other scripts' digits
    "sessions Arabic-Indic 12": (["--sessions", "\u0661\u0662"], ["--sessions", "ASCII digits", "'\u0661\u0662'"]),
    "rounds full-width 8": (["--rounds", "\uff18"], ["--rounds", "ASCII digits"]),
    "seed superscript 2": (["--seed", "\u00b2"], ["--seed", "ASCII digits"]),
    "concurrency Devanagari 8": (["--concurrency", "8,\u096e"], ["--concurrency", "comma-separated integers"]),
    "temperature Arabic-Indic 1": (["--temperature", "\u0661"], ["--temperature", "ASCII digits"]),
    "repetition full-width": (["--repetition", "\uff18,160,200"], ["--repetition", "MIN_REPEATS,MIN_CHARS,MAX_PERIOD"]),
    "repetition 1,1,1": (["--repetition", "1,1,1"], ["--repetition", "MIN_REPEATS >= 2"]),
    "thinking maybe": (["--thinking", "maybe"], ["--thinking", "on or off"]),
    "extra-body messages": (["--extra-body", '{"messages": []}'], ["--extra-body", "messages", "harness owns"]),
    "extra-body tools": (["--extra-body", '{"tools": []}'], ["--extra-body", "tools", "harness owns"]),
    "extra-body model": (["--extra-body", '{"model": "other"}'], ["--extra-body", "model", "--model"]),
    "extra-body max_tokens": (["--extra-body", '{"max_tokens": 9}'], ["--extra-body", "--max-tokens"]),
    "extra-body seed": (["--extra-body", '{"seed": 1}'], ["--extra-body", "--seed"]),
    "extra-body thinking": (
        ["--extra-body", '{"chat_template_kwargs": {"thinking": true}}'],
        ["--extra-body", "chat_template_kwargs.thinking", "--thinking"],
    ),
    "extra-body a list": (["--extra-body", "[1]"], ["--extra-body", "JSON object"]),
    "extra-body not JSON": (["--extra-body", "{messages"], ["--extra-body", "not JSON"]),
    "extra-body NaN": (["--extra-body", '{"top_p": NaN}'], ["--extra-body", "not JSON: NaN is not a JSON value"]),
    "server-metrics port 99999": (
        ["--server-metrics", "http://127.0.0.1:99999"],
        ["--server-metrics", "http://127.0.0.1:99999", "port must be a number in 1..65535", "'99999'"],
    ),
    "server-metrics port 0": (["--server-metrics", "http://127.0.0.1:0"], ["--server-metrics", "1..65535"]),
    "server-metrics no host": (["--server-metrics", "http://:30000"], ["--server-metrics", "no host"]),
    "server-metrics twice": (
        ["--server-metrics", "http://127.0.0.1:30000,http://127.0.0.1:30000/"],
        ["--server-metrics", "names one server twice", "name each server once"],
    ),
    "endpoint port 99999": (["--endpoint", "http://127.0.0.1:99999"], ["--endpoint", "1..65535"]),
    "detokenize-url port": (["--detokenize-url", "http://127.0.0.1:65536"], ["--detokenize-url", "1..65535"]),
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


def test_ab_refuses_an_endpoint_port_out_of_range(capsys):
    rc, _, err = run_cli(["repro", "ab", "--endpoint-a", "http://127.0.0.1:8000", "--endpoint-b",
                          "http://127.0.0.1:99999", *TINY], capsys)  # fmt: skip
    assert_refused(rc, err, "--endpoint-b", "1..65535")


def test_ab_says_what_it_kept_when_b_is_refused_after_a_ran(tmp_path, capsys):
    """B's /server_info answered when both were checked, then stopped answering HTTP while A ran: the message
    used to be only "refused before sending any request", with A's run written and not mentioned."""
    out = tmp_path / "ab"
    with InjectingServer({}, seed=0) as a, InjectingServer({}, seed=0, server_info_faults=[None, "bad_status"]) as b:
        rc, _, err = run_cli(["repro", "ab", "--endpoint-a", a.url, "--endpoint-b", b.url, "--out", str(out),
                              *TINY], capsys)  # fmt: skip
    assert_refused(
        rc,
        err,
        f"side B ({b.url}): refused before sending any request",
        "not HTTP: bad status line",
        f"Kept: side A's run is kept in {out / 'a'} (8 of 8 requests, its summary written)",
        "nothing was sent to B and no comparison was written",
        f"repro compare {out / 'a'} B_DIR",
    )
    assert a.requests == 8 and b.requests == 0
    assert sorted(os.listdir(out)) == ["a"] and read_json_strict(out / "a" / "summary.json")["requests_done"] == 8


# ----- hostile servers: what the user sees -------------------------------------------------------
# fault of the stand-in (tests/support/repro_server.py) -> the reason its evidence row or the refusal gives
READ_FAULT_ROWS = {
    "drip": "no complete answer within 1 s",
    "truncated": "the body was cut short (",
    "bad_status": "not HTTP: bad status line 'SGLANG 200 OK-ish",
    "long_header": "not HTTP: got more than 65536 bytes when reading header line",
}


@pytest.fixture
def short_reads(monkeypatch):
    """Each server read given 1 s instead of 10 (a dripping answer then ends the read sooner; nothing else)."""
    monkeypatch.setattr("sglang_dsv4_ext.tools.repro.server_http.READ_DEADLINE_S", 1.0)


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("fault", sorted(READ_FAULT_ROWS))
def test_unreadable_metrics_are_unavailable_evidence_and_the_summary_is_written(
    fault, when, short_reads, tmp_path, capsys
):
    """A /metrics cut short after every request finished used to end the run with a traceback and no
    summary.json; a dripping one held the run without end."""
    out = tmp_path / "run"
    faults = [fault] if when == "before" else [None, fault]
    with InjectingServer({}, seed=0, metrics_faults=faults, drip_s=0.5, drip_limit_s=5) as srv:
        rc, printed, err = run_cli(["repro", "run", "--endpoint", srv.url, "--out", str(out), *TINY], capsys)
    assert rc == 0 and "Traceback" not in err, err
    summary = read_json_strict(out / "summary.json")
    assert summary["requests_done"] == summary["requests_planned"] == 8
    [row] = summary["server_evidence"]
    assert row["error"].startswith(f"{srv.url}/metrics: {READ_FAULT_ROWS[fault]}"), row
    assert row["error"].endswith(f"(read {when} the run)") and "aborted_requests" not in row
    assert row["extension"].startswith("active")  # the /server_info read decided, and was fine
    assert f"unavailable: {srv.url}/metrics: {READ_FAULT_ROWS[fault]}" in printed


@pytest.mark.parametrize("fault", sorted(READ_FAULT_ROWS))
def test_unreadable_server_info_refuses_the_run_naming_why(fault, short_reads, tmp_path, capsys):
    out = tmp_path / "run"
    with InjectingServer({}, seed=0, server_info_faults=[fault], drip_s=0.5, drip_limit_s=5) as srv:
        rc, _, err = run_cli(["repro", "run", "--endpoint", srv.url, "--out", str(out), *TINY], capsys)
    assert_refused(rc, err, f"its /server_info could not be read ({srv.url}/server_info: {READ_FAULT_ROWS[fault]}")
    assert not out.exists() and srv.requests == 0


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_counter_that_is_not_a_number_is_null_with_the_reason(when, tmp_path, capsys):
    """NaN counters used to be written into summary.json as NaN, which is not JSON."""
    out = tmp_path / "run"
    faults = ["nan"] if when == "before" else [None, "nan"]
    with InjectingServer({"reset": 0.5}, seed=0, metrics_faults=faults) as srv:
        srv.counters["sglang:num_transfer_failed_reqs"] = 2
        rc, printed, err = run_cli(["repro", "run", "--endpoint", srv.url, "--out", str(out), *TINY], capsys)
    assert rc == 0, err
    [row] = read_json_strict(out / "summary.json")["server_evidence"]
    assert row["aborted_requests"] is None and row["pd_transfer_failed"] == 0  # the other counters still read
    assert row["notes"] == f"aborted_requests: the server reported {when} nan (not a finite number: no delta)"
    assert f"n/a: aborted_requests: the server reported {when} nan" in printed


def test_a_server_info_value_that_is_not_a_number_is_written_as_null_and_said(tmp_path, capsys):
    out = tmp_path / "run"
    with InjectingServer({}, seed=0, server_info_extra={"hicache_ratio": float("nan")}) as srv:
        rc, _, err = run_cli(["repro", "run", "--endpoint", srv.url, "--out", str(out), *TINY], capsys)
        assert_refused(rc, err, f"its /server_info could not be read ({srv.url}/server_info: NaN is not a JSON value")
        rc, _, err = run_cli(["repro", "run", "--endpoint", srv.url, "--out", str(out), *TINY,
                              "--expect-extension", "any"], capsys)  # fmt: skip
    assert rc == 0, err
    summary = read_json_strict(out / "summary.json")
    assert summary["server_info"]["hicache_ratio"] is None and summary["server_info"]["version"] == "stand-in"
    assert summary["not_finite"]["written_as_null"] == ["server_info.hicache_ratio: nan"]
    assert summary["extension"]["servers"][0]["state"] == "unknown"
