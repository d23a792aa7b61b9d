"""The repro harness end to end against a local OpenAI-compatible server (real HTTP on
127.0.0.1, random free port) that injects known failure kinds at known rates."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from sglang_dsv4_ext.errors import ServerActivationError
from sglang_dsv4_ext.tools.cli import main
from sglang_dsv4_ext.tools.repro import rundir
from sglang_dsv4_ext.tools.repro.runner import Runner, format_summary
from sglang_dsv4_ext.tools.repro.settings import RunConfig
from sglang_dsv4_ext.tools.repro.stats import wilson_interval
from tests.support.repro_cli import read_json_strict
from tests.support.repro_server import (
    ABORTING_KINDS,
    CUT_KINDS,
    EXPECTED_STREAM_VERDICT,
    EXPECTED_VERDICT,
    KINDS,
    SHAPE_KINDS,
    TOOL_STEP_ONLY,
    InjectingServer,
)

SMALL = dict(system_prompt_chars=300, tool_result_chars=200)
ALL_FAILURES = {k: 0.055 for k in KINDS if k != "ok"}  # 12 kinds, 66% failing


def _run(url, out, sessions, rounds, concurrency=(16,), seed=3, **kw):
    cfg = RunConfig(
        endpoint=url,
        out=str(out),
        seed=seed,
        sessions=sessions,
        rounds=rounds,
        concurrency=concurrency,
        progress=False,
        **SMALL,
        **kw,
    )
    return Runner(cfg).run()


def _records(out):
    with open(os.path.join(out, rundir.REQUESTS)) as f:
        return [json.loads(line) for line in f]


def _aborted_by(srv) -> int:
    """Requests the stand-in counted as aborted (what a real SGLang's counter would add)."""
    return sum(kind in ABORTING_KINDS for kind in srv.injected.values())


def _expected_rates(rates, n_tool, n_answer):
    """True rate of each verdict class given the injection rates and the step mix."""
    n = n_tool + n_answer
    out = {}
    for kind, rate in rates.items():
        share = n_tool / n if kind in TOOL_STEP_ONLY else 1.0  # tool-step-only kinds are "ok" elsewhere
        out[EXPECTED_VERDICT[kind]] = out.get(EXPECTED_VERDICT[kind], 0.0) + rate * share
    return out


def test_every_injected_class_is_detected_at_its_rate(tmp_path):
    # The client's timeout leaves room for a loaded machine (the suite runs two workers on two cores): a request the
    # server has not yet read when the client gives up has no injected class, and a late one reads as a timeout.
    with InjectingServer(ALL_FAILURES, seed=11, timeout_sleep=5.0) as srv:
        summary = _run(srv.url, tmp_path / "run", sessions=24, rounds=10, concurrency=(24,), request_timeout=2.5)
    records = _records(tmp_path / "run")
    assert summary["requests_done"] == summary["requests_planned"] == len(records) == 480
    # Per request: the verdict is exactly the class that was injected.
    confusion = {}
    for r in records:
        injected = srv.injected[r["prompt_sha256"]]
        confusion.setdefault((injected, r["verdict"]), 0)
        confusion[(injected, r["verdict"])] += 1
    wrong = {k: v for k, v in confusion.items() if EXPECTED_VERDICT[k[0]] != k[1]}
    assert not wrong, wrong
    assert {k for k, _ in confusion} == set(KINDS)  # every kind was exercised
    # Per class: the true injected rate lies inside the measured Wilson 95% interval.
    n_tool = sum(r["step"] == "tool" for r in records)
    truth = _expected_rates(ALL_FAILURES, n_tool, len(records) - n_tool)
    truth["ok"] = 1 - sum(truth.values())
    per_class = summary["overall"]["per_class"]
    for cls, rate in truth.items():
        entry = per_class[cls]
        assert entry["count"] > 0, cls
        assert entry["ci95"] == pytest.approx(list(wilson_interval(entry["count"], 480)))
        assert entry["ci95"][0] <= rate <= entry["ci95"][1], (cls, rate, entry)
    # Failures keep their raw output; the re-parse tells the origin where token ids exist.
    by_injected = {}
    for r in records:
        by_injected.setdefault(srv.injected[r["prompt_sha256"]], []).append(r)
    for r in records:
        if r["verdict"] != "ok":
            assert "raw" in r and "reference" in r
    assert {r["reference"]["origin"] for r in by_injected["swallowed_malformed"]} == {"model_output"}
    assert {r["reference"]["origin"] for r in by_injected["swallowed_ok"]} == {"parser_or_serving"}
    assert {r["reference"]["origin"] for r in by_injected["dsml_in_content"]} == {"parser_or_serving"}
    assert {r["reference"]["origin"] for r in by_injected["malformed_dsml"]} == {"model_output"}
    assert {r["reference"]["origin"] for r in by_injected["reset"] + by_injected["timeout"]} == {"transport"}
    for r in by_injected["swallowed_malformed"]:
        assert r["raw"]["response_token_ids"] and r["reference"]["reference_class"] == "malformed_dsml"
    # Session-level metric (the incident's) and the re-run command are in the summary.
    assert summary["overall"]["sessions_with_corruption"]["n"] == 24
    assert summary["rerun_command"].startswith("sglang-dsv4 repro run --endpoint http://127.0.0.1:")
    assert read_json_strict(tmp_path / "run" / rundir.SUMMARY)["per_level"]["0"]["concurrency"] == 24


def test_transport_failures_are_classified_not_crashes_and_streaming_works(tmp_path):
    rates = {"http_500": 0.25, "reset": 0.25, "timeout": 0.15, "malformed_dsml": 0.1}
    with InjectingServer(rates, seed=2, timeout_sleep=1.0) as srv:
        srv.counters["sglang:num_aborted_requests"] = 40  # earlier traffic: the summary shows the run's delta
        srv.counters["sglang:num_transfer_failed_reqs"] = 3
        summary = _run(srv.url, tmp_path / "s", sessions=8, rounds=5, stream=True, request_timeout=0.5)
    records = _records(tmp_path / "s")
    assert len(records) == 80
    for r in records:
        assert r["verdict"] == EXPECTED_VERDICT[srv.injected[r["prompt_sha256"]]], r
    assert summary["overall"]["per_class"]["http_error"]["count"] > 0
    assert summary["overall"]["per_class"]["timeout"]["count"] > 0
    # The server's side of the same run: its counters' deltas and its extension state.
    [row] = summary["server_evidence"]
    assert row["url"] == srv.url and row["aborted_requests"] == _aborted_by(srv) > 0
    assert row["pd_transfer_failed"] == 0 and row["hicache_backup_tokens"] is None  # not exported: n/a
    assert row["extension"].startswith("active index_k_dtype=bf16 gate=auto")
    assert summary["extension"]["expect"] == "on" and summary["extension"]["servers"][0]["state"] == "active"
    printed = format_summary(summary)
    assert "server evidence" in printed and f"{srv.url}: extension active" in printed
    # The HTML report shows the same rows.
    from sglang_dsv4_ext.tools.report.cli import build_page

    page = build_page([str(tmp_path / "s")])
    assert "aborted_requests" in page and "active index_k_dtype=bf16" in page
    # A dead endpoint: it cannot show the extension, so the default check refuses it before anything is
    # written; recorded only (--expect-extension any), every request is an http_error and the run finishes.
    with InjectingServer({}, seed=0) as dead:
        url = dead.url
    with pytest.raises(ServerActivationError, match="could not be read"):
        _run(url, tmp_path / "dead", sessions=2, rounds=2, request_timeout=2)
    assert not (tmp_path / "dead").exists()
    summary = _run(url, tmp_path / "dead", sessions=2, rounds=2, request_timeout=2, expect_extension="any")
    assert summary["overall"]["per_class"]["http_error"]["count"] == summary["requests_done"] == 8
    assert summary["server_evidence"][0]["error"].startswith(url + "/metrics")
    assert summary["extension"]["servers"][0]["state"] == "unknown"


def test_run_stops_at_its_time_bound(tmp_path):
    with InjectingServer({"reset": 0.2}, seed=0, delay=0.25) as srv:
        srv.counters["sglang:num_aborted_requests"] = 7
        t0 = time.monotonic()
        summary = _run(
            srv.url, tmp_path / "t", sessions=20, rounds=20, concurrency=(4, 20), time_limit=1.5, request_timeout=30
        )
        elapsed = time.monotonic() - t0
    assert summary["stopped_by_time_limit"] is True
    # The server evidence is read after the stop too. Every reset the harness recorded was counted before
    # the server reset the connection; abandoned requests may reach the stand-in after the last read.
    [row] = summary["server_evidence"]
    recorded_resets = summary["overall"]["per_class"]["http_error"]["count"]
    assert 0 < recorded_resets <= row["aborted_requests"] <= _aborted_by(srv)  # the run's delta, not the total
    assert "active" in row["extension"]
    assert elapsed < 1.5 + 2.0, elapsed
    assert 0 < summary["requests_done"] < summary["requests_planned"] == 2 * 20 * 20 * 2
    assert summary["not_run"] == summary["requests_planned"] - summary["requests_done"]
    assert "--time-limit 1.5" in summary["rerun_command"]


def test_ab_detects_an_injected_difference_and_not_a_null_one(tmp_path, capsys):
    base = {"wrong_tool": 0.08, "invalid_arguments": 0.08}
    common = ["--sessions", "20", "--rounds", "6", "--concurrency", "20", "--seed", "9",
              "--system-prompt-chars", "300", "--tool-result-chars", "200", "--no-progress"]  # fmt: skip
    with InjectingServer(dict(base, malformed_dsml=0.15), seed=1) as bad, InjectingServer(base, seed=1) as good:
        rc = main(["repro", "ab", "--endpoint-a", bad.url, "--endpoint-b", good.url, "--label-a", "broken",
                   "--label-b", "fixed", "--out", str(tmp_path / "ab"), "--fail-if-significant", *common])  # fmt: skip
    out = capsys.readouterr().out
    result = read_json_strict(tmp_path / "ab" / rundir.AB)
    assert rc == 3 and result["significant"], out
    assert result["corruption"]["a_only"] > 0 and result["corruption"]["b_only"] == 0
    assert result["per_class"]["malformed_dsml"]["p_value"] < 0.05
    assert "SIGNIFICANT" in out and "A corrupts more" in out

    # Identical servers (independent draws at the same rates): no significant difference.
    runs = []
    for seed in (4, 5):
        with InjectingServer(dict(base, malformed_dsml=0.15), seed=seed) as srv:
            out_dir = tmp_path / f"null{seed}"
            assert main(["repro", "run", "--endpoint", srv.url, "--out", str(out_dir), *common]) == 0
            runs.append(str(out_dir))
    capsys.readouterr()
    assert main(["repro", "compare", *runs, "--json", str(tmp_path / "null.json")]) == 0
    null = json.load(open(tmp_path / "null.json"))
    assert not null["significant"] and null["corruption"]["a_only"] + null["corruption"]["b_only"] > 0
    assert "no significant difference" in capsys.readouterr().out

    # Runs made with different settings are refused, not compared unpaired.
    with InjectingServer({}, seed=0) as srv:
        other = tmp_path / "other"
        argv = [
            "repro",
            "run",
            "--endpoint",
            srv.url,
            "--out",
            str(other),
            *common[:-1],
            "--seed",
            "10",
            "--no-progress",
        ]
        assert main(argv) == 0
    capsys.readouterr()
    assert main(["repro", "compare", runs[0], str(other)]) == 2
    assert "--seed: A 9, B 10" in capsys.readouterr().err
    # Told to compare them anyway: the prompts differ, so there is nothing to pair.
    assert main(["repro", "compare", runs[0], str(other), "--allow-different-settings"]) == 2
    assert "different prompts" in capsys.readouterr().err


def test_offline_reparse_and_rerun_command(tmp_path, capsys):
    rates = {"swallowed_malformed": 0.3, "swallowed_ok": 0.3}
    with InjectingServer(rates, seed=8) as srv:
        summary = _run(srv.url, tmp_path / "r", sessions=4, rounds=4, concurrency=(4,), token_ids=True,
                       detokenize_url="http://127.0.0.1:9/unreachable")  # fmt: skip
        assert summary["detokenize"].startswith("unavailable")  # inline decode failed: origins unknown
        origins = {r["reference"]["origin"] for r in _records(tmp_path / "r") if r["verdict"] != "ok"}
        assert origins == {"unknown"}
        assert main(["repro", "reparse", str(tmp_path / "r"), "--detokenize-url", srv.url]) == 0
    reparsed = [json.loads(line) for line in open(tmp_path / "r" / rundir.REPARSED)]
    for r in reparsed:
        if r["verdict"] != "ok":
            kind = srv.injected[r["prompt_sha256"]]
            want = {"swallowed_malformed": "model_output", "swallowed_ok": "parser_or_serving"}[kind]
            assert r["reference"]["origin"] == want
    assert "parser_or_serving" in capsys.readouterr().out
    # The recorded re-run command is accepted by the CLI parser as is.
    import shlex

    from sglang_dsv4_ext.tools.cli import build_parser

    argv = shlex.split(summary["rerun_command"])[1:]
    args = build_parser(argv).parse_args(argv)
    assert args.sessions == 4 and args.rounds == 4 and args.concurrency == (4,) and args.seed == 3


def test_replies_of_the_wrong_shape_become_verdicts_and_the_run_completes(tmp_path):
    """One bad reply used to end the run with an AttributeError and no summary."""
    rates = {k: 0.1 for k in SHAPE_KINDS}
    rates["malformed_dsml"] = 0.2
    for stream in (False, True):
        out = tmp_path / f"shapes-stream{stream}"
        with InjectingServer(rates, seed=4) as srv:
            summary = _run(srv.url, out, sessions=6, rounds=4, concurrency=(6,), stream=stream)
        records = _records(out)
        assert summary["requests_done"] == summary["requests_planned"] == len(records) == 48
        injected = {srv.injected[r["prompt_sha256"]] for r in records}
        assert set(SHAPE_KINDS) <= injected, injected  # every shape was sent
        for r in records:
            assert r["verdict"] == EXPECTED_VERDICT[srv.injected[r["prompt_sha256"]]], r
        # Like http_error: counted, and left out of the corruption rate's denominator.
        n_protocol = summary["overall"]["per_class"]["protocol_error"]["count"]
        assert n_protocol > 0 and summary["overall"]["corruption"]["n"] == 48 - n_protocol


def test_a_cut_stream_is_a_transport_failure_with_its_partial_output_kept(tmp_path):
    """A stream the server cuts used to be judged from its partial text: half the arguments of a
    correct call were invalid_arguments (counted as corruption), half an answer was ok."""
    rates = {"cut_stream": 0.2, "cut_stream_chunked": 0.2, "done_without_finish": 0.2, "no_done": 0.2}
    by_mode = {}
    for stream, expected in ((True, EXPECTED_STREAM_VERDICT), (False, EXPECTED_VERDICT)):
        out = tmp_path / f"cut-stream{stream}"
        with InjectingServer(rates, seed=6) as srv:
            summary = _run(srv.url, out, sessions=6, rounds=4, concurrency=(6,), stream=stream)
        records = by_mode[stream] = _records(out)
        assert summary["requests_done"] == summary["requests_planned"] == len(records) == 48
        assert {srv.injected[r["prompt_sha256"]] for r in records} >= set(CUT_KINDS)  # every cut was sent
        for r in records:
            assert r["verdict"] == expected[srv.injected[r["prompt_sha256"]]], r
        per_class = summary["overall"]["per_class"]
        assert summary["overall"]["corruption"]["count"] == 0  # every reply was correct as far as it went
        excluded = sum(per_class[c]["count"] for c in summary["transport_classes"])
        assert excluded > 0 and summary["overall"]["corruption"]["n"] == 48 - excluded
    # Streaming: the partial output is the evidence, kept in the record; a finished choice without
    # [DONE] is judged and says how it ended.
    stream_cut = [r for r in by_mode[True] if r["verdict"] == "stream_cut"]
    cut = [r for r in stream_cut if "without [DONE]" in r["detail"]]
    tool_cut = [r for r in cut if r["step"] == "tool"]
    answer_cut = [r for r in cut if r["step"] == "answer"]
    assert tool_cut and answer_cut
    for r in tool_cut:
        [call] = r["raw"]["tool_calls"]
        assert call["name"] == r["expected_tool"] and 0 < len(call["arguments"]) < len(json.dumps(r["expected_args"]))
        assert "before any chunk carried a finish_reason" in r["detail"] and r["reference"]["origin"] == "transport"
    # [DONE] without a finish_reason: every delta arrived, and still the choice never said it ended.
    assert any("stream ended with [DONE] before" in r["detail"] for r in stream_cut)
    assert all(r["raw"]["content"].startswith("Done: ") for r in answer_cut)
    no_done = [r for r in by_mode[True] if "stream_note" in r]
    assert no_done and all(r["verdict"] == "ok" and "no [DONE]" in r["stream_note"] for r in no_done)
    stream_summary = read_json_strict(tmp_path / "cut-streamTrue" / rundir.SUMMARY)
    assert stream_summary["streams_without_done"] == len(no_done)
    assert "stream_cut" in stream_summary["transport_classes"]


def test_model_list_of_the_wrong_shape_falls_back_and_says_so(tmp_path, capsys):
    with InjectingServer({}, seed=0, models_reply=[{"id": "a-list"}]) as srv:
        rc = main(["repro", "run", "--endpoint", srv.url, "--out", str(tmp_path / "m"), "--sessions", "2",
                   "--rounds", "1", "--no-progress"])  # fmt: skip
    assert rc == 0
    summary = read_json_strict(tmp_path / "m" / "summary.json")
    assert summary["requests_done"] == 4 and summary["model"] == "default"
    assert "not a model list" in summary["model_note"] and "not a model list" in capsys.readouterr().err


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LADDER = ["--sessions", "4", "--rounds", "20", "--concurrency", "2,4", "--system-prompt-chars", "200",
          "--tool-result-chars", "100", "--no-progress"]  # fmt: skip  # 320 requests
TINY_RUN = ["--sessions", "2", "--rounds", "2", "--concurrency", "2", "--system-prompt-chars", "200",
            "--tool-result-chars", "100", "--no-progress"]  # fmt: skip  # 8 requests


class _Child:
    """``sglang-dsv4 repro run`` in a process of its own, started with the signal dispositions the test
    exercises (tests/support/repro_run_driver.py), however this test run was started (nohup, a background job)."""

    def __init__(self, url, out, workload, default=(), ignored=(), command=None):
        command = command or ["repro", "run", "--endpoint", url, "--out", str(out), *workload]
        argv = [sys.executable, "-m", "tests.support.repro_run_driver", "--default-signals", ",".join(default),
                "--ignored-signals", ",".join(ignored), "--", *command]  # fmt: skip
        self.proc = subprocess.Popen(
            argv,
            env=dict(os.environ, PYTHONPATH=ROOT),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def wait_for(self, condition, what: str) -> None:
        deadline = time.monotonic() + 60
        while not condition():
            assert self.proc.poll() is None, (what, self.proc.communicate())
            assert time.monotonic() < deadline, f"never happened: {what}"
            time.sleep(0.05)

    def stop(self, signame: str):
        self.proc.send_signal(getattr(signal, signame))
        return self.finish()

    def finish(self):
        try:
            stdout, stderr = self.proc.communicate(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode, stdout, stderr


def _recorded(out) -> int:
    return len(_records(out)) if (out / "requests.jsonl").exists() else 0


@pytest.mark.parametrize("signame, code", [("SIGINT", 130), ("SIGTERM", 143), ("SIGHUP", 129)])
def test_a_signal_flushes_the_records_and_writes_an_interrupted_summary(signame, code, tmp_path):
    """SIGHUP (a dropped SSH session) used to end the run with 129 and no summary.json."""
    out = tmp_path / "sig"
    with InjectingServer({"malformed_dsml": 0.3}, seed=2, delay=0.05) as srv:
        child = _Child(srv.url, out, LADDER, default=[signame])
        child.wait_for(lambda: _recorded(out) >= 12, "12 requests recorded")
        rc, stdout, stderr = child.stop(signame)
    assert rc == code, stderr
    assert "Traceback" not in stderr and "Task was destroyed" not in stderr, stderr
    summary = read_json_strict(out / "summary.json")
    records = _records(out)
    assert summary["interrupted"] is True and summary["interrupted_by"] == signame
    assert summary["requests_planned"] == 2 * 4 * 20 * 2  # both levels, as planned
    assert 12 <= summary["requests_done"] == len(records) < summary["requests_planned"]
    assert summary["not_run"] == summary["requests_planned"] - len(records)
    assert f"interrupted by {signame}" in stdout and f"{len(records)}/320" in stdout
    [row] = summary["server_evidence"]  # read after the signal too
    assert row["url"] == srv.url and row["aborted_requests"] == 0 and row["extension"].startswith("active")
    assert "server evidence" in stdout
    # reparse accepts the directory; a comparison would say first that it did not finish.
    assert main(["repro", "reparse", str(out)]) == 0
    from sglang_dsv4_ext.tools.repro.pairing import incomplete

    n = len(records)
    assert incomplete(summary) == f"interrupted by {signame}: {n} of 320 requests run, {320 - n} not run"


def test_a_signal_ignored_at_start_stays_ignored(tmp_path):
    """As under nohup: SIGHUP is ignored, the run goes on; SIGTERM then stops it with the summary."""
    out = tmp_path / "nohup"
    with InjectingServer({}, seed=2, delay=0.05) as srv:
        child = _Child(srv.url, out, LADDER, default=["SIGTERM"], ignored=["SIGHUP"])
        child.wait_for(lambda: _recorded(out) >= 4, "4 requests recorded")
        child.proc.send_signal(signal.SIGHUP)
        seen = _recorded(out)
        child.wait_for(lambda: _recorded(out) >= seen + 8, "8 more requests after SIGHUP")
        rc, _, stderr = child.stop("SIGTERM")
    assert rc == 143, stderr
    summary = read_json_strict(out / "summary.json")
    assert summary["interrupted_by"] == "SIGTERM" and "SIGHUP" not in stderr


@pytest.mark.parametrize("signame, code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_signal_during_the_read_after_the_run_still_writes_the_summary(signame, code, tmp_path):
    """Every request finished, then the server's /metrics dripped: the run used to wait on it without end, and a
    signal then left no summary.json (SIGINT: a KeyboardInterrupt traceback)."""
    out = tmp_path / "after"
    with InjectingServer({}, seed=2, metrics_faults=[None, "drip"], drip_s=0.5, drip_limit_s=120) as srv:
        child = _Child(srv.url, out, TINY_RUN, default=[signame])
        child.wait_for(lambda: srv.metrics_gets == 2, "the read after the run began")
        rc, stdout, stderr = child.stop(signame)
    assert rc == code, stderr
    assert "Traceback" not in stderr, stderr
    summary = read_json_strict(out / "summary.json")
    assert summary["requests_done"] == summary["requests_planned"] == 8 and summary["interrupted"] is False
    [row] = summary["server_evidence"]
    assert row["error"] == f"{srv.url}/metrics: the read was given up at {signame} (read after the run)"
    assert "aborted_requests" not in row and f"unavailable: {srv.url}/metrics: the read was given up" in stdout


def test_a_signal_during_the_read_before_the_run_writes_nothing(tmp_path):
    """A dripping /metrics before the first request: Ctrl-C used to end it with a KeyboardInterrupt traceback."""
    out = tmp_path / "before"
    with InjectingServer({}, seed=2, metrics_faults=["drip"], drip_s=0.5, drip_limit_s=120) as srv:
        child = _Child(srv.url, out, TINY_RUN, default=["SIGINT"])
        child.wait_for(lambda: srv.metrics_gets == 1, "the read before the run began")
        rc, _, stderr = child.stop("SIGINT")
    assert rc == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert "repro run: stopped by SIGINT before the first request: nothing was sent or written" in stderr
    assert not out.exists() and srv.requests == 0


def test_ab_stopped_before_b_says_what_it_kept(tmp_path):
    """Ctrl-C while B's /metrics dripped before B's first request: A had run and written its run."""
    out = tmp_path / "ab"
    with (
        InjectingServer({}, seed=0) as a,
        InjectingServer({}, seed=0, metrics_faults=[None, "drip"], drip_s=0.5, drip_limit_s=120) as b,
    ):
        command = ["repro", "ab", "--endpoint-a", a.url, "--endpoint-b", b.url, "--out", str(out), *TINY_RUN]
        child = _Child(None, None, None, default=["SIGINT"], command=command)
        child.wait_for(lambda: b.metrics_gets == 2, "B's own read before its first request began")
        rc, _, stderr = child.stop("SIGINT")
    assert rc == 130 and "Traceback" not in stderr, stderr
    assert (
        f"repro ab: stopped by SIGINT before side B's first request: side A's run is kept in {out / 'a'} "
        "(8 of 8 requests, its summary written); nothing was sent to B"
    ) in stderr
    assert a.requests == 8 and b.requests == 0 and sorted(os.listdir(out)) == ["a"]


def test_a_bug_mid_run_still_leaves_the_records_and_a_summary(tmp_path, monkeypatch):
    """Not a request failure (those are verdicts) but a defect: the evidence so far is kept, the error raised."""
    from sglang_dsv4_ext.tools.repro import runner as runner_module

    real = runner_module.classify
    calls = []

    def classify_then_break(*args, **kwargs):
        calls.append(1)
        if len(calls) == 6:
            raise RuntimeError("injected defect")
        return real(*args, **kwargs)

    monkeypatch.setattr(runner_module, "classify", classify_then_break)
    with InjectingServer({}, seed=0) as srv, pytest.raises(RuntimeError, match="injected defect"):
        _run(srv.url, tmp_path / "bug", sessions=1, rounds=6, concurrency=(1,))
    summary = read_json_strict(tmp_path / "bug" / "summary.json")
    assert summary["aborted_by"] == "RuntimeError: injected defect"
    assert summary["requests_done"] == len(_records(tmp_path / "bug")) == 5
    assert summary["not_run"] == 12 - 5
