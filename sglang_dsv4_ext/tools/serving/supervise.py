"""Start the children, wait for health, tee their logs, stop everything cleanly.

Each child runs in its own process group (``start_new_session``), so a terminal Ctrl-C
reaches only this supervisor, which then stops the children in reverse start order.
Stopping a child means stopping its whole tree: its process group (SGLang's scheduler,
detokenizer and TP workers) and every descendant psutil has seen, including one that
left the group (``setsid``) or was orphaned when its parent died. SIGTERM first, SIGKILL
for whatever is still alive after the grace period.

SIGKILL of the supervisor itself cannot be caught: each child asks the kernel for SIGTERM when the
supervisor dies (``PR_SET_PDEATHSIG``), and a reaper process (:mod:`.reaper`), told of every process
the supervisor sees, stops the rest. Health checks and /metrics reads are bounded as a whole
(:mod:`.http_probe`) and the wedge watch runs on a thread of its own, so no server can hold the
supervisor past a signal.

Every signal whose default action would end the supervisor (SIGINT, SIGTERM, SIGHUP from
a dropped SSH session, SIGQUIT, SIGUSR1, ...; see :data:`FATAL_SIGNALS`) stops the stack
the same way; a signal the supervisor was started with ignored (``nohup``, a background
job) stays ignored. Supervisor messages also go to ``serve.log`` in the log directory, so
they survive a terminal that is gone.

Exit codes (:mod:`sglang_dsv4_ext.tools.exit_codes`): never 0 while serving (a stack only ends
by a signal or a failure); ``ATTENTION`` (1) when a child died or did not become healthy
in time; ``for_signal(N)`` (128 + N, e.g. 129 SIGHUP, 130 SIGINT, 143 SIGTERM) after
signal N.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import IO

import psutil

from sglang_dsv4_ext.errors import ActivationError
from sglang_dsv4_ext.runtime import launch_identity
from sglang_dsv4_ext.tools import exit_codes
from sglang_dsv4_ext.tools.serving import activation_check, reaper, wedge
from sglang_dsv4_ext.tools.serving.launch_plan import ChildSpec
from sglang_dsv4_ext.tools.serving.process_tree import alive, parent_death_signal, process_groups, send
from sglang_dsv4_ext.tools.tool_support import http_probe, stop_signals

EXIT_CHILD_FAILED = exit_codes.ATTENTION
FATAL_SIGNALS = stop_signals.FATAL_SIGNALS  # the signals that stop the stack (one list for every command)
signal_name = stop_signals.signal_name


def start_header(spec: ChildSpec) -> str:
    """The line written into a child's log before each start (repro's extension check reads its --port)."""
    return f"# {time.strftime('%Y-%m-%d %H:%M:%S')} {spec.shell()}\n"


def _launch_of(name: str, pid: int) -> str:
    try:
        return launch_identity.of_process(pid)
    except psutil.Error as exc:
        raise ActivationError(f"{name}: its process {pid} is gone ({exc})") from exc


def healthy(url: str, deadline: float = 2.0) -> bool:
    """GET ``url`` within ``deadline`` seconds in all; True on HTTP 200 (no answer in time is "not yet")."""
    try:
        return http_probe.get(url, deadline).status == 200
    except http_probe.ProbeError:
        return False


@dataclass
class _Running:
    spec: ChildSpec
    proc: subprocess.Popen
    log_path: str
    tee: threading.Thread
    started: float
    # Every process seen in this child's tree (psutil handles keep their identity).
    tree: dict[int, psutil.Process] = field(default_factory=dict)

    def remember_tree(self, groups: dict[int, list[psutil.Process]]) -> None:
        """Record the child's current descendants and its process group's members (``groups``: pgid -> processes)."""
        try:
            root = psutil.Process(self.proc.pid)
            self.tree.setdefault(root.pid, root)
            for p in root.children(recursive=True):
                self.tree.setdefault(p.pid, p)
        except psutil.Error:  # the child is gone: what was recorded stays
            pass
        for p in groups.get(self.proc.pid, []):
            self.tree.setdefault(p.pid, p)

    def alive(self) -> list[psutil.Process]:
        """Processes of this tree still running; the child itself counts until it is reaped."""
        self.proc.poll()  # reap our own child, so an exited leader is not a zombie "alive"
        left = [p for pid, p in self.tree.items() if pid != self.proc.pid and alive(p)]
        root = self.tree.get(self.proc.pid)
        if self.proc.returncode is None and root is not None:
            left.append(root)
        return left

    def signal_tree(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        for p in self.alive():
            send(p, sig)


class Supervisor:
    def __init__(
        self,
        children: list[ChildSpec],
        log_dir: str,
        remote_health: list[tuple[str, str]] | None = None,
        health_timeout: float = 1800.0,
        grace_period: float = 30.0,
        poll_interval: float = 0.5,
        progress_interval: float = 10.0,
        stream_logs: bool = True,
        out: IO[str] | None = None,
        require_activation_line: bool = False,
        wedge_seconds: float | None = None,
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
        self.require_activation_line = require_activation_line
        self.wedge_seconds = wedge_seconds
        self.running: list[_Running] = []
        self._signal: int | None = None
        self._lock = threading.Lock()
        self._out_gone = False  # the terminal went away (SIGHUP): keep going, log only
        self._own_log: IO[str] | None = None
        self._reaper: reaper.Link | None = None

    # ----- output -----
    def _write_out(self, text: str) -> None:
        if self._out_gone:
            return
        try:
            self.out.write(text)
            self.out.flush()
        except (OSError, ValueError):  # EIO/EPIPE on a dropped terminal, or a closed stream
            self._out_gone = True

    def say(self, text: str) -> None:
        line = f"[serve] {text}\n"
        with self._lock:
            self._write_out(line)
            if self._own_log is not None:
                self._own_log.write(f"{time.strftime('%H:%M:%S')} {line}")
                self._own_log.flush()

    def _tee(self, name: str, pipe, log: IO[bytes]) -> None:
        for line in iter(pipe.readline, b""):
            log.write(line)
            log.flush()
            if self.stream_logs:
                with self._lock:
                    self._write_out(f"[{name}] {line.decode(errors='replace').rstrip()}\n")
        pipe.close()
        # This start's evidence ends here: a reader of the log must not take it for a running server's.
        log.write(
            f"{activation_check.OUTPUT_END_PREFIX} {time.strftime('%Y-%m-%d %H:%M:%S')}: {name} closed its "
            f"output (exited)\n".encode()
        )
        log.close()

    # ----- processes -----
    def _start(self, spec: ChildSpec) -> None:
        env = spec.environment(os.environ)  # the plan's: SGLANG_PLUGINS allowlisting included (launch_plan)
        log_path = os.path.join(self.log_dir, f"{spec.name}.log")
        log = open(log_path, "ab")
        log.write(start_header(spec).encode())
        log.flush()
        proc = subprocess.Popen(
            spec.argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group: a terminal's Ctrl-C reaches only us
            preexec_fn=parent_death_signal(signal.SIGTERM),  # SIGKILL of the supervisor stops it too
        )
        tee = threading.Thread(target=self._tee, args=(spec.name, proc.stdout, log), daemon=True)
        tee.start()
        running = _Running(spec, proc, log_path, tee, time.monotonic())
        self.running.append(running)
        self._remember_trees()
        self.say(f"started {spec.name} (pid {proc.pid}, log {log_path})")

    def _remember_trees(self) -> None:
        groups = process_groups()
        for r in self.running:
            r.remember_tree(groups)
            if self._reaper is not None:
                self._reaper.tell(r.tree.values())
        if self._reaper is not None and self._reaper.problem:
            self.say(f"{self._reaper.problem}; SIGKILL of serve would now leave processes behind")
            self._reaper = None

    def _dead_child(self) -> _Running | None:
        for r in self.running:
            if r.proc.poll() is not None:
                return r
        return None

    def _wait_trees(self, seconds: float) -> list[_Running]:
        """Wait up to ``seconds`` for every tree to end; return those with a process left."""
        deadline = time.monotonic() + seconds
        while True:
            left = [r for r in self.running if r.alive()]
            if not left or time.monotonic() >= deadline:
                return left
            time.sleep(0.1)

    def stop_all(self) -> None:
        """SIGTERM every child's tree (reverse start order), SIGKILL what is left after the grace period."""
        if not self.running:
            return
        self._remember_trees()
        for r in reversed(self.running):
            r.signal_tree(signal.SIGTERM)
        for r in reversed(self._wait_trees(self.grace_period)):
            self.say(f"{r.spec.name} did not stop within {self.grace_period:g} s: SIGKILL")
            r.signal_tree(signal.SIGKILL)
        for r in self._wait_trees(10.0):
            pids = ", ".join(str(p.pid) for p in r.alive())
            self.say(f"{r.spec.name}: processes {pids} are still alive after SIGKILL")
        for r in self.running:
            r.tee.join(timeout=5)
        stopped = ", ".join(f"{r.spec.name} (exit {r.proc.returncode})" for r in self.running)
        self.say("all children stopped: " + stopped)

    # ----- health -----
    def _wait_healthy(self, targets: list[tuple[str, str]], phase: str) -> int | None:
        """Poll until every (name, url) is healthy; return an exit code to stop with, or None."""
        pending: dict[str, str] = dict(targets)
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
                names = ", ".join(pending)
                self.say(f"FAILED: {names} not healthy after {self.health_timeout:g} s; stopping the stack")
                return EXIT_CHILD_FAILED
            if elapsed - last_report >= self.progress_interval:
                last_report = elapsed
                self.say(f"still waiting ({elapsed:.0f}/{self.health_timeout:g} s): {', '.join(pending)}")
            time.sleep(self.poll_interval)
        return None

    def _check_activation(self, servers: list[ChildSpec]) -> int | None:
        """Each healthy local server's log must carry the activation line with the configuration it was given."""
        if not self.require_activation_line:
            return None
        running = {r.spec.name: r for r in self.running}
        for c in servers:
            if not c.health_url or c.env.get("SGLANG_DSV4_EXT") == "0":
                continue
            try:
                expected = activation_check.expected_fields(c.environment(os.environ))
                launch = _launch_of(c.name, running[c.name].proc.pid)  # this start's, never an earlier one's
                activation_check.check_server_log(c.name, running[c.name].log_path, expected, launch=launch)
            except ActivationError as exc:
                self.say(f"FAILED: {exc}; stopping the stack")
                return EXIT_CHILD_FAILED
            self.say(f"{c.name}: sglang-dsv4-ext active as configured")
        return None

    def _check_stop(self) -> int | None:
        if self._signal is not None:
            name = signal_name(self._signal)
            self.say(f"{name} received: stopping the stack")
            return exit_codes.for_signal(self._signal)
        self._remember_trees()  # so a grandchild orphaned later is still known at stop
        dead = self._dead_child()
        if dead is not None:
            self.say(
                f"FAILED: {dead.spec.name} exited with code {dead.proc.returncode} "
                f"(log: {dead.log_path}); stopping the others"
            )
            return EXIT_CHILD_FAILED
        return None

    def _on_signal(self, signum, frame) -> None:
        if self._signal is None:  # the first one names the reason; later ones change nothing
            self._signal = signum

    def _install_handlers(self) -> dict[int, object]:
        """Our handler for every fatal signal not ignored at start; returns the previous handlers."""
        return stop_signals.install(self._on_signal)

    # ----- the whole life -----
    def run(self) -> int:
        os.makedirs(self.log_dir, exist_ok=True)
        previous = self._install_handlers()
        serve_log = os.path.join(self.log_dir, "serve.log")
        self._own_log = open(serve_log, "a")
        try:
            self._reaper = reaper.Link(self.grace_period, serve_log)
            code = self._run()
        finally:
            try:
                self.stop_all()
            finally:
                if self._reaper is not None:
                    self._reaper.done()
                    self._reaper = None
                stop_signals.restore(previous)
                self._own_log.close()
                self._own_log = None
        return code

    def _start_all(self, children: list[ChildSpec]) -> int | None:
        """Start each child; an exit code when one cannot be started (the rest are stopped by run())."""
        for c in children:
            try:
                self._start(c)
            except OSError as exc:  # exec or log file failure: the ones already started are stopped
                self.say(f"FAILED: cannot start {c.name}: {exc}; stopping the others")
                return EXIT_CHILD_FAILED
        return None

    def _run(self) -> int:
        servers = [c for c in self.children if c.role != "router"]
        routers = [c for c in self.children if c.role == "router"]
        code = self._bring_up(servers, routers)
        if code is not None:
            return code
        urls = [c.health_url for c in routers + servers if c.health_url]
        self.say("stack is up" + (f": {urls[0].rsplit('/health', 1)[0]}" if urls else "") + " (Ctrl-C stops it)")
        return self._watch(wedge.detectors_for(servers, self.wedge_seconds))

    def _bring_up(self, servers: list[ChildSpec], routers: list[ChildSpec]) -> int | None:
        """Servers, their health and activation line, then the router; an exit code on the first failure."""
        code = self._start_all(servers)
        if code is not None:
            return code
        targets = [(c.name, c.health_url) for c in servers if c.health_url]
        if routers:
            targets += self.remote_health
        code = self._wait_healthy(targets, "servers") or self._check_activation(servers)
        if code is not None:
            return code
        code = self._start_all(routers)
        if code is not None:
            return code
        return self._wait_healthy([(c.name, c.health_url) for c in routers if c.health_url], "router")

    def _watch(self, detectors) -> int:
        """Until a signal, a child's death or a wedged server (the detectors scrape on their own thread)."""
        watch = wedge.WedgeWatch(detectors, self.poll_interval, self.say).start()
        try:
            while True:
                code = self._check_stop()
                if code is not None:
                    return code
                if watch.verdict:
                    self.say(f"FAILED: {watch.verdict}; stopping the stack")
                    return EXIT_CHILD_FAILED
                time.sleep(self.poll_interval)
        finally:
            watch.stop()
