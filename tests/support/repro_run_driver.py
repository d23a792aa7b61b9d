"""Run ``sglang-dsv4 ARGV...`` in a process of its own with the signal dispositions a test exercises.

``python -m tests.support.repro_run_driver [--default-signals A,B] [--ignored-signals C] -- ARGV...``;
the exit status is the command's. Imports no SGLang.

Signal dispositions are inherited: started under ``nohup`` or as a background job of a
non-interactive shell, a child begins with SIGHUP (or SIGINT and SIGQUIT) ignored, and ``repro run``
rightly keeps an inherited ignore. ``--default-signals`` gives the command the dispositions of a
foreground start (SIGINT: Python's own ``KeyboardInterrupt`` handler; others: the default action),
however the test run was started; ``--ignored-signals`` gives it an inherited ignore on purpose.
"""

from __future__ import annotations

import argparse
import signal
import sys

from sglang_dsv4_ext.tools.cli import main as cli_main


def _signals(names: str):
    return [signal.Signals[n] for n in names.split(",") if n]


def main(argv) -> int:
    split = argv.index("--")
    parser = argparse.ArgumentParser()
    parser.add_argument("--default-signals", default="", help="comma list of names given their start disposition")
    parser.add_argument("--ignored-signals", default="", help="comma list of names set to SIG_IGN")
    args = parser.parse_args(argv[:split])
    for sig in _signals(args.default_signals):
        signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
    for sig in _signals(args.ignored_signals):
        signal.signal(sig, signal.SIG_IGN)
    return cli_main(argv[split + 1 :])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
