"""Run the real :class:`Supervisor` in a process of its own, for tests that signal it.

``python -m tests.support.serve_supervisor_driver CHILDREN.json LOG_DIR GRACE``: the JSON
holds the ChildSpecs (``dataclasses.asdict``) a test built with the real ``build_plan``;
the exit status is the supervisor's. Signalling the test process itself would also hit
pytest; here only the supervisor (and, through it, the stack) is affected. Imports no SGLang.
"""

from __future__ import annotations

import json
import sys

from sglang_dsv4_ext.serving.launch_plan import ChildSpec
from sglang_dsv4_ext.serving.supervise import Supervisor


def main() -> int:
    children_file, log_dir, grace = sys.argv[1], sys.argv[2], float(sys.argv[3])
    with open(children_file) as f:
        children = [ChildSpec(**c) for c in json.load(f)]
    return Supervisor(children, log_dir, grace_period=grace, health_timeout=60).run()


if __name__ == "__main__":
    sys.exit(main())
