"""The signals that stop a command, handled alike by every command that must clean up first.

Why one list: ``serve`` stops its stack and ``repro run`` writes the summary of what finished on
SIGINT and SIGTERM, and a dropped SSH session sends SIGHUP, ``timeout -s QUIT`` SIGQUIT, a batch
system SIGUSR1 or SIGXCPU. A signal left at its default action ends the process on the spot: the
stack is orphaned, the summary never written. So each command takes every signal whose default
action would end it (:data:`FATAL_SIGNALS`), and a signal the process was started with ignored
(``nohup``, a background job of a non-interactive shell) stays ignored: the caller asked for that.

:func:`install` / :func:`restore` put a command's handler in place for its life; :func:`raising`
makes a stretch of blocking work (a read before anything was written) end at the signal with
:class:`Stopped`, which the command turns into its exit code (:func:`sglang_dsv4_ext.tools.exit_codes.for_signal`).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator

# Catchable signals whose default action ends a process. Left out: SIGKILL/SIGSTOP (cannot be
# caught), SIGPIPE (Python ignores it; a closed stdout is handled where we write), and the
# fault signals (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS) that report a bug in
# this process rather than a request to stop.
_FATAL_NAMES = (
    "SIGHUP",
    "SIGINT",
    "SIGQUIT",
    "SIGTERM",
    "SIGUSR1",
    "SIGUSR2",
    "SIGALRM",
    "SIGXCPU",
    "SIGXFSZ",
    "SIGVTALRM",
    "SIGPROF",
    "SIGIO",
    "SIGPWR",
    "SIGSTKFLT",
)
FATAL_SIGNALS: tuple[int, ...] = tuple(
    dict.fromkeys(int(getattr(signal, n)) for n in _FATAL_NAMES if hasattr(signal, n))
) + tuple(range(getattr(signal, "SIGRTMIN", 0), getattr(signal, "SIGRTMAX", -1) + 1))  # real-time: terminate

Handler = Callable[[int, object], None]


class Stopped(BaseException):
    """A fatal signal arrived inside :func:`raising`. A ``BaseException``, as ``KeyboardInterrupt`` is, so
    that no ``except Exception`` on the way (a library's, a "keep going" handler) swallows the stop."""

    def __init__(self, signum: int):
        super().__init__(signal_name(signum))
        self.signum = signum


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:  # a real-time signal between SIGRTMIN and SIGRTMAX
        return f"signal {signum}"


def install(handler: Handler) -> dict[int, object]:
    """``handler`` for every fatal signal not ignored now; returns the handlers it replaced.

    Outside the main thread (where Python cannot set handlers) nothing is installed.
    """
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {}
    for sig in FATAL_SIGNALS:
        if signal.getsignal(sig) == signal.SIG_IGN:  # nohup / background job: the caller asked to ignore it
            continue
        previous[sig] = signal.signal(sig, handler)
    return previous


def restore(previous: dict[int, object]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def _raise(signum: int, frame) -> None:
    raise Stopped(signum)


@contextlib.contextmanager
def raising() -> Iterator[None]:
    """Within: a fatal signal (not ignored) raises :class:`Stopped`, also out of a blocking read."""
    previous = install(_raise)
    try:
        yield
    finally:
        restore(previous)
