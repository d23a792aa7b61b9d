"""Supervision with real child processes on loopback.

The children are ``tests/support/serve_standin.py`` programs started through the real
``sglang-dsv4 serve`` path (preset -> plan validated by SGLang's parser -> supervisor):
only the module they run is swapped (``--server-module``/``--router-module``), so they
receive the exact command lines and environment an SGLang server would.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import threading
import time

from sglang_dsv4_ext.cli import main
from sglang_dsv4_ext.serving.launch_plan import build_plan
from sglang_dsv4_ext.serving.preset import load_preset
from sglang_dsv4_ext.serving.supervise import Supervisor
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
        if rec["grandchild_pid"]:
            pids.append(rec["grandchild_pid"])
    return pids


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
        assert rec["env"] == {"SGLANG_DSV4_EXT": "1", "SGLANG_DSV4_INDEX_K_DTYPE": "bf16", "SGLANG_DSV4_INDEX_K_GATE": "strict"}
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
