"""serve counts a server only once its log shows the extension active as configured, in this launch.

The servers are ``tests/support/serve_standin.py`` programs (real HTTP /health, real teed logs); they
are not SGLang: by default they print no activation line, which is exactly the failure to catch, and
with ``STANDIN_ACTIVATION_LINE`` they print what a launcher and its scheduler print, with the real
:func:`sglang_dsv4_ext.runtime.activation.activation_line` / ``launcher_line``.
"""

from __future__ import annotations

import io
import os
import sys

import pytest

from sglang_dsv4_ext.config import load_config, plugins_with_ours
from sglang_dsv4_ext.errors import ActivationError
from sglang_dsv4_ext.runtime import activation, launch_identity
from sglang_dsv4_ext.tools.serving import activation_check
from sglang_dsv4_ext.tools.serving.launch_plan import build_plan, format_plan
from sglang_dsv4_ext.tools.serving.preset import load_preset
from sglang_dsv4_ext.tools.serving.supervise import Supervisor
from tests.integration.test_serve_supervise import STANDIN, _preset
from tests.support.serve_helpers import sglang_args


def _supervise_stand_ins(tmp_path, router_dies=False, **preset_env):
    """Run a stand-in PD stack under the real supervisor with the activation check on: (exit code, its output)."""
    preset, _, _ = _preset(tmp_path, **preset_env)
    plan = build_plan(load_preset(preset), 0, sglang_args(), python=sys.executable, server_module=STANDIN)
    for child in plan.children:
        if child.role == "router":
            child.module = STANDIN
            if router_dies:
                child.env["STANDIN_DIE_AFTER"] = "1"
    out = io.StringIO()
    out.write(format_plan(plan) + "\n")  # what serve prints before it starts the plan
    rc = Supervisor(
        plan.children, str(tmp_path / "logs"), grace_period=1.0, out=out, require_activation_line=True
    ).run()
    return rc, out.getvalue()


