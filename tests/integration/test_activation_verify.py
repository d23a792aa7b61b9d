"""Activation refuses when SGLang's HookRegistry registered our hook but did not install it.

``HookRegistry.apply_hooks`` skips a target another plugin already got applied and logs nothing;
without activation's post-apply check the server would run with that fix missing. This runs SGLang's
real registry in a fresh interpreter (the registry is process-global).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_target_preempted_by_another_plugin_is_refused_by_name():
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_DSV4")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.activation_preempted_target"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    outcome = json.loads(proc.stdout)
    assert outcome["activated"] is False
    assert outcome["error"] and "did not install our wrapper" in outcome["error"]
    assert outcome["victim"] in outcome["error"]
