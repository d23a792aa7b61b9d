"""`repro run --expect-extension / --server-metrics / --serve-logs` through the real CLI, against the
loopback stand-in server (tests/support/repro_server.py), which answers like SGLang: ``/server_info`` with
the schedulers' activation records (the live evidence, runtime/hooks/evidence.py) and ``/metrics`` rendered by
prometheus_client with the extension's gauge. A refusal must come before any chat request (the stand-in
counts them) and before the run directory exists. Logs are written as `sglang-dsv4 serve` writes them,
with the real activation line (sglang_dsv4_ext.runtime.activation.activation_line).
"""

from __future__ import annotations

import json
import os

import pytest

from sglang_dsv4_ext.config import load_config
from sglang_dsv4_ext.runtime import activation
from sglang_dsv4_ext.tools.repro import extension_check
from sglang_dsv4_ext.tools.serving import activation_check
from sglang_dsv4_ext.tools.serving.launch_plan import ChildSpec
from sglang_dsv4_ext.tools.serving.supervise import start_header
from tests.support.repro_cli import TINY, assert_refused, run_cli
from tests.support.repro_server import ACTIVE_BF16, InjectingServer

# The repro CLI end to end against stand-in servers: a second or two a test, so `make test-fast` leaves
# these out (the whole suite runs them).
pytestmark = pytest.mark.slow

FP8 = dict(ACTIVE_BF16, index_k_dtype="fp8", index_k_dtype_requested="fp8")
STALE_FP8 = dict(FP8, launch="999@1700000000.00", process="1000@1700000001.00")  # an earlier launch


@pytest.fixture(autouse=True)
def _sglang_version_read(monkeypatch):
    """As after the entry point ran (it reads SGLang's version): the real line then names it."""
    monkeypatch.setattr(activation.STATE, "sglang_version", "0.5.23")


def _run(capsys, url, out, *extra):
    return run_cli(["repro", "run", "--endpoint", url, "--out", str(out), *TINY, *extra], capsys)


def _summary(out) -> dict:
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f)


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _line_fields() -> dict:
    """The fields of this process's real activation line (bf16): what a live record of that launch carries."""
    line = activation.activation_line(load_config({"SGLANG_DSV4_INDEX_K_DTYPE": "bf16"}))
    return activation_check.activation_fields(line)


def _write_serve_log(
    log_dir,
    name: str,
    port: int,
    activation_line: bool,
    args=None,
    line=None,
    module=None,
    after=("[2026-12-01 12:00:09] The server is fired up and ready to roll!",),
) -> str:
    """A child's log as `sglang-dsv4 serve` writes it: serve's start header, then the child's output."""
    args = args or ["--model-path", "m", "--host", "127.0.0.1",
                    "--port", str(port)]  # fmt: skip
    spec = ChildSpec(
        name=name,
        role="prefill",
        python="python",
        module=module or "sglang.launch_server",
        args=args,
        env={"SGLANG_DSV4_INDEX_K_DTYPE": "bf16"},
        health_url=None,
    )
    lines = [start_header(spec), "[2026-12-01 12:00:00] server_args=...\n"]
    if activation_line:
        lines.append((line or activation.activation_line(load_config({"SGLANG_DSV4_INDEX_K_DTYPE": "bf16"}))) + "\n")
    lines += [f"{text}\n" for text in after]
    path = os.path.join(log_dir, f"{name}.log")
    with open(path, "w") as f:
        f.writelines(lines)
    return path


