"""Supervision with real child processes on loopback.

The children are ``tests/support/serve_standin.py`` programs started through the real
``sglang-dsv4 serve`` path (preset -> plan validated by SGLang's parser -> supervisor):
only the module they run is swapped (``--server-module``/``--router-module``), so they
receive the exact command lines and environment an SGLang server would.

Signal dispositions: a test run started under ``nohup`` or as a background job of a
non-interactive shell inherits SIGHUP (or SIGINT and SIGQUIT) ignored, and the supervisor keeps an
inherited ignore on purpose. Each test that exercises a signal therefore gives the supervisor under
test that signal's default disposition (the driver's ``--default-signals``, or a handler set here);
one test gives it an inherited ignore and shows it is kept.
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

from sglang_dsv4_ext.tools.cli import main
from sglang_dsv4_ext.tools.serving.launch_plan import build_plan
from sglang_dsv4_ext.tools.serving.preset import load_preset
from sglang_dsv4_ext.tools.serving.supervise import FATAL_SIGNALS, Supervisor
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
            "SGLANG_DSV4_EXT": "1",
            "SGLANG_DSV4_INDEX_K_DTYPE": "bf16",
            "SGLANG_DSV4_INDEX_K_GATE": "strict",
            "SGLANG_DSV4_FP4_BUDGET": "exact",
            "SGLANG_DSV4_INDEX_K_INTEGRITY": "off",
        }
    assert "--enable-hierarchical-cache" in records[p]["argv"] and "prefill" in records[p]["argv"]
    assert "--enable-hierarchical-cache" not in records[d]["argv"]
    assert records[r]["argv"][:1] == ["--pd-disaggregation"]
    # Logs are teed per child.
    for name in ("prefill-0", "decode-0", "router"):
        assert "standin listening" in (logs / f"{name}.log").read_text()
    assert "standin exiting on purpose" in (logs / "decode-0.log").read_text()


@pytest.fixture
def disposition():
    """``disposition(sig, handler)`` for the rest of one test (restored after), whatever this run inherited."""
    saved = {}

    def give(sig, handler=signal.SIG_DFL):
        saved.setdefault(sig, signal.signal(sig, handler))

    yield give
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_ctrl_c_stops_everything_and_escalates_to_sigkill(tmp_path, capsys, disposition):
    preset, record, _ = _preset(tmp_path, prefill_env=', STANDIN_IGNORE_SIGTERM = "1"')
    plan = build_plan(load_preset(preset), 0, sglang_args(), python=sys.executable, server_module=STANDIN)
    for child in plan.children:
        if child.role == "router":
            child.module = STANDIN

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
    disposition(signal.SIGINT, signal.default_int_handler)  # as an interactive start has it
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


def _driver_plan(tmp_path, prefill_env=EVERY_KIND_OF_DESCENDANT, decode_env=EVERY_KIND_OF_DESCENDANT):
    """(children.json, record dir): the real plan, every child a stand-in."""
    preset, record, _ = _preset(tmp_path, prefill_env, decode_env)
    plan = build_plan(load_preset(preset), 0, sglang_args(), python=sys.executable, server_module=STANDIN)
    for child in plan.children:
        if child.role == "router":
            child.module = STANDIN
    children = tmp_path / "children.json"
    children.write_text(json.dumps([dataclasses.asdict(c) for c in plan.children]))
    return children, record


class _Driver:
    """The supervisor in a process of its own (tests/support/serve_supervisor_driver.py); as a context
    manager it makes sure, on the way out, that neither it nor anything its stack started outlives the test."""

    def __init__(self, tmp_path, children, record, *options, grace=3, env=None):
        self.out, self.logs, self.record = tmp_path / "supervisor.out", tmp_path / "logs", record
        self.records = {}
        with open(self.out, "w") as f:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.support.serve_supervisor_driver",
                    str(children),
                    str(self.logs),
                    str(grace),
                    *options,
                ],
                cwd=REPO,
                env=env or dict(os.environ, PYTHONPATH=REPO),
                stdout=f,
                stderr=subprocess.STDOUT,
            )

    def wait_up(self):
        assert _wait_for(self.out, "stack is up"), self.out.read_text()
        self.records = _records(self.record)
        return self.records

    def text(self) -> str:
        return self.out.read_text() + "\n".join(p.read_text() for p in sorted(self.logs.glob("*.log")))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:  # the test failed early: let the supervisor clean up, then make sure
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        _kill_leftovers(_all_pids(self.records or _records(self.record)))


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGQUIT, signal.SIGTERM], ids=lambda s: s.name)
def test_a_fatal_signal_stops_the_whole_stack_and_its_descendants(tmp_path, sig):
    """The supervisor runs in its own process (signalling pytest is not an option) with stand-in
    servers that leave a grandchild in their group, one in a new session (out of killpg's reach)
    and one orphaned; the shell it runs in has an inherited SGLANG_DSV4_BF16_INDEX_K=0 that
    contradicts the bf16 stack (the children must not inherit it). The signal under test has its
    default disposition in the supervisor (--default-signals), however this test run was started."""
    children, record = _driver_plan(tmp_path)
    env = dict(os.environ, PYTHONPATH=REPO, SGLANG_DSV4_BF16_INDEX_K="0")
    with _Driver(tmp_path, children, record, "--default-signals", sig.name, env=env) as sup:
        records = sup.wait_up()
        assert len(_all_pids(records)) == 3 + 2 * 3  # servers, router; 3 descendants per server
        sup.proc.send_signal(sig)
        rc = sup.proc.wait(timeout=60)
        assert rc == 128 + sig, sup.text()
        survivors = [pid for pid in _all_pids(records) if pid_alive(pid)]
        assert survivors == [], sup.text()
        serve_log = (sup.logs / "serve.log").read_text()  # the supervisor's own record, terminal or not
        assert f"{sig.name} received: stopping the stack" in serve_log and "all children stopped" in serve_log
        for rec in records.values():
            assert rec["env"] == {
                "SGLANG_DSV4_EXT": "1",
                "SGLANG_DSV4_INDEX_K_DTYPE": "bf16",
                "SGLANG_DSV4_INDEX_K_GATE": "strict",
                "SGLANG_DSV4_FP4_BUDGET": "exact",
                "SGLANG_DSV4_INDEX_K_INTEGRITY": "off",
            }


def test_a_signal_ignored_when_serve_started_stays_ignored(tmp_path):
    """nohup's SIGHUP ignore, inherited: SIGHUP changes nothing, the SIGTERM after it stops the stack and
    names itself (had SIGHUP been handled, it would have been the first signal and named the exit)."""
    children, record = _driver_plan(tmp_path, "", "")
    with _Driver(tmp_path, children, record, "--ignored-signals", "SIGHUP", "--default-signals", "SIGTERM") as sup:
        records = sup.wait_up()
        sup.proc.send_signal(signal.SIGHUP)
        sup.proc.send_signal(signal.SIGTERM)
        assert sup.proc.wait(timeout=60) == 128 + signal.SIGTERM, sup.text()
        serve_log = (sup.logs / "serve.log").read_text()
        assert "SIGTERM received: stopping the stack" in serve_log and "SIGHUP" not in serve_log
        assert not any(pid_alive(pid) for pid in _all_pids(records))


def _wait_gone(pids, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [pid for pid in pids if pid_alive(pid)]
        if not left:
            return []
        time.sleep(0.2)
    return left


def test_sigkill_of_serve_leaves_nothing_behind(tmp_path):
    """SIGKILL cannot be caught: the children's parent-death signal and the reaper must stop every
    process the stack started, also a grandchild that left its group, an orphan, and a server that
    ignores SIGTERM (the reaper's SIGKILL after the grace period)."""
    children, record = _driver_plan(tmp_path, EVERY_KIND_OF_DESCENDANT + ', STANDIN_IGNORE_SIGTERM = "1"')
    with _Driver(tmp_path, children, record, grace=2) as sup:
        records = sup.wait_up()
        time.sleep(1.5)  # a few supervision ticks: the reaper has been told of every process
        sup.proc.kill()
        assert sup.proc.wait(timeout=30) == -signal.SIGKILL
        survivors = _wait_gone(_all_pids(records))
        reaper_lines = [line for line in (sup.logs / "serve.log").read_text().splitlines() if "[serve reaper]" in line]
        assert survivors == [], (survivors, reaper_lines)
        assert any("serve is gone without stopping its children" in line for line in reaper_lines), reaper_lines
        assert any("SIGKILL after 2 s" in line for line in reaper_lines), reaper_lines  # the SIGTERM-ignoring one


def test_sigkill_of_serve_and_its_reaper_still_stops_the_children(tmp_path):
    """The children's own parent-death signal (PR_SET_PDEATHSIG), with no reaper left to help: each child
    gets SIGTERM from the kernel when serve dies. (Their grandchildren are the reaper's part, above.)"""
    children, record = _driver_plan(tmp_path)
    with _Driver(tmp_path, children, record) as sup:
        records = sup.wait_up()
        reapers = [p for p in psutil.Process(sup.proc.pid).children() if "serving.reaper" in " ".join(p.cmdline())]
        assert len(reapers) == 1
        reapers[0].kill()
        sup.proc.kill()
        sup.proc.wait(timeout=30)
        assert _wait_gone([rec["pid"] for rec in records.values()]) == [], sup.text()


def test_a_dripping_metrics_endpoint_does_not_hold_off_a_signal(tmp_path):
    """decode-0's /metrics sends one byte a second; the wedge watch must not hold the supervisor in that
    read: SIGTERM stops the whole stack long before the body (100000 bytes) would be complete."""
    children, record = _driver_plan(tmp_path, "", ', STANDIN_METRICS = "drip"')
    with _Driver(tmp_path, children, record, "--wedge-timeout", "60", "--default-signals", "SIGTERM") as sup:
        records = sup.wait_up()
        assert _wait_for(sup.logs / "decode-0.log", "metrics drip started"), sup.text()
        sup.proc.send_signal(signal.SIGTERM)
        assert sup.proc.wait(timeout=30) == 128 + signal.SIGTERM, sup.text()
        assert _wait_gone(_all_pids(records), timeout=10) == []


def test_metrics_that_are_not_prometheus_text_are_said_once_and_the_watch_goes_on(tmp_path):
    """decode-0's /metrics is an HTML page: one line says so, the stack stays up (it is healthy), and the
    supervisor still answers a signal."""
    children, record = _driver_plan(tmp_path, "", ', STANDIN_METRICS = "html"')
    with _Driver(tmp_path, children, record, "--wedge-timeout", "1", "--default-signals", "SIGTERM") as sup:
        records = sup.wait_up()
        assert _wait_for(sup.logs / "serve.log", "not Prometheus text"), sup.text()
        time.sleep(2)  # several more scrapes of the same page
        assert sup.proc.poll() is None, sup.text()
        sup.proc.send_signal(signal.SIGTERM)
        assert sup.proc.wait(timeout=60) == 128 + signal.SIGTERM, sup.text()
        serve_log = (sup.logs / "serve.log").read_text()
        assert serve_log.count("not Prometheus text") == 1 and "Traceback" not in sup.text()
        assert "decode-0: cannot read http://127.0.0.1:" in serve_log and "the wedge watch goes on" in serve_log
        assert not any(pid_alive(pid) for pid in _all_pids(records))


def test_every_terminating_signal_is_handled_and_an_ignored_one_stays_ignored(tmp_path, disposition):
    """nohup (SIGHUP ignored at start) keeps its meaning; every other fatal signal gets the handler."""
    checked = (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGUSR1, signal.SIGALRM)
    for sig in checked:  # a background job of a non-interactive shell starts with SIGINT and SIGQUIT ignored
        disposition(sig, signal.SIG_DFL)
    disposition(signal.SIGHUP, signal.SIG_IGN)
    sup = Supervisor([], str(tmp_path))
    previous = sup._install_handlers()
    try:
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
        for sig in checked:
            assert signal.getsignal(sig) == sup._on_signal, sig
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
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
    plan.children[1].python = str(tmp_path / "vanished-python")
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
