"""serve's two activation guarantees: SGLang will load the extension, and each server says it did.

Why: with ``SGLANG_PLUGINS`` set to a list without ``sglang_dsv4_ext``, SGLang's loader skips our
entry point in every process (sglang/srt/plugins/__init__.py): index-K stays fp8, no gate, no
error. serve therefore (1) adds our name to an allowlist it passes on, saying so, and (2) counts a
server as up only once its log carries the activation line with the configuration serve asked for.

How: :func:`allowlisted_env` returns the child environment with our name appended;
:func:`check_server_log` reads a child's teed log (serve-logs/<time>/<name>.log) and compares the
``sglang-dsv4-ext active:`` line (:func:`sglang_dsv4_ext.activation.activation_line`) with the
expected configuration. repro can call :func:`check_server_log` on serve's log directory.
"""

from __future__ import annotations

import re
from typing import Dict, Mapping, Optional, Tuple

from sglang_dsv4_ext.activation import ACTIVATION_LINE_PREFIX, ENV_SGLANG_PLUGINS, PLUGIN_NAME
from sglang_dsv4_ext.errors import ActivationError

_FIELD = re.compile(r"(\w+)=(\S+)")
CHECKED_FIELDS = ("index_k_dtype", "gate", "fp4_budget", "integrity")


def allowlisted_env(env: Mapping[str, str]) -> Tuple[Dict[str, str], Optional[str]]:
    """``env`` with our name added to a non-empty ``SGLANG_PLUGINS`` that lacks it, and a note saying so."""
    out = dict(env)
    raw = out.get(ENV_SGLANG_PLUGINS) or ""
    names = [x.strip() for x in raw.split(",") if x.strip()]
    if not names or PLUGIN_NAME in names:
        return out, None
    out[ENV_SGLANG_PLUGINS] = ",".join(names + [PLUGIN_NAME])
    return out, (f"{ENV_SGLANG_PLUGINS}={raw!r} does not name {PLUGIN_NAME}: children get "
                 f"{ENV_SGLANG_PLUGINS}={out[ENV_SGLANG_PLUGINS]!r}")


def activation_fields(log_text: str) -> Optional[Dict[str, str]]:
    """The fields of the last activation line in a log, or None if there is none."""
    lines = [line for line in log_text.splitlines() if ACTIVATION_LINE_PREFIX in line]
    if not lines:
        return None
    return dict(_FIELD.findall(lines[-1].split(ACTIVATION_LINE_PREFIX, 1)[1]))


def check_server_log(name: str, log_path: str, expected: Mapping[str, str]) -> Dict[str, str]:
    """Raise :class:`ActivationError` naming the server unless its log shows activation with ``expected``."""
    try:
        with open(log_path, errors="replace") as f:
            fields = activation_fields(f.read())
    except OSError as exc:
        raise ActivationError(f"{name}: cannot read its log {log_path}: {exc}") from exc
    if fields is None:
        raise ActivationError(
            f"{name}: no '{ACTIVATION_LINE_PREFIX}' line in {log_path}: the extension did not activate in "
            f"this server (SGLANG_PLUGINS? SGLANG_DSV4_EXT=0? another interpreter? an untested SGLang, see its "
            f"warning in the log?); results would be stock SGLang"
        )
    wrong = {k: (fields.get(k), v) for k, v in expected.items() if k in CHECKED_FIELDS and fields.get(k) != v}
    if wrong:
        detail = ", ".join(f"{k}={got} (expected {want})" for k, (got, want) in wrong.items())
        raise ActivationError(f"{name}: the extension is active with a different configuration: {detail} ({log_path})")
    return fields


def expected_fields(ext_env: Mapping[str, str]) -> Dict[str, str]:
    """What a child started with ``ext_env`` (ExtConfig.to_env()) must report."""
    from sglang_dsv4_ext.config import load_config

    cfg = load_config(ext_env)
    return {"index_k_dtype": cfg.index_k_dtype, "gate": cfg.gate, "fp4_budget": cfg.fp4_budget,
            "integrity": cfg.integrity}
