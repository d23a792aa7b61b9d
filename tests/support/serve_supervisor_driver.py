"""Run the real :class:`Supervisor` in a process of its own, for tests that signal it.

``python -m tests.support.serve_supervisor_driver CHILDREN.json LOG_DIR GRACE [options]``: the JSON
holds the ChildSpecs (``dataclasses.asdict``) a test built with the real ``build_plan``; the exit
status is the supervisor's. Signalling the test process itself would also hit pytest; here only the
supervisor (and, through it, the stack) is affected. Imports no SGLang.

Signal dispositions are inherited: started under ``nohup`` or as a background job of a
non-interactive shell, this process would begin with SIGHUP (or SIGINT and SIGQUIT) ignored, and
the supervisor rightly keeps an inherited ignore. ``--default-signals`` gives the supervisor the
dispositions a test exercises, however the test run was started; ``--ignored-signals`` gives it an
inherited ignore on purpose.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys

from sglang_dsv4_ext.tools.serving.launch_plan import ChildSpec
from sglang_dsv4_ext.tools.serving.supervise import Supervisor


def _signals(names: str):
    return [signal.Signals[n] for n in names.split(",") if n]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("children_file")
    parser.add_argument("log_dir")
    parser.add_argument("grace", type=float)
    parser.add_argument("--wedge-timeout", type=float, default=None)
    parser.add_argument("--default-signals", default="", help="comma list of names set to SIG_DFL before start")
    parser.add_argument("--ignored-signals", default="", help="comma list of names set to SIG_IGN before start")
    args = parser.parse_args()
    for sig in _signals(args.default_signals):
        signal.signal(sig, signal.SIG_DFL)
    for sig in _signals(args.ignored_signals):
        signal.signal(sig, signal.SIG_IGN)
    with open(args.children_file) as f:
        children = [ChildSpec(**c) for c in json.load(f)]
    return Supervisor(
        children, args.log_dir, grace_period=args.grace, health_timeout=60, wedge_seconds=args.wedge_timeout
    ).run()


if __name__ == "__main__":
    sys.exit(main())
