"""Start the children, wait for health, tee their logs, stop everything cleanly.

Each child runs in its own process group (``start_new_session``), so stopping it also
stops what it spawned (SGLang's scheduler, detokenizer and TP workers) and a terminal
Ctrl-C reaches only this supervisor, which then stops the children in reverse start
order: SIGTERM to each group, then SIGKILL to any group still alive after the grace
period. Exit codes: 0 never while serving (a stack only ends by a signal or a failure),
130/143 after SIGINT/SIGTERM, 1 when a child died or did not become healthy in time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from typing import IO, Dict, List, Optional, Tuple

from sglang_dsv4_ext.serving.launch_plan import ChildSpec

EXIT_CHILD_FAILED = 1
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def healthy(url: str, timeout: float = 2.0) -> bool:
    """GET ``url``; True on HTTP 200. Proxies are bypassed (loopback and cluster-local)."""
    try:
        with _NO_PROXY.open(url, timeout=timeout) as resp:
            return resp.status == 200
    except Exception:
        return False


@dataclass
class _Running:
    spec: ChildSpec
    proc: subprocess.Popen
    log_path: str
    tee: threading.Thread
    started: float


class Supervisor:
    def __init__(
        self,
        children: List[ChildSpec],
        log_dir: str,
        remote_health: Optional[List[Tuple[str, str]]] = None,
        health_timeout: float = 1800.0,
        grace_period: float = 30.0,
        poll_interval: float = 0.5,
        progress_interval: float = 10.0,
        stream_logs: bool = True,
        out: IO[str] = None,
    ):
        self.children = children
        self.log_dir = log_dir
        self.remote_health = list(remote_health or [])
        self.health_timeout = health_timeout
        self.grace_period = grace_period
        self.poll_interval = poll_interval
        self.progress_interval = progress_interval
        self.stream_logs = stream_logs
        self.out = out or sys.stdout
        self.running: List[_Running] = []
        self._signal: Optional[int] = None
        self._lock = threading.Lock()

    # ----- output -----
    def say(self, text: str) -> None:
        with self._lock:
            self.out.write(f"[serve] {text}\n")
            self.out.flush()

    def _tee(self, name: str, pipe, log: IO[bytes]) -> None:
        for line in iter(pipe.readline, b""):
            log.write(line)
            log.flush()
            if self.stream_logs:
                with self._lock:
                    self.out.write(f"[{name}] {line.decode(errors='replace').rstrip()}\n")
                    self.out.flush()
        pipe.close()
        log.close()

    # ----- processes -----
    def _start(self, spec: ChildSpec) -> None:
        env = dict(os.environ)
        env.update(spec.env)
        log_path = os.path.join(self.log_dir, f"{spec.name}.log")
        log = open(log_path, "ab")
        log.write(f"# {time.strftime('%Y-%m-%d %H:%M:%S')} {spec.shell()}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            spec.argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group: stopping it stops its descendants
        )
        tee = threading.Thread(target=self._tee, args=(spec.name, proc.stdout, log), daemon=True)
        tee.start()
        self.running.append(_Running(spec, proc, log_path, tee, time.monotonic()))
        self.say(f"started {spec.name} (pid {proc.pid}, log {log_path})")

    def _dead_child(self) -> Optional[_Running]:
        for r in self.running:
            if r.proc.poll() is not None:
                return r
        return None

    @staticmethod
    def _group_alive(pgid: int) -> bool:
        """True while any non-zombie process is in the group.

        Zombies are skipped: a descendant reparented to a PID 1 that does not reap would
        otherwise keep the group "alive" until the grace period ran out.
        """
        if os.path.isdir("/proc"):
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                except (OSError, IndexError):
                    continue
                if int(fields[2]) == pgid and fields[0] != "Z":
                    return True
            return False
        try:
            os.killpg(pgid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True

    @staticmethod
    def _signal_group(pgid: int, sig: int) -> None:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def stop_all(self) -> None:
        """SIGTERM every child's group (reverse start order), SIGKILL stragglers after the grace period."""
        if not self.running:
            return
        for r in reversed(self.running):
            self._signal_group(r.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_period
        while time.monotonic() < deadline:
            for r in self.running:
                r.proc.poll()  # reap, so an exited leader is not counted as alive
            if not any(self._group_alive(r.proc.pid) for r in self.running):
                break
            time.sleep(0.1)
        for r in reversed(self.running):
            if self._group_alive(r.proc.pid):
                self.say(f"{r.spec.name} did not stop within {self.grace_period:g} s: SIGKILL")
                self._signal_group(r.proc.pid, signal.SIGKILL)
        for r in self.running:
            try:
                r.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.say(f"{r.spec.name} (pid {r.proc.pid}) is still not reaped after SIGKILL")
            r.tee.join(timeout=5)
        self.say("all children stopped: " + ", ".join(f"{r.spec.name} (exit {r.proc.returncode})" for r in self.running))

    # ----- health -----
    def _wait_healthy(self, targets: List[Tuple[str, str]], phase: str) -> Optional[int]:
        """Poll until every (name, url) is healthy; return an exit code to stop with, or None."""
        pending: Dict[str, str] = dict(targets)
        if not pending:
            return None
        t0 = time.monotonic()
        last_report = 0.0
        self.say(f"waiting for {phase}: {', '.join(pending)} (timeout {self.health_timeout:g} s)")
        while pending:
            code = self._check_stop()
            if code is not None:
                return code
            for name, url in list(pending.items()):
                if healthy(url):
                    del pending[name]
                    self.say(f"{name} is healthy after {time.monotonic() - t0:.0f} s ({url})")
            if not pending:
                break
            elapsed = time.monotonic() - t0
            if elapsed > self.health_timeout:
                self.say(f"FAILED: {', '.join(pending)} not healthy after {self.health_timeout:g} s; stopping the stack")
                return EXIT_CHILD_FAILED
            if elapsed - last_report >= self.progress_interval:
                last_report = elapsed
                self.say(f"still waiting ({elapsed:.0f}/{self.health_timeout:g} s): {', '.join(pending)}")
            time.sleep(self.poll_interval)
        return None

    def _check_stop(self) -> Optional[int]:
        if self._signal is not None:
            name = signal.Signals(self._signal).name
            self.say(f"{name} received: stopping the stack")
            return 128 + self._signal
        dead = self._dead_child()
        if dead is not None:
            self.say(
                f"FAILED: {dead.spec.name} exited with code {dead.proc.returncode} "
                f"(log: {dead.log_path}); stopping the others"
            )
            return EXIT_CHILD_FAILED
        return None

    def _on_signal(self, signum, frame) -> None:
        self._signal = signum

    # ----- the whole life -----
    def run(self) -> int:
        os.makedirs(self.log_dir, exist_ok=True)
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            code = self._run()
        finally:
            self.stop_all()
            for s, h in previous.items():
                signal.signal(s, h)
        return code

    def _run(self) -> int:
        servers = [c for c in self.children if c.role != "router"]
        routers = [c for c in self.children if c.role == "router"]
        for c in servers:
            self._start(c)
        targets = [(c.name, c.health_url) for c in servers if c.health_url]
        if routers:
            targets += self.remote_health
        code = self._wait_healthy(targets, "servers")
        if code is not None:
            return code
        for c in routers:
            self._start(c)
        code = self._wait_healthy([(c.name, c.health_url) for c in routers if c.health_url], "router")
        if code is not None:
            return code
        entry = next((c.health_url for c in routers), None) or next((c.health_url for c in servers if c.health_url), None)
        self.say("stack is up" + (f": {entry.rsplit('/health', 1)[0]}" if entry else "") + " (Ctrl-C stops it)")
        while True:
            code = self._check_stop()
            if code is not None:
                return code
            time.sleep(self.poll_interval)
