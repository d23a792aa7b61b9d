"""serve's two activation guarantees: SGLang will load the extension, and each server says it did.

Why: with ``SGLANG_PLUGINS`` set to a list without ``sglang_dsv4_ext``, SGLang's loader skips our
entry point in every process (sglang/srt/plugins/__init__.py): index-K stays fp8, no gate, no
error. serve therefore (1) adds our name to an allowlist it passes on, saying so (the launch plan does:
:func:`sglang_dsv4_ext.tools.serving.launch_plan.build_plan`, so the dry run and ``commands.sh`` show it), and
(2) counts a server as up only once its log shows the extension active, with the configuration serve
asked for, in this launch of the server.

How: :func:`check_server_log` reads a child's teed log (serve-logs/<time>/<name>.log). serve appends to a
log (a restart, a reused ``--log-dir``), so only the part after the last start header counts (the
current start), and it must not end with the end-of-output line serve writes once the child closed its
output (the server exited). In it, every ``sglang-dsv4-ext active:`` line
(:func:`sglang_dsv4_ext.runtime.activation.activation_line`, printed only by a process that passed the
DeepSeek-V4 build check; the launcher's "configuration loaded" line proves nothing) must carry every
field, this sglang-dsv4-ext's version, one launch (the launcher's identity, which serve knows from the
pid it started: :mod:`sglang_dsv4_ext.runtime.launch_identity`) and the expected configuration. repro calls
:func:`check_server_log` on serve's log directory with the launch the server answering now reports.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from sglang_dsv4_ext.config import SHOWN_FIELDS
from sglang_dsv4_ext.errors import ActivationError
from sglang_dsv4_ext.runtime import launch_identity
from sglang_dsv4_ext.runtime.activation import (
    ACTIVATION_LINE_PREFIX,
    EVIDENCE_FIELDS,
    LAUNCHER_LINE_PREFIX,
    REQUESTED_DTYPE_FIELD,
)

_FIELD = re.compile(r"(\w+)=(\S+)")
CHECKED_FIELDS = SHOWN_FIELDS  # the configuration the line shows: index_k_dtype, gate, fp4_budget, integrity
# Where the line shows a configuration field: the configuration's index-K dtype is the line's requested one (its
# index_k_dtype is the dtype of the pool built, none-built when the line is printed, before any pool).
_LINE_FIELD = {"index_k_dtype": REQUESTED_DTYPE_FIELD}
# The header serve writes before each start of a child (tools/serving/supervise.py, start_header), and the
# line it appends once the child closed its output.
START_HEADER = re.compile(r"^# (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) (.*)$")
OUTPUT_END_PREFIX = "# end of output"


def current_start(log_text: str) -> tuple[str | None, list[str]]:
    """(the date of the last start header or None, the lines after it: the whole log when it has none)."""
    lines = log_text.splitlines()
    for index in range(len(lines) - 1, -1, -1):
        match = START_HEADER.match(lines[index])
        if match:
            return match.group(1), lines[index + 1 :]
    return None, lines


def activation_fields(log_text: str) -> dict[str, str] | None:
    """The fields of the last activation line of the current start, or None if it has none."""
    found = _active_lines(current_start(log_text)[1])
    return found[-1] if found else None


def _active_lines(lines: list[str]) -> list[dict[str, str]]:
    return [
        dict(_FIELD.findall(line.split(ACTIVATION_LINE_PREFIX, 1)[1]))
        for line in lines
        if ACTIVATION_LINE_PREFIX in line
    ]


def _read(name: str, log_path: str) -> str:
    try:
        with open(log_path, errors="replace") as f:
            return f.read()
    except OSError as exc:
        raise ActivationError(f"{name}: cannot read its log {log_path}: {exc}") from exc


def _no_line(name: str, log_path: str, lines: list[str]) -> ActivationError:
    launcher = any(LAUNCHER_LINE_PREFIX in line for line in lines)
    return ActivationError(
        f"{name}: no '{ACTIVATION_LINE_PREFIX}' line in the current start of {log_path}"
        + (
            " (only the launcher's 'configuration loaded' line, which proves nothing: no process of this start "
            "passed the DeepSeek-V4 build check)"
            if launcher
            else ""
        )
        + ": the extension did not activate in this server (SGLANG_PLUGINS? SGLANG_DSV4_EXT=0? another "
        "interpreter? an untested SGLang, see its warning in the log?); results would be stock SGLang"
    )


def _refusal(lines: list[str], found: list[dict[str, str]], launch: str | None) -> str | None:
    """Why the current start's activation lines are not evidence of this launch, or None."""
    from sglang_dsv4_ext import __version__

    if any(line.startswith(OUTPUT_END_PREFIX) for line in lines):
        return "the current start ended (serve's end-of-output line: the server exited)"
    incomplete = [f for f in found if not set(EVIDENCE_FIELDS) <= set(f)]
    if incomplete:
        missing = sorted(set(EVIDENCE_FIELDS) - set(incomplete[0]))
        return f"an activation line without {', '.join(missing)} (not written by this sglang-dsv4-ext)"
    versions = sorted({f["version"] for f in found} - {__version__})
    if versions:
        return f"an activation line of sglang-dsv4-ext {'/'.join(versions)}, not of this one ({__version__})"
    launches = sorted({f["launch"] for f in found})
    if len(launches) > 1:
        return f"activation lines of several launches ({', '.join(launches)})"
    if launch is not None and not launch_identity.same(launches[0], launch):
        return f"activation lines of launch {launches[0]}, not of the server's launch {launch}"
    return None


def check_server_log(
    name: str, log_path: str, expected: Mapping[str, str], launch: str | None = None
) -> dict[str, str]:
    """Raise :class:`ActivationError` naming the server unless the current start of its log shows the
    extension active, in launch ``launch`` when given, with ``expected``; return the last line's fields."""
    date, lines = current_start(_read(name, log_path))
    found = _active_lines(lines)
    if not found:
        raise _no_line(name, log_path, lines)
    reason = _refusal(lines, found, launch)
    if reason:
        started = f" (started {date})" if date else ""
        raise ActivationError(f"{name}: {log_path}{started} is not evidence of this server's activation: {reason}")
    fields = found[-1]
    wrong = {
        _LINE_FIELD.get(k, k): (f.get(_LINE_FIELD.get(k, k)), v)
        for f in found
        for k, v in expected.items()
        if k in CHECKED_FIELDS and f.get(_LINE_FIELD.get(k, k)) != v
    }
    if wrong:
        detail = ", ".join(f"{k}={got} (expected {want})" for k, (got, want) in wrong.items())
        raise ActivationError(f"{name}: the extension is active with a different configuration: {detail} ({log_path})")
    return fields


def expected_fields(ext_env: Mapping[str, str]) -> dict[str, str]:
    """What a child started with ``ext_env`` (ExtConfig.to_env()) must report."""
    from sglang_dsv4_ext.config import load_config

    cfg = load_config(ext_env)
    return {name: getattr(cfg, name) for name in CHECKED_FIELDS}
