"""SGLANG_PLUGINS without our name: SGLang's real loader skips us, and doctor says so (fresh processes).

Fresh interpreters are the point: entry-point discovery and SGLang's once-per-process loader flag.
Each child runs SGLang's real ``load_plugins()`` against the installed entry points.
"""

from __future__ import annotations

import json

import pytest

from sglang_dsv4_ext.runtime import compat
from tests.support.fresh_interpreter import child_env, last_json_line, run_python, run_python_ok

_LOAD = r"""
import json, sys, sglang.srt.plugins as plugins
from sglang_dsv4_ext.runtime import activation
plugins.load_plugins()
print(json.dumps({"loaded": activation.STATE.loaded}))
"""


def _env(plugins_value: str) -> dict[str, str]:
    return child_env(SGLANG_DSV4_INDEX_K_DTYPE="bf16", SGLANG_PLUGINS=plugins_value)


@pytest.mark.parametrize(
    "plugins_value,expect_active", [("some_other_plugin", False), ("some_other_plugin, sglang_dsv4_ext", True)]
)
def test_sglang_loader_honours_the_allowlist_and_the_launcher_line_shows_the_configuration(
    plugins_value, expect_active
):
    proc = run_python_ok("-c", _LOAD, env=_env(plugins_value))
    assert last_json_line(proc) == {"loaded": expect_active}
    lines = [line for line in proc.stderr.splitlines() if line.startswith("sglang-dsv4-ext")]
    if expect_active:
        # A launcher built nothing: it says which configuration it passes on, never "active".
        assert len(lines) == 1 and lines[0].startswith("sglang-dsv4-ext configuration loaded (launcher):")
        assert "index_k_dtype_requested=bf16" in lines[0] and "gate=auto" in lines[0]
        assert "index_k_dtype=none-built" in lines[0]  # the index-K dtype of a pool it built: none
    else:
        assert lines == []  # nothing in the log says the extension is there: hence doctor


@pytest.mark.parametrize(
    "plugins_value, said",
    [
        ("some_other_plugin", "SGLang loads only the plugins named there"),
        (" , ", "names no plugin, so SGLang loads none"),  # found in review: doctor said "allowed"
    ],
)
def test_doctor_reports_blocked_and_exits_non_zero(plugins_value, said):
    proc = run_python("-m", "sglang_dsv4_ext.tools.cli", "doctor", "--json", env=_env(plugins_value))
    assert proc.returncode == 1, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert f"blocked by SGLANG_PLUGINS={plugins_value!r}: {said}" in report["error"]
    assert report["plugin_allowlist"] != "allowed"
    assert report["activated"] is False
    in_release = {t.path for t in compat.installed_table()}  # a row of another release reads not-in-release
    assert {row["status"] for row in report["targets"] if row["target"] in in_release} == {"blocked"}
    assert "Traceback" not in proc.stderr
