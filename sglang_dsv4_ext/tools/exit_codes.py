"""Exit codes of every ``sglang-dsv4`` command, defined once.

A wrapper script (CI, a cluster job) can rely on these across subcommands:

* ``OK`` (0): the command did what was asked and found nothing to report.
* ``ATTENTION`` (1): the command ran, and something needs the operator's attention: a check
  failed, a served child died, a series needs work.
* ``USAGE`` (2): bad input (a flag, a file, a directory); nothing was run and nothing was
  written. argparse uses the same code for its own errors.
* ``FINDING`` (3): a run finished and found what the caller asked to be told about
  (``repro --fail-on-corruption``, ``--fail-if-significant``).
* ``NOT_COMPARABLE`` (4): an A/B finished, but its evidence does not show it compared what it was
  asked (both sides report the same index-K dtype, a side's state or built dtype is unknown, a
  server restarted during the run, the sides parse through different paths), and the caller asked
  to be told (``repro compare``/``ab``/``report --fail-if-not-comparable``).
* ``for_signal(signum)`` (128 + signal number, e.g. 130 for SIGINT, 143 for SIGTERM): the
  command stopped because of that signal after cleaning up (the shell's convention).
"""

from __future__ import annotations

OK = 0
ATTENTION = 1
USAGE = 2
FINDING = 3
NOT_COMPARABLE = 4

_SIGNAL_BASE = 128


def for_signal(signum: int) -> int:
    """The exit code a shell reports for a process stopped by ``signum``."""
    return _SIGNAL_BASE + int(signum)
