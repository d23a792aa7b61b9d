"""Supervision with real child processes on loopback.

The children are ``tests/support/serve_standin.py`` programs started through the real
``sglang-dsv4 serve`` path (preset -> plan validated by SGLang's parser -> supervisor):
only the module they run is swapped (``--server-module``/``--router-module``), so they
receive the exact command lines and environment an SGLang server would.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest

from sglang_dsv4_ext.cli import main
from sglang_dsv4_ext.serving.launch_plan import build_plan
from sglang_dsv4_ext.serving.preset import load_preset
from sglang_dsv4_ext.serving.supervise import FATAL_SIGNALS, Supervisor
from tests.support.serve_helpers import TESTS_DIR, free_port, pid_alive, sglang_args

REPO = os.path.dirname(TESTS_DIR)
STANDIN = "tests.support.serve_standin"


def _preset(tmp_path, prefill_env="", decode_env="", router_env=""):
    record = tmp_path / "records"
    record.mkdir(exist_ok=True)
    p, d, r = free_port(), free_port(), free_port()
    b = free_port()
    text = textwrap.dedent(
        f"""
        mode = "pd"
        model_path = "stand-in/model"
        [extension]
        index_k_dtype = "bf16"
        index_k_gate = "strict"
        [hicache]
        enabled = true
        [common]
        args = ["--tp-size", "1"]
        env = {{ STANDIN_RECORD_DIR = "{record}", PYTHONPATH = "{REPO}" }}
        [[prefill]]
        port = {p}
        bootstrap_port = {b}
        env = {{ STANDIN_GRANDCHILD = "1" {prefill_env} }}
        [[decode]]
        port = {d}
        env = {{ STANDIN_GRANDCHILD = "1" {decode_env} }}
        [router]
        port = {r}
        """
    )
    path = tmp_path / "stack.toml"
    path.write_text(text)
    return str(path), record, (p, d, r)


def _records(record_dir):
    out = {}
    for f in os.listdir(record_dir):
        with open(os.path.join(record_dir, f)) as fh:
            out[int(f.split(".")[0])] = json.load(fh)
    return out


def _all_pids(records):
    pids = []
    for rec in records.values():
        pids.append(rec["pid"])
        pids += rec["descendant_pids"]
    return pids


def _kill_leftovers(pids):
    """Test hygiene only: whatever the code under test left behind does not outlive the test."""
    for pid in pids:
        try:
            psutil.Process(pid).kill()
        except psutil.Error:
            pass


def test_child_death_stops_the_others_and_names_it(tmp_path, capsys):
    preset, record, (p, d, r) = _preset(tmp_path, decode_env=', STANDIN_DIE_AFTER = "2.5", STANDIN_EXIT_CODE = "7"')
    logs = tmp_path / "logs"
    rc = main(
        ["serve", "--preset", preset, "--server-module", STANDIN, "--router-module", STANDIN,
         "--log-dir", str(logs), "--grace-period", "5", "--health-timeout", "60"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 1
    assert "FAILED: decode-0 exited with code 7" in out
    assert "waiting for servers: prefill-0, decode-0" in out  # health progress
    assert "prefill-0 is healthy" in out and "router is healthy" in out and "stack is up" in out
    records = _records(record)
    assert set(records) == {p, d, r}  # router started only after the servers were healthy
    # Nothing survives: servers, router, and the grandchildren in their process groups.
    assert not any(pid_alive(pid) for pid in _all_pids(records))
    # Our configuration reached every child, and the command lines are the generated ones.
    for rec in records.values():
        assert rec["env"] == {
            "SGLANG_DSV4_EXT": "1", "SGLANG_DSV4_INDEX_K_DTYPE": "bf16", "SGLANG_DSV4_INDEX_K_GATE": "strict",
            "SGLANG_DSV4_INDEX_K_INTEGRITY": "off",
        }
    assert "--enable-hierarchical-cache" in records[p]["argv"] and "prefill" in records[p]["argv"]
    assert "--enable-hierarchical-cache" not in records[d]["argv"]
    assert records[r]["argv"][:1] == ["--pd-disaggregation"]
    # Logs are teed per child.
    for name in ("prefill-0", "decode-0", "router"):
        assert "standin listening" in (logs / f"{name}.log").read_text()
    assert "standin exiting on purpose" in (logs / "decode-0.log").read_text()


def test_ctrl_c_stops_everything_and_escalates_to_sigkill(tmp_path, capsys):
    preset, record, _ = _preset(tmp_path, prefill_env=', STANDIN_IGNORE_SIGTERM = "1"')
    plan = build_plan(load_preset(preset), 0, sglang_args(), python=sys.executable, server_module=STANDIN)
    for child in plan.children:
        if child.role == "router":
            child.argv[2] = STANDIN

    class Out:
        """Collects the supervisor's output and sends Ctrl-C once the stack is up."""

        def __init__(self):
            self.text = ""

        def write(self, s):
            self.text += s
            if "stack is up" in s:
                threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()

        def flush(self):
            pass

    out = Out()
    before = signal.getsignal(signal.SIGINT)
    t0 = time.monotonic()
    rc = Supervisor(plan.children, str(tmp_path / "logs"), grace_period=1.0, out=out).run()
    assert rc == 130, out.text
    assert "SIGINT received: stopping the stack" in out.text
    assert "prefill-0 did not stop within 1 s: SIGKILL" in out.text
    assert time.monotonic() - t0 < 30
    assert not any(pid_alive(pid) for pid in _all_pids(_records(record)))
    assert signal.getsignal(signal.SIGINT) is before  # the supervisor restored the handler


