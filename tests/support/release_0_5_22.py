"""Run by tests/integration/test_release_0_5_22.py in a FRESH interpreter with SGLang 0.5.22 installed.

``python release_0_5_22.py SCENARIO`` prints one JSON object with what it observed. Everything is
SGLang 0.5.22's real machinery: ``load_plugins()`` calls our entry point, SGLang's own imports fire our
post-import hooks, its real pools are built on CPU.

real_drift: the table restricted to 0.5.23's rows (``SUPPORTED_SGLANG_VERSIONS`` without 0.5.22, as
a wheel written before 0.5.22 support would be) and ``SGLANG_DSV4_EXT_ALLOW_UNTESTED_SGLANG=1``:
SGLang 0.5.22 is then an untested release judged by 0.5.23's rows. A non-DSV4 pool builds with
nothing of ours on it; every drifted target is recorded with its difference; a DeepSeek-V4 pool
build is refused listing them.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from sglang_dsv4_ext.runtime import activation, compat  # noqa: E402


def _hooked_in_refused_modules() -> list:
    """Targets in the modules activation left stock that carry one of our hooks (the DSV4 build guard aside)."""
    refused = {name for name, state in activation.STATE.modules.items() if state == "refused"}
    found = []
    for target in compat.TARGETS:
        if target.module not in refused:
            continue
        try:
            current = compat.resolve(target.path)[2]
        except (ImportError, AttributeError, ValueError):
            continue
        if any(
            activation.carries_hook(current, h.fn)
            for h in activation.STATE.hooks
            if h.fn is not activation._before_dsv4_build
        ):
            found.append(target.path)
    return found


def real_drift() -> dict:
    compat.SUPPORTED_SGLANG_VERSIONS = ("0.5.23",)  # the table restricted to 0.5.23's rows
    import sglang.srt.plugins as plugins

    from tests.support.activation_scope import _warnings, build_dsv4_pool, build_mha_pool

    warnings = _warnings()
    with contextlib.redirect_stderr(io.StringIO()) as printed:
        plugins.load_plugins()
        build_mha_pool()  # a non-DeepSeek-V4 model's pool
        out = {
            "sglang": compat.installed_sglang_version(),
            "mha_pool_built": True,
            "lines": [line for line in printed.getvalue().splitlines() if line.startswith("sglang-dsv4-ext")],
        }
        # SGLang imports every target module a DeepSeek-V4 server needs (as its model runner would).
        for module_name in compat.target_modules(activation.table_in_force()):
            try:
                __import__(module_name)
            except ImportError:
                pass
        out["hooked_in_refused_modules"] = _hooked_in_refused_modules()
        out["activated_before_dsv4"] = activation.STATE.activated
        out["drifts"] = {d.target: d.describe() for d in compat.check_targets(activation.table_in_force())}
        # The names the hooks call (not wrapped), as the same untested release judges them.
        out["called_drifts"] = {
            d.target: d.describe() for d in compat.check_targets(compat.table_for("0.5.22", compat.CALLED))
        }
        try:
            build_dsv4_pool()
            out["dsv4_error"] = None
        except activation.ActivationError as exc:
            out["dsv4_error"] = str(exc)
    # A module SGLang no longer has is recorded when the DeepSeek-V4 build looks for it.
    out["details"] = dict(activation.STATE.details)
    out["refused_modules"] = sorted(n for n, state in activation.STATE.modules.items() if state == "refused")
    out["hooked_in_refused_modules_after"] = _hooked_in_refused_modules()
    out["warnings"] = warnings
    return out


if __name__ == "__main__":
    json.dump({"real_drift": real_drift}[sys.argv[1]](), sys.stdout)