@pytest.mark.parametrize("server, fragments", [
    # its schedulers answer without a record: a stock server (the gauge is absent too)
    (dict(extension=[]), ["no sglang-dsv4-ext record", "SGLANG_PLUGINS", "--expect-extension off"]),
    # /server_info unreadable: the gauge alone (here a perfect one) cannot show the server answering now
    (dict(server_info=False), ["/server_info could not be read", "--server-metrics", "cannot show it alone"]),
])  # fmt: skip
def test_a_server_not_shown_active_now_is_refused_before_any_request(server, fragments, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with InjectingServer({}, **server) as srv:
        for out_flags in (["--out", str(tmp_path / "run")], []):  # named, and the default repro-runs/<time>
            rc, _, err = run_cli(["repro", "run", "--endpoint", srv.url, *out_flags, *TINY], capsys)
            assert_refused(rc, err, srv.url, *fragments, "--expect-extension any")
            assert len(err.strip().splitlines()) == 1  # one paragraph
        assert srv.requests == 0
    assert os.listdir(tmp_path) == []  # neither directory was created


def test_expect_any_records_a_server_without_the_extension(tmp_path, capsys):
    with InjectingServer({}, extension=[]) as srv:
        rc, out, err = _run(capsys, srv.url, tmp_path / "run", "--expect-extension", "any")
    assert rc == 0, err
    summary = _summary(tmp_path / "run")
    [state] = summary["extension"]["servers"]
    assert summary["extension"]["expect"] == "any" and state["state"] == "inactive" and state["source"] is None
    assert summary["server_evidence"][0]["extension"].startswith("inactive: its schedulers' /server_info has no")
    assert "--expect-extension any" in summary["rerun_command"] and "extension inactive" in out


def test_a_stock_server_never_passes_whatever_its_metrics_and_logs_show(tmp_path, capsys):
    """Found by review: a gauge and a log left by an earlier launch passed a later stock server."""
    logs = tmp_path / "serve-logs"
    logs.mkdir()
    earlier = _line_fields()
    with InjectingServer({}, extension=[earlier], records=[None], metrics=True) as srv:
        _write_serve_log(logs, "prefill-0", _port(srv.url), activation_line=True)
        rc, _, err = _run(capsys, srv.url, tmp_path / "run", "--serve-logs", str(logs))
        assert_refused(
            rc,
            err,
            srv.url,
            "no sglang-dsv4-ext record",
            f"ignored sglang:dsv4_ext_active of launch {earlier['launch']}",
            "nothing ties that launch to the server answering now",
        )
        assert srv.requests == 0
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("gauge", [
    {},  # a sample without labels
    {k: ACTIVE_BF16[k] for k in activation.CONFIG_FIELDS},  # the 0.3.0 label set: no launch, pid, start time
], ids=["label-less", "without-launch-labels"])  # fmt: skip
def test_a_gauge_without_the_full_label_set_never_counts(gauge, tmp_path, capsys):
    """Found by review: a label-less `sglang:dsv4_ext_active 1` passed, and passed the dtype agreement."""
    with InjectingServer({}) as prefill, InjectingServer({}, extension=[gauge], server_info=False) as decode:
        rc, _, err = _run(capsys, prefill.url, tmp_path / "run", "--server-metrics", f"{prefill.url},{decode.url}")
        assert_refused(
            rc,
            err,
            decode.url,
            "/server_info could not be read",
            "ignored 1 sglang:dsv4_ext_active sample(s) without the labels",
        )
        assert prefill.requests == decode.requests == 0


def test_stale_label_sets_are_ignored_and_the_live_launch_decides(tmp_path, capsys):
    """A shared PROMETHEUS_MULTIPROC_DIR: an earlier fp8 launch's gauge beside the live bf16 one."""
    with InjectingServer({}, extension=[ACTIVE_BF16, STALE_FP8]) as srv:
        rc, _, err = _run(capsys, srv.url, tmp_path / "run")
        assert rc == 0, err  # the stale fp8 set neither fails the dtype agreement nor counts
    [state] = _summary(tmp_path / "run")["extension"]["servers"]
    assert state["state"] == "active" and state["source"] == "server_info"
    assert [ls["index_k_dtype"] for ls in state["label_sets"]] == ["bf16"]
    assert f"ignored sglang:dsv4_ext_active of launch {STALE_FP8['launch']}" in state["notes"][0]
    assert "shows this launch in 1 process(es)" in state["notes"][0]


def test_a_scheduler_not_active_on_one_dp_rank_is_refused(tmp_path, capsys):
    reason = "no DeepSeek-V4 model or pool was built with the extension verified in this process"
    with InjectingServer({}, records=[dict(ACTIVE_BF16, active=True), {"active": False, "reason": reason}]) as srv:
        rc, _, err = _run(capsys, srv.url, tmp_path / "run")
        assert_refused(rc, err, "not active in every scheduler: DP rank 1: " + reason)
        assert srv.requests == 0


@pytest.mark.parametrize("field, value", [("launch", ["4242@1764590000.00"]), ("index_k_dtype", {"bf16": True})])
def test_a_record_whose_fields_are_not_strings_is_unknown_not_a_traceback(field, value, tmp_path, capsys):
    """A list as ``launch`` used to end the check with a TypeError (unhashable) traceback."""
    with InjectingServer({}, records=[dict(ACTIVE_BF16, active=True, **{field: value})]) as srv:
        rc, _, err = _run(capsys, srv.url, tmp_path / "run")
        assert_refused(rc, err, "a scheduler's record lacks some of", "(or one is not a string)")
        assert srv.requests == 0 and not (tmp_path / "run").exists()


def test_serve_logs_of_the_live_launch_are_noted_and_never_decide_alone(tmp_path, capsys):
    logs = tmp_path / "serve-logs"
    logs.mkdir()
    (logs / "serve.log").write_text("supervisor messages\n")
    live = _line_fields()
    with InjectingServer({}, extension=[live], metrics=False) as srv:
        port = _port(srv.url)
        # Another server and the router in the same directory: only the log of the URL's port is read.
        _write_serve_log(logs, "decode-0", port + 1, activation_line=False)
        _write_serve_log(
            logs,
            "router",
            port + 2,
            activation_line=False,
            module="sglang_router.launch_router",
            args=["--port", str(port)],
        )
        path = _write_serve_log(logs, "prefill-0", port, activation_line=True)
        rc, _, err = _run(capsys, srv.url, tmp_path / "run", "--serve-logs", str(logs))
        assert rc == 0, err
        assert srv.requests == 8
    [state] = _summary(tmp_path / "run")["extension"]["servers"]
    assert state["state"] == "active" and state["source"] == "server_info"
    assert state["label_sets"][0]["launch"] == live["launch"]
    assert state["notes"] == [f"its log {path} shows the same launch active"]
    # The same log, but the server's /server_info cannot be read: the log alone decides nothing.
    with InjectingServer({}, extension=[live], metrics=False, server_info=False) as srv:
        _write_serve_log(logs, "prefill-0", _port(srv.url), activation_line=True)
        rc, _, err = _run(capsys, srv.url, tmp_path / "run2", "--serve-logs", str(logs))
        assert_refused(rc, err, "/server_info could not be read", "nothing ties that launch")
        assert srv.requests == 0


_OLD_LINE = (
    "sglang-dsv4-ext active: version=0.1.0 sglang=0.5.23 index_k_dtype=bf16 gate=auto fp4_budget=exact "
    "integrity=off pid=4243"
)


@pytest.mark.parametrize("log, reason", [
    # an earlier release's line: no launch identity
    (dict(line=_OLD_LINE), "without index_k_dtype_requested, launch, process"),
    # this release's fields, another release's version
    (dict(line="VERSION"), "of sglang-dsv4-ext 0.1.0, not of this one"),
    # the start ended: serve's end-of-output line after the server's exit
    (dict(after=("[2026-12-01 12:30:00] Shutting down", "# end of output 2026-12-01 12:30:01: prefill-0 closed "
                 "its output (exited)")), "the current start ended"),
    # another launch of this release
    (dict(line="LAUNCH"), "not of the server's launch"),
], ids=["0.1.0-line", "other-version", "exited", "other-launch"])  # fmt: skip
def test_a_log_that_is_not_of_the_live_launch_is_not_evidence(log, reason, tmp_path, capsys):
    logs = tmp_path / "serve-logs"
    logs.mkdir()
    live = _line_fields()
    real = activation.activation_line(load_config({"SGLANG_DSV4_INDEX_K_DTYPE": "bf16"}))
    line = {
        "VERSION": real.replace(f"version={live['version']}", "version=0.1.0"),
        "LAUNCH": real.replace(f"launch={live['launch']}", "launch=999@1577836800.00"),
    }.get(log.get("line"), log.get("line"))
    with InjectingServer({}, extension=[live], metrics=False) as srv:
        path = _write_serve_log(
            logs,
            "prefill-0",
            _port(srv.url),
            activation_line=True,
            line=line,
            **{k: v for k, v in log.items() if k == "after"},
        )
        rc, _, err = _run(capsys, srv.url, tmp_path / "run", "--serve-logs", str(logs))
        assert rc == 0, err  # the live records decide: the server answering now is active
    [state] = _summary(tmp_path / "run")["extension"]["servers"]
    [note] = state["notes"]
    assert note.startswith(f"its log is not evidence of the server answering now: {srv.url}: {path}")
    assert reason in note


def test_expect_off_refuses_an_active_server_and_accepts_a_stock_one(tmp_path, capsys):
    with InjectingServer({}) as active:
        rc, _, err = _run(capsys, active.url, tmp_path / "run", "--expect-extension", "off")
        assert_refused(rc, err, "--expect-extension off", active.url, "index_k_dtype=bf16", "SGLANG_DSV4_EXT=0")
        assert active.requests == 0
    assert not (tmp_path / "run").exists()
    with InjectingServer({}, extension=[STALE_FP8], records=[None]) as stock:  # a stale gauge does not make it active
        rc, _, err = _run(capsys, stock.url, tmp_path / "run", "--expect-extension", "off")
        assert rc == 0, err
    assert _summary(tmp_path / "run")["extension"]["servers"][0]["state"] == "inactive"


def test_servers_that_disagree_on_the_index_k_dtype_are_refused(tmp_path, capsys):
    with InjectingServer({}) as prefill, InjectingServer({}, extension=[FP8]) as decode, \
            InjectingServer({}) as decode_bf16:  # fmt: skip
        rc, _, err = _run(capsys, prefill.url, tmp_path / "run", "--server-metrics", f"{prefill.url},{decode.url}")
        assert_refused(rc, err, "disagree on index_k_dtype", f"{prefill.url}: bf16", f"{decode.url}: fp8")
        assert prefill.requests == decode.requests == 0
        assert not (tmp_path / "run").exists()
        # Both bf16: the run goes ahead and the summary has one evidence row per named server.
        decode_bf16.counters["sglang:num_transfer_failed_reqs"] = 2
        rc, out, err = _run(capsys, prefill.url, tmp_path / "run", "--server-metrics",
                            f"{prefill.url},{decode_bf16.url}")  # fmt: skip
        assert rc == 0, err
    rows = _summary(tmp_path / "run")["server_evidence"]
    assert [r["url"] for r in rows] == [prefill.url, decode_bf16.url]
    assert rows[1]["pd_transfer_failed"] == 0 and rows[1]["aborted_requests"] == 0  # deltas, not totals
    assert all(r["extension"].startswith("active index_k_dtype=bf16") for r in rows)
    assert decode_bf16.url in out


@pytest.mark.parametrize("flags, fragments", [
    (["--server-metrics", "http://127.0.0.1:1,10.0.0.2:30000"], ["--server-metrics", "http://", "10.0.0.2:30000"]),
    (["--serve-logs", "/no/such/serve-logs"], ["--serve-logs", "existing directory", "/no/such/serve-logs"]),
    (["--expect-extension", "yes"], ["--expect-extension", "on, off, any", "'yes'"]),
])  # fmt: skip
def test_bad_values_are_refused_naming_the_flag(flags, fragments, tmp_path, capsys):
    with InjectingServer({}) as srv:
        rc, _, err = _run(capsys, srv.url, tmp_path / "run", *flags)
        assert_refused(rc, err, *fragments)
        assert srv.requests == 0
    assert not (tmp_path / "run").exists()


def test_ab_checks_both_stacks_before_anything_and_refuses_server_metrics(tmp_path, capsys):
    with InjectingServer({}) as a, InjectingServer({}, extension=[]) as b:
        base = ["repro", "ab", "--endpoint-a", a.url, "--endpoint-b", b.url, "--out", str(tmp_path / "ab"), *TINY]
        rc, _, err = run_cli(base, capsys)
        assert_refused(rc, err, b.url, "no sglang-dsv4-ext record")
        rc, _, err = run_cli([*base, "--server-metrics", a.url], capsys)
        assert_refused(rc, err, "--server-metrics names one stack's servers", "--server-metrics-a / --server-metrics-b")
        assert a.requests == b.requests == 0
    assert not (tmp_path / "ab").exists()


def test_server_logs_prefers_the_urls_host_when_nodes_share_a_directory(tmp_path):
    """Multi-node stacks with one log directory: two servers on the same port, told apart by --host."""
    args = ["--port", "30000", "--host"]
    a = _write_serve_log(tmp_path, "prefill-0", 30000, True, args=args + ["10.0.0.1"])
    b = _write_serve_log(tmp_path, "prefill-1", 30000, True, args=args + ["10.0.0.2"])
    assert extension_check.server_logs(str(tmp_path), "http://10.0.0.2:30000") == [b]
    assert extension_check.server_logs(str(tmp_path), "http://10.0.0.1:30000/") == [a]
    state = extension_check.server_state(
        {"url": "http://node:30000", "error": "x"}, str(tmp_path), live={"url": "http://node:30000", "error": "x"}
    )
    assert state["state"] == "unknown" and "several logs in" in state["notes"][0]
    assert "prefill-0.log, prefill-1.log" in state["notes"][0]
