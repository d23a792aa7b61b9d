"""Processes by identity (psutil handles), shared by the supervisor and its reaper."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from collections.abc import Iterable

import psutil

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def alive(proc: psutil.Process) -> bool:
    """Running and not a zombie (psutil also guards against a reused pid)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def send(proc: psutil.Process, sig: int) -> None:
    try:
        proc.send_signal(sig)
    except psutil.Error:  # gone meanwhile, or not ours to signal
        pass


def process_groups() -> dict[int, list[psutil.Process]]:
    """Every process by process group, one pass over the process table."""
    groups: dict[int, list[psutil.Process]] = {}
    for p in psutil.process_iter():
        try:
            groups.setdefault(os.getpgid(p.pid), []).append(p)
        except OSError:  # exited meanwhile
            continue
    return groups


def wait_gone(procs: Iterable[psutil.Process], seconds: float) -> list[psutil.Process]:
    """Wait up to ``seconds`` for ``procs`` to end; those still alive."""
    deadline = time.monotonic() + seconds
    while True:
        left = [p for p in procs if alive(p)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


def parent_death_signal(sig: int = signal.SIGTERM):
    """A ``preexec_fn`` that makes the kernel send ``sig`` to the child when this process dies (Linux
    ``prctl(PR_SET_PDEATHSIG)``); None elsewhere. The signal follows the *thread* that forked the
    child, so children must be started from the main thread (the supervisor's is)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before the fork: the child only calls it
    parent = os.getpid()

    def request() -> None:
        prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died between fork and prctl: the kernel will not tell us
            os.kill(os.getpid(), sig)

    return request
