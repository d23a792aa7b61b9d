"""pytest plugin: run the extension's own tests against *patched SGLang sources*, plugin off.

Used by tests/integration/test_series_patches.py, which starts a pytest subprocess with
``-p tests.support.series_killswitch`` and a patched copy of the sglang package first on
``PYTHONPATH``. It makes sure the run tests the patch series and nothing else:

- the kill switch ``SGLANG_DSV4_EXT=0`` is put back after tests/conftest.py removed it (the
  conftest keeps the caller's shell out of the suite), so ``activate()`` patches nothing;
- at the end it records which ``sglang`` was imported, whether the extension activated and
  which targets carry a HookRegistry wrapper, in the JSON file named by
  ``$PATCHTOOL_KILLSWITCH_REPORT``; the parent test asserts on that record.
"""

from __future__ import annotations

import json
import os
import sys

KILL_SWITCH = "SGLANG_DSV4_EXT"
REPORT_ENV = "PATCHTOOL_KILLSWITCH_REPORT"


def pytest_configure(config):
    os.environ[KILL_SWITCH] = "0"


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get(REPORT_ENV)
    if not path:
        return
    record = {"kill_switch": os.environ.get(KILL_SWITCH), "sglang_file": None, "activated": None, "wrapped": []}
    sglang = sys.modules.get("sglang")
    if sglang is not None:
        record["sglang_file"] = getattr(sglang, "__file__", None)
    activation = sys.modules.get("sglang_dsv4_ext.runtime.activation")
    if activation is not None:
        record["activated"] = bool(activation.STATE.activated)
    registry = sys.modules.get("sglang.srt.plugins.hook_registry")
    if registry is not None:
        record["wrapped"] = sorted(getattr(registry.HookRegistry, "_patched", ()) or ())
    with open(path, "w") as fh:
        json.dump(record, fh)
