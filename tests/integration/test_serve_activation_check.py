"""serve counts a server only once its log shows the extension active as configured (real processes).

The servers are ``tests/support/serve_standin.py`` programs (real HTTP /health, real teed logs);
they are not SGLang and print no activation line, which is exactly the failure to catch. The
line itself is produced by the real :func:`sglang_dsv4_ext.activation.activation_line`.
"""

from __future__ import annotations

import io
import os
import sys

import pytest

from sglang_dsv4_ext import activation
from sglang_dsv4_ext.config import load_config
from sglang_dsv4_ext.errors import ActivationError
from sglang_dsv4_ext.serving import activation_check
from sglang_dsv4_ext.serving.launch_plan import build_plan
from sglang_dsv4_ext.serving.preset import load_preset
from sglang_dsv4_ext.serving.supervise import Supervisor
from tests.integration.test_serve_supervise import STANDIN, _preset
from tests.support.serve_helpers import sglang_args


def test_stack_without_activation_line_fails_naming_the_server(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLANG_PLUGINS", "some_other_plugin")
    preset, _, _ = _preset(tmp_path)
    plan = build_plan(load_preset(preset), 0, sglang_args(), python=sys.executable, server_module=STANDIN)
    for child in plan.children:
        if child.role == "router":
            child.argv[2] = STANDIN
    out = io.StringIO()
    rc = Supervisor(plan.children, str(tmp_path / "logs"), grace_period=1.0, out=out,
                    require_activation_line=True).run()
    text = out.getvalue()
    assert rc == 1, text
    assert "FAILED: prefill-0: no 'sglang-dsv4-ext active:' line" in text
    assert "router is healthy" not in text  # the run never counted
    # The allowlist the children got names us, and serve said so.
    assert "children get SGLANG_PLUGINS='some_other_plugin,sglang_dsv4_ext'" in text


def _log(tmp_path, text):
    path = tmp_path / "server.log"
    path.write_text("INFO some sglang line\n" + text + "\nINFO more\n")
    return str(path)


def test_the_real_activation_line_is_accepted_and_a_different_config_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(activation.STATE, "sglang_version", "0.5.23")
    line = activation.activation_line(load_config({"SGLANG_DSV4_INDEX_K_DTYPE": "bf16"}))
    bf16 = activation_check.expected_fields({"SGLANG_DSV4_INDEX_K_DTYPE": "bf16"})
    fp8 = activation_check.expected_fields({"SGLANG_DSV4_INDEX_K_DTYPE": "fp8"})
    assert activation_check.check_server_log("decode-0", _log(tmp_path, line), bf16)["index_k_dtype"] == "bf16"
    with pytest.raises(ActivationError, match=r"decode-0: .*index_k_dtype=bf16 \(expected fp8\)"):
        activation_check.check_server_log("decode-0", _log(tmp_path, line), fp8)
    with pytest.raises(ActivationError, match="cannot read its log"):
        activation_check.check_server_log("decode-0", os.path.join(str(tmp_path), "missing.log"), fp8)


@pytest.mark.parametrize("value,expected", [(None, None), ("", None), ("a, sglang_dsv4_ext", None),
                                            ("a,b", "a,b,sglang_dsv4_ext")])
def test_allowlisted_env(value, expected):
    env = {} if value is None else {"SGLANG_PLUGINS": value}
    out, note = activation_check.allowlisted_env(env)
    assert out.get("SGLANG_PLUGINS", value) == (expected or value)
    assert (note is None) == (expected is None)
    if expected:  # and SGLang's own rule then admits us
        assert activation.plugin_allowlist_block(out) is None and activation.plugin_allowlist_block(env)