def test_health_timeout_names_the_child_and_stops_the_rest(tmp_path, capsys):
    preset, record, (p, d, r) = _preset(tmp_path, decode_env=', STANDIN_HEALTHY_AFTER = "999"')
    rc = main(
        ["serve", "--preset", preset, "--server-module", STANDIN, "--router-module", STANDIN,
         "--log-dir", str(tmp_path / "logs"), "--health-timeout", "2", "--grace-period", "5", "--quiet-logs"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 1
    assert "FAILED: decode-0 not healthy after 2 s" in out
    assert "[decode-0]" not in out  # --quiet-logs: child output only in the log files
    records = _records(record)
    assert r not in records  # the router never started
    assert not any(pid_alive(pid) for pid in _all_pids(records))


EVERY_KIND_OF_DESCENDANT = ', STANDIN_ESCAPED = "1", STANDIN_ORPHAN = "1"'


def _wait_for(path, text, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGQUIT, signal.SIGTERM], ids=lambda s: s.name)
def test_a_fatal_signal_stops_the_whole_stack_and_its_descendants(tmp_path, sig):
    """The supervisor runs in its own process (signalling pytest is not an option) with stand-in
    servers that leave a grandchild in their group, one in a new session (out of killpg's reach)
    and one orphaned; the shell it runs in has an inherited SGLANG_DSV4_BF16_INDEX_K=0 that
    contradicts the bf16 stack (the children must not inherit it)."""
    preset, record, _ = _preset(tmp_path, EVERY_KIND_OF_DESCENDANT, EVERY_KIND_OF_DESCENDANT)
    plan = build_plan(load_preset(preset), 0, sglang_args(), python=sys.executable, server_module=STANDIN)
    for child in plan.children:
        if child.role == "router":
            child.argv[2] = STANDIN
    children = tmp_path / "children.json"
    children.write_text(json.dumps([dataclasses.asdict(c) for c in plan.children]))
    out, logs = tmp_path / "supervisor.out", tmp_path / "logs"
    env = dict(os.environ, PYTHONPATH=REPO, SGLANG_DSV4_BF16_INDEX_K="0")
    with open(out, "w") as f:
        sup = subprocess.Popen([sys.executable, "-m", "tests.support.serve_supervisor_driver", str(children),
                                str(logs), "3"], cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT)
    records = {}
    try:
        assert _wait_for(out, "stack is up"), out.read_text()
        records = _records(record)
        assert len(_all_pids(records)) == 3 + 2 * 3  # servers, router; 3 descendants per server
        sup.send_signal(sig)
        rc = sup.wait(timeout=60)
        assert rc == 128 + sig, out.read_text()
        survivors = [pid for pid in _all_pids(records) if pid_alive(pid)]
        assert survivors == [], out.read_text()
        serve_log = (logs / "serve.log").read_text()  # the supervisor's own record, terminal or not
        assert f"{sig.name} received: stopping the stack" in serve_log and "all children stopped" in serve_log
        for rec in records.values():
            assert rec["env"] == {"SGLANG_DSV4_EXT": "1", "SGLANG_DSV4_INDEX_K_DTYPE": "bf16",
                                  "SGLANG_DSV4_INDEX_K_GATE": "strict", "SGLANG_DSV4_INDEX_K_INTEGRITY": "off"}
    finally:
        if sup.poll() is None:  # the test failed early: let the supervisor clean up, then make sure
            sup.terminate()
            try:
                sup.wait(timeout=30)
            except subprocess.TimeoutExpired:
                sup.kill()
                sup.wait()
        _kill_leftovers(_all_pids(records or _records(record)))


def test_every_terminating_signal_is_handled_and_an_ignored_one_stays_ignored(tmp_path):
    """nohup (SIGHUP ignored at start) keeps its meaning; every other fatal signal gets the handler."""
    sup = Supervisor([], str(tmp_path))
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        previous = sup._install_handlers()
        try:
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGUSR1, signal.SIGALRM):
                assert signal.getsignal(sig) == sup._on_signal, sig
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
    finally:
        signal.signal(signal.SIGHUP, before)
    assert signal.SIGHUP in FATAL_SIGNALS and signal.SIGKILL not in FATAL_SIGNALS


