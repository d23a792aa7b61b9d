"""`repro run --expect-extension / --server-metrics / --serve-logs` through the real CLI, against the
loopback stand-in server (tests/support/repro_server.py), which exports Prometheus text with
prometheus_client like SGLang with --enable-metrics, the extension's gauge included unless a test
leaves it out. A refusal must come before any chat request (the stand-in counts them) and before
the run directory exists."""

from __future__ import annotations

import json
import os

import pytest

from sglang_dsv4_ext.activation import activation_line
from sglang_dsv4_ext.config import load_config
from sglang_dsv4_ext.repro import extension_check
from sglang_dsv4_ext.serving.launch_plan import ChildSpec
from sglang_dsv4_ext.serving.supervise import start_header
from tests.support.repro_cli import TINY, assert_refused, run_cli
from tests.support.repro_server import ACTIVE_BF16, InjectingServer

FP8 = dict(ACTIVE_BF16, index_k_dtype="fp8")


def _run(capsys, url, out, *extra):
    return run_cli(["repro", "run", "--endpoint", url, "--out", str(out), *TINY, *extra], capsys)


def _summary(out) -> dict:
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f)


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _write_serve_log(log_dir, name: str, port: int, activation: bool, argv=None) -> str:
    """A child's log as `sglang-dsv4 serve` writes it: serve's start header, then the child's output."""
    argv = argv or ["python", "-m", "sglang.launch_server", "--model-path", "m", "--host", "127.0.0.1",
                    "--port", str(port)]  # fmt: skip
    spec = ChildSpec(name=name, role="prefill", argv=argv, env={"SGLANG_DSV4_INDEX_K_DTYPE": "bf16"}, health_url=None)
    cfg = load_config({"SGLANG_DSV4_INDEX_K_DTYPE": "bf16"})
    lines = [start_header(spec), "[2026-12-01 12:00:00] server_args=...\n"]
    if activation:
        lines.append(activation_line(cfg) + "\n")
    lines.append("[2026-12-01 12:00:09] The server is fired up and ready to roll!\n")
    path = os.path.join(log_dir, f"{name}.log")
    with open(path, "w") as f:
        f.writelines(lines)
    return path


@pytest.mark.parametrize("metrics, fragments", [
    # metrics on, no gauge: the extension is not active there
    (True, ["no sglang:dsv4_ext_active", "SGLANG_PLUGINS", "--expect-extension off"]),
    # metrics off: nothing shows the state
    (False, ["could not be read", "--enable-metrics", "--serve-logs", "--server-metrics"]),
])  # fmt: skip
def test_a_server_without_the_gauge_is_refused_before_any_request(metrics, fragments, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with InjectingServer({}, extension=[], metrics=metrics) as srv:
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
    assert summary["extension"]["expect"] == "any" and state["state"] == "inactive" and state["source"] == "metrics"
    assert summary["server_evidence"][0]["extension"].startswith("inactive: its /metrics has SGLang's metrics")
    assert "--expect-extension any" in summary["rerun_command"] and "extension inactive" in out


def test_serve_logs_activation_line_counts_when_metrics_are_off(tmp_path, capsys):
    logs = tmp_path / "serve-logs"
    logs.mkdir()
    (logs / "serve.log").write_text("supervisor messages\n")
    with InjectingServer({}, metrics=False) as srv:
        port = _port(srv.url)
        # Another server and the router in the same directory: only the log of the URL's port is read.
        _write_serve_log(logs, "decode-0", port + 1, activation=False)
        _write_serve_log(logs, "router", port + 2, activation=False,
                         argv=["python", "-m", "sglang_router.launch_router", "--port", str(port)])
        path = _write_serve_log(logs, "prefill-0", port, activation=True)
        rc, _, err = _run(capsys, srv.url, tmp_path / "run", "--serve-logs", str(logs))
        assert rc == 0, err
        assert srv.requests == 8
    [state] = _summary(tmp_path / "run")["extension"]["servers"]
    assert state["state"] == "active" and state["source"] == f"serve-log:{path}"
    assert state["label_sets"][0]["index_k_dtype"] == "bf16"


def test_serve_logs_without_the_line_is_refused_naming_the_log(tmp_path, capsys):
    logs = tmp_path / "serve-logs"
    logs.mkdir()
    with InjectingServer({}, metrics=False) as srv:
        path = _write_serve_log(logs, "prefill-0", _port(srv.url), activation=False)
        rc, _, err = _run(capsys, srv.url, tmp_path / "run", "--serve-logs", str(logs))
        assert_refused(rc, err, srv.url, path, "did not activate")
        # No log for the server's port: the message says the directory was searched.
        os.remove(path)
        rc, _, err = _run(capsys, srv.url, tmp_path / "run", "--serve-logs", str(logs))
        assert_refused(rc, err, f"no log in {logs} starts a server on port {_port(srv.url)}")
        assert srv.requests == 0
    assert not (tmp_path / "run").exists()


def test_expect_off_refuses_an_active_server_and_accepts_a_stock_one(tmp_path, capsys):
    with InjectingServer({}) as active:
        rc, _, err = _run(capsys, active.url, tmp_path / "run", "--expect-extension", "off")
        assert_refused(rc, err, "--expect-extension off", active.url, "index_k_dtype=bf16", "SGLANG_DSV4_EXT=0")
        assert active.requests == 0
    assert not (tmp_path / "run").exists()
    with InjectingServer({}, extension=[]) as stock:
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
        assert_refused(rc, err, b.url, "no sglang:dsv4_ext_active")
        rc, _, err = run_cli([*base, "--server-metrics", a.url], capsys)
        assert_refused(rc, err, "--server-metrics", "repro compare")
        assert a.requests == b.requests == 0
    assert not (tmp_path / "ab").exists()


def test_server_logs_prefers_the_urls_host_when_nodes_share_a_directory(tmp_path):
    """Multi-node stacks with one log directory: two servers on the same port, told apart by --host."""
    argv = ["python", "-m", "sglang.launch_server", "--port", "30000", "--host"]
    a = _write_serve_log(tmp_path, "prefill-0", 30000, True, argv=argv + ["10.0.0.1"])
    b = _write_serve_log(tmp_path, "prefill-1", 30000, True, argv=argv + ["10.0.0.2"])
    assert extension_check.server_logs(str(tmp_path), "http://10.0.0.2:30000") == [b]
    assert extension_check.server_logs(str(tmp_path), "http://10.0.0.1:30000/") == [a]
    state = extension_check.server_state({"url": "http://node:30000", "error": "x"}, str(tmp_path))
    assert state["state"] == "unknown" and "prefill-0.log, prefill-1.log" in state["found"]
