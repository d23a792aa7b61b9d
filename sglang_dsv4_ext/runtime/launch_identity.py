"""Which launch a piece of activation evidence belongs to: a process named by its pid and start time.

Why: a pid alone is reused, and evidence outlives its process (a log appended to by later starts,
a prometheus ``.db`` file in a shared ``PROMETHEUS_MULTIPROC_DIR``). A pid with the process's start
time, as the kernel reports it (``psutil.Process.create_time``), names one process once.

How: :func:`of_process` spells a process's identity ``<pid>@<start time>``. The launcher of a server
(the process SGLang's children are started from) puts its own identity into
:data:`ENV_LAUNCH` for them to inherit (:func:`sglang_dsv4_ext.runtime.activation.register`), so every
process of one launch reports the same ``launch=``; ``sglang-dsv4 serve`` knows each launcher's pid
and computes the same identity to tell this launch's evidence from an earlier one's.
"""

from __future__ import annotations

import os

# The launcher's identity, inherited by the processes of its launch (set by activation, never by hand).
ENV_LAUNCH = "SGLANG_DSV4_EXT_LAUNCH"


def of_process(pid: int | None = None) -> str:
    """``<pid>@<start time, seconds since the epoch, 2 decimals>`` of a running process (this one by default).

    Raises ``psutil.NoSuchProcess`` when the process is gone.
    """
    import psutil

    pid = os.getpid() if pid is None else pid
    return f"{pid}@{psutil.Process(pid).create_time():.2f}"


def same(a: str, b: str) -> bool:
    """Whether two identities name one process: the same pid, start times within a second.

    The processes of one launch inherit one string; an identity computed again elsewhere (serve, from
    the launcher's pid) may differ in the last digits: psutil derives start times from the boot time,
    which it reads from the wall clock once per process.
    """
    pid_a, _, start_a = a.partition("@")
    pid_b, _, start_b = b.partition("@")
    try:
        return pid_a == pid_b and abs(float(start_a) - float(start_b)) <= 1.0
    except ValueError:
        return False
