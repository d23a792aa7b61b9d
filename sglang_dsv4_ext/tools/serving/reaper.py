"""Stop what ``serve`` started when ``serve`` itself dies without stopping it (SIGKILL, the OOM killer).

Why: serve stops its children's trees on every signal it can catch; SIGKILL it cannot catch. Its
children ask the kernel for SIGTERM on serve's death (:func:`process_tree.parent_death_signal`), which
stops SGLang's launcher and with it SGLang's own processes (its scheduler and detokenizer ask for
SIGKILL on their parent's death, and the launcher kills its process tree on the way out). What that
does not reach -- a descendant that left its process group or was orphaned, a child that ignores
SIGTERM -- this process stops, as serve would have.

How: serve starts it before any child, in a session of its own, and writes each process it learns of
to its stdin (``PID CREATE_TIME`` per line), then ``done`` once it stopped the stack itself. End of
input without ``done`` means serve is gone: SIGTERM to every recorded process still alive (identity
checked by its start time), to the later members of its process group and to its descendants;
SIGKILL to what is left after the grace period. Its lines go to serve's ``serve.log``.

Run by the supervisor only: ``python -m sglang_dsv4_ext.tools.serving.reaper GRACE_SECONDS SERVE_LOG``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from typing import IO, TextIO, cast

import psutil

from sglang_dsv4_ext.tools import exit_codes
from sglang_dsv4_ext.tools.serving import process_tree

DONE = "done"
# the directory that holds the sglang_dsv4_ext package (tools/serving/reaper.py is three levels below it)
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


class Link:
    """serve's end: starts the reaper and reports each process to it once."""

    def __init__(self, grace: float, log_path: str):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", __name__, repr(grace), log_path],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            env=env,
            text=True,
            start_new_session=True,  # no terminal signal reaches it; it outlives serve by design
        )
        self._pipe = cast(IO[str], self.proc.stdin)  # stdin=PIPE: never None
        self._told: set = set()
        self.problem: str | None = None  # set when the reaper cannot be reached any more

    def tell(self, procs: Iterable[psutil.Process]) -> None:
        lines = []
        for p in procs:
            try:
                key = (p.pid, p.create_time())
            except psutil.Error:
                continue
            if key not in self._told:
                self._told.add(key)
                lines.append(f"{key[0]} {key[1]!r}\n")
        self._write("".join(lines))

    def done(self) -> None:
        """serve stopped the stack itself: the reaper exits without touching anything."""
        self._write(DONE + "\n")
        try:
            self._pipe.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _write(self, text: str) -> None:
        if not text or self.problem:
            return
        try:
            self._pipe.write(text)
            self._pipe.flush()
        except (OSError, ValueError) as exc:  # the reaper died (or was killed): serve goes on without it
            self.problem = f"the reaper (pid {self.proc.pid}) is gone: {exc}"


def _log(log: TextIO, text: str) -> None:
    log.write(f"{time.strftime('%H:%M:%S')} [serve reaper] {text}\n")
    log.flush()


class _Known:
    """Processes serve reported, and the process groups they were in."""

    def __init__(self) -> None:
        self.procs: dict[int, psutil.Process] = {}
        self.groups: dict[int, float] = {}  # pgid -> earliest start time of a reported member

    def add(self, line: str) -> None:
        pid, created = line.split()
        try:
            proc = psutil.Process(int(pid))
            if abs(proc.create_time() - float(created)) > 0.01:
                return  # the pid was reused: not ours
            pgid = os.getpgid(proc.pid)
        except (psutil.Error, OSError):
            return  # already gone
        self.procs.setdefault(proc.pid, proc)
        self.groups[pgid] = min(self.groups.get(pgid, proc.create_time()), proc.create_time())

    def everything_left(self) -> list[psutil.Process]:
        """Recorded processes still alive, later members of their groups, and all their descendants."""
        found = {pid: p for pid, p in self.procs.items() if process_tree.alive(p)}
        for pgid, members in process_tree.process_groups().items():
            if pgid in self.groups:
                for p in members:
                    try:
                        if p.create_time() >= self.groups[pgid]:
                            found.setdefault(p.pid, p)
                    except psutil.Error:
                        continue
        for p in list(found.values()):
            try:
                for child in p.children(recursive=True):
                    found.setdefault(child.pid, child)
            except psutil.Error:
                continue
        found.pop(os.getpid(), None)
        return list(found.values())


def reap(procs: list[psutil.Process], grace: float, log: TextIO) -> list[psutil.Process]:
    """SIGTERM, then SIGKILL after ``grace`` seconds; what survived both."""
    if not procs:
        return []
    _log(log, f"serve is gone without stopping its children: SIGTERM to {', '.join(str(p.pid) for p in procs)}")
    for p in procs:
        process_tree.send(p, signal.SIGTERM)
    left = process_tree.wait_gone(procs, grace)
    if left:
        _log(log, f"SIGKILL after {grace:g} s to {', '.join(str(p.pid) for p in left)}")
        for p in left:
            process_tree.send(p, signal.SIGKILL)
        left = process_tree.wait_gone(left, 10.0)
    _log(log, "all stopped" if not left else f"still alive after SIGKILL: {', '.join(str(p.pid) for p in left)}")
    return left


def main(argv: list[str]) -> int:
    grace, log_path = float(argv[0]), argv[1]
    known = _Known()
    for line in sys.stdin:
        line = line.strip()
        if line == DONE:
            return exit_codes.OK
        if line:
            known.add(line)
    with open(log_path, "a") as log:
        return exit_codes.ATTENTION if reap(known.everything_left(), grace, log) else exit_codes.OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
