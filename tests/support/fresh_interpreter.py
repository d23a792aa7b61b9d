"""Run Python in a fresh interpreter, from the repository root, with this tree first on its path.

For what a test process cannot show about itself: what is decided once per process (entry-point discovery,
SGLang's plugin loader and hook registry, activation), what a Python start runs (``.pth`` files), and a
crash or a hang that must end the child, not the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What the caller's shell may set and would decide for the child: the extension's settings, SGLang's plugin
# allowlist, and a multiprocess metrics folder (prometheus_client would write the child's gauges there).
_NOT_INHERITED_PREFIX = "SGLANG_DSV4_"
_NOT_INHERITED = ("SGLANG_PLUGINS", "PROMETHEUS_MULTIPROC_DIR")


def child_env(**settings: str) -> dict[str, str]:
    """This process's environment without the settings above, this tree first on PYTHONPATH, plus ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_NOT_INHERITED_PREFIX) and k not in _NOT_INHERITED}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.update(settings)
    return env


def run_python(
    *args: str, env: dict[str, str] | None = None, python: str = sys.executable, timeout: float = 600
) -> subprocess.CompletedProcess:
    """``python ARGS`` (``-c CODE``, ``-m MODULE``, a script) in ``env`` (default :func:`child_env`), output as text."""
    return subprocess.run(
        [python, *args],
        cwd=ROOT,
        env=child_env() if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_python_ok(*args: str, **run_args) -> subprocess.CompletedProcess:
    """:func:`run_python` that must exit 0; otherwise the test fails showing the end of the child's stderr."""
    proc = run_python(*args, **run_args)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def last_json_line(proc: subprocess.CompletedProcess):
    """The JSON value a child printed as its last line of stdout."""
    return json.loads(proc.stdout.strip().splitlines()[-1])