def test_a_dropped_terminal_does_not_stop_the_shutdown(tmp_path):
    """After SIGHUP the terminal is gone and writes fail; the supervisor keeps logging to serve.log."""
    gone = io.StringIO()
    gone.close()  # writing to it raises ValueError, as a dead tty raises OSError
    sup = Supervisor([], str(tmp_path), out=gone)
    sup._own_log = open(tmp_path / "serve.log", "a")
    sup.say("still here")
    sup._own_log.close()
    assert "still here" in (tmp_path / "serve.log").read_text()


def test_a_child_that_cannot_be_started_stops_the_ones_already_running(tmp_path):
    """The second server's executable is gone between the dry run and the start (exec fails)."""
    preset, _, _ = _preset(tmp_path)
    plan = build_plan(load_preset(preset), 0, sglang_args(), python=sys.executable, server_module=STANDIN)
    plan.children[1].argv[0] = str(tmp_path / "vanished-python")
    out = io.StringIO()
    rc = Supervisor(plan.children, str(tmp_path / "logs"), grace_period=5, out=out).run()
    text = out.getvalue()
    assert rc == 1, text
    assert "FAILED: cannot start decode-0" in text
    started = int(text.split("started prefill-0 (pid ", 1)[1].split(",", 1)[0])
    assert "all children stopped: prefill-0 (exit" in text
    assert not pid_alive(started)


def test_a_wedged_decode_server_is_named_and_the_stack_stopped(tmp_path, capsys):
    """The supervision loop's call site of the wedge detector, on SGLang's metric names from a stand-in."""
    # STANDIN_DIE_AFTER bounds the test: were the wedge missed, the decode stand-in's exit stops the stack.
    preset, record, _ = _preset(tmp_path, decode_env=', STANDIN_WEDGED = "1", STANDIN_DIE_AFTER = "25"')
    rc = main(
        ["serve", "--preset", preset, "--server-module", STANDIN, "--router-module", STANDIN,
         "--log-dir", str(tmp_path / "logs"), "--grace-period", "5", "--health-timeout", "60",
         "--wedge-timeout", "1"]
    )  # fmt: skip
    out = capsys.readouterr().out
    records = _records(record)
    try:
        assert rc == 1
        assert "FAILED: decode-0 looks wedged: 4 request(s) running" in out and "stopping the stack" in out
        assert "prefill-0 looks wedged" not in out  # the idle prefill server is not a wedge
        assert not any(pid_alive(pid) for pid in _all_pids(records))
    finally:
        _kill_leftovers(_all_pids(records))