def test_stack_without_activation_line_fails_naming_the_server(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLANG_PLUGINS", "some_other_plugin")
    rc, text = _supervise_stand_ins(tmp_path)
    assert rc == 1, text
    assert "FAILED: prefill-0: no 'sglang-dsv4-ext active:' line" in text
    assert "router is healthy" not in text  # the run never counted
    # The allowlist the children got names us, and serve said so.
    assert "every server gets SGLANG_PLUGINS='some_other_plugin,sglang_dsv4_ext'" in text


def test_servers_that_print_the_line_of_this_launch_count_and_another_launch_fails(tmp_path):
    """Found by review: a log that any launch had ever written the line into counted."""
    # The router ends the stack should the check let it start (it must not).
    rc, text = _supervise_stand_ins(
        tmp_path,
        prefill_env=', STANDIN_ACTIVATION_LINE = "this-launch"',
        decode_env=', STANDIN_ACTIVATION_LINE = "other-launch"',
        router_dies=True,
    )
    assert rc == 1, text
    assert "prefill-0: sglang-dsv4-ext active as configured" in text  # its launch: serve's own child
    assert (
        "FAILED: decode-0: " in text
        and "activation lines of launch 999@1577836800.00, not of the server's launch" in text
    )
    assert "router is healthy" not in text


LAUNCH = "4242@1764590000.00"


def _log(tmp_path, *texts, name="server.log"):
    path = tmp_path / name
    path.write_text(
        "# 2026-12-01 12:00:00 python -m sglang.launch_server --port 1\nINFO some sglang line\n"
        + "".join(t + "\n" for t in texts)
        + "INFO more\n"
    )
    return str(path)


def _line(monkeypatch, launch=LAUNCH, **env):
    monkeypatch.setattr(activation.STATE, "sglang_version", "0.5.23")
    monkeypatch.setattr(activation.STATE, "launch", launch)
    monkeypatch.setattr(activation.STATE, "index_k_built", [])  # as at activation: no pool built yet
    return activation.activation_line(load_config({"SGLANG_DSV4_INDEX_K_DTYPE": "bf16", **env}))


def test_the_real_activation_line_is_accepted_and_a_different_config_refused(tmp_path, monkeypatch):
    line = _line(monkeypatch)
    bf16 = activation_check.expected_fields({"SGLANG_DSV4_INDEX_K_DTYPE": "bf16"})
    fp8 = activation_check.expected_fields({"SGLANG_DSV4_INDEX_K_DTYPE": "fp8"})
    fields = activation_check.check_server_log("decode-0", _log(tmp_path, line), bf16, launch=LAUNCH)
    assert fields["index_k_dtype_requested"] == "bf16" and fields["launch"] == LAUNCH
    assert fields["index_k_dtype"] == activation.NONE_BUILT  # the line is printed before any pool is built
    # The same launch computed again by serve (psutil's boot time may move the start time by a fraction).
    assert activation_check.check_server_log("decode-0", _log(tmp_path, line), bf16, launch="4242@1764590000.31")
    with pytest.raises(ActivationError, match=r"decode-0: .*index_k_dtype_requested=bf16 \(expected fp8\)"):
        activation_check.check_server_log("decode-0", _log(tmp_path, line), fp8, launch=LAUNCH)
    with pytest.raises(ActivationError, match="cannot read its log"):
        activation_check.check_server_log("decode-0", os.path.join(str(tmp_path), "missing.log"), fp8)


@pytest.mark.parametrize("case, reason", [
    ("launcher-only", "only the launcher's 'configuration loaded' line, which proves nothing"),
    ("earlier-start", "no 'sglang-dsv4-ext active:' line in the current start"),
    ("ended", "the current start ended"),
    ("other-launch", "activation lines of launch 999@1577836800.00, not of the server's launch " + LAUNCH),
    ("two-launches", "activation lines of several launches"),
    ("other-version", "of sglang-dsv4-ext 0.1.0, not of this one"),
    ("old-line", "an activation line without index_k_dtype_requested, launch, process"),
])  # fmt: skip
def test_only_the_current_start_of_this_launch_is_evidence(case, reason, tmp_path, monkeypatch):
    line = _line(monkeypatch)
    cfg = load_config({"SGLANG_DSV4_INDEX_K_DTYPE": "bf16"})
    texts = {
        "launcher-only": [activation.launcher_line(cfg)],
        # the line belongs to the start before the last header (a restart that has not activated yet)
        "earlier-start": [line, "# 2026-12-01 13:00:00 python -m sglang.launch_server --port 1", "INFO loading"],
        "ended": [
            line,
            "[2026-12-01 12:30:00] Shutting down",
            f"{activation_check.OUTPUT_END_PREFIX} 2026-12-01 12:30:01: decode-0 closed its output (exited)",
        ],
        "other-launch": [_line(monkeypatch, launch="999@1577836800.00")],
        "two-launches": [line, _line(monkeypatch, launch="999@1577836800.00")],
        "other-version": [line.replace(f"version={activation.evidence_fields(cfg)['version']}", "version=0.1.0")],
        "old-line": [
            "sglang-dsv4-ext active: version=0.1.0 sglang=0.5.23 index_k_dtype=bf16 gate=auto "
            "fp4_budget=exact integrity=off pid=4243"
        ],
    }[case]
    expected = activation_check.expected_fields({"SGLANG_DSV4_INDEX_K_DTYPE": "bf16"})
    with pytest.raises(ActivationError) as refused:
        activation_check.check_server_log("decode-0", _log(tmp_path, *texts), expected, launch=LAUNCH)
    assert str(refused.value).startswith("decode-0: ") and reason in str(refused.value)


def test_serve_ends_each_start_of_a_child_log_with_an_end_line(tmp_path):
    """What makes an exited start recognisable to repro --serve-logs (the supervisor's tee writes it)."""
    preset, _, _ = _preset(tmp_path, prefill_env=', STANDIN_DIE_AFTER = "0.5"')
    plan = build_plan(load_preset(preset), 0, sglang_args(), python=sys.executable, server_module=STANDIN)
    rc = Supervisor(plan.children[:1], str(tmp_path / "logs"), grace_period=1.0, out=io.StringIO()).run()
    assert rc == 1
    [log] = (tmp_path / "logs").glob("prefill-0.log")
    last = log.read_text().splitlines()[-1]
    assert last.startswith(activation_check.OUTPUT_END_PREFIX) and "prefill-0 closed its output" in last


def test_a_launch_identity_names_one_process():
    assert launch_identity.of_process() == launch_identity.of_process(os.getpid())
    assert launch_identity.same("1@1.00", "1@1.90")  # one process, its start time computed twice
    assert not launch_identity.same("1@1.00", "2@1.00") and not launch_identity.same("1@1.00", "1@3.00")
    assert not launch_identity.same("1@1.00", "garbage")


@pytest.mark.parametrize(
    "value,expected", [(None, None), ("", None), ("a, sglang_dsv4_ext", None), ("a,b", "a,b,sglang_dsv4_ext")]
)
def test_plugins_with_ours(value, expected):
    env = {} if value is None else {"SGLANG_PLUGINS": value}
    assert plugins_with_ours(env) == expected
    if expected:  # and SGLang's own rule then admits us
        out = dict(env, SGLANG_PLUGINS=expected)
        assert activation.plugin_allowlist_block(out) is None and activation.plugin_allowlist_block(env)
