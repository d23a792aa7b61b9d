"""Run in a FRESH interpreter by tests/integration/test_activation.py: SGLang's real load_plugins() and entry points.

Prints one JSON object with what each phase observed. Phases run in one process (each SGLang
import costs ~10 s) and reset SGLang's once-per-process loader flag between them.
"""

from __future__ import annotations

import json
import os
import sys

from sglang_dsv4_ext.config import ENV_GATE, ENV_INDEX_K_DTYPE, ENV_KILL_SWITCH
from sglang_dsv4_ext.runtime import activation, compat

PROBE_TARGETS = [
    t.path for t in (compat.INDEXER_BYTES_PER_TOKEN, compat.MAKE_INDEXER_POOL, compat.SUBPOOL_INDEX_K_READERS[0])
]


def wrapped_targets():
    """Table targets whose current function differs from SGLang's original (i.e. carry any wrapper)."""
    out = []
    for target in compat.installed_table():
        _, _, current = compat.resolve(target.path)
        # HookRegistry's wrappers live in hook_registry.py; SGLang's own decorators (e.g. the
        # host pools' @synchronized) also set __wrapped__ and must not count.
        code = getattr(current, "__code__", None)
        if hasattr(current, "__wrapped__") and code is not None and code.co_filename.endswith("hook_registry.py"):
            out.append(target.path)
    return out


def load_plugins_fresh():
    import sglang.srt.plugins as plugins
    from sglang.srt.plugins.hook_registry import HookRegistry

    plugins._plugins_loaded = False
    activation.reset_for_tests()
    try:
        plugins.load_plugins()
        return None, {t: list(HookRegistry._hooks.get(t, ())) != [] for t in PROBE_TARGETS}
    except SystemExit as exc:
        return str(exc), {t: list(HookRegistry._hooks.get(t, ())) != [] for t in PROBE_TARGETS}


def clear_env():
    for name in (
        ENV_KILL_SWITCH,
        ENV_INDEX_K_DTYPE,
        ENV_GATE,
        "SGLANG_DSV4_BF16_INDEX_K",
        "SGLANG_DSV4_EXT_ALLOW_UNTESTED_SGLANG",
    ):
        os.environ.pop(name, None)


def main():
    import importlib.metadata as md

    result = {"entry_points": [f"{ep.name}={ep.value}" for ep in md.entry_points(group="sglang.srt.plugins")]}
    originals = {}
    for target in compat.installed_table():
        _, _, fn = compat.resolve(target.path)
        originals[target.path] = fn
    # Resolving the table imported SGLang's DeepSeek-V4 model module before any load_plugins(): where
    # the startup hook (.pth) is installed, it has guarded the model's constructor already, whatever the
    # configuration. Phases 2-3 report what *they* wrapped beyond that.
    startup_guarded = wrapped_targets()
    result["startup_guarded"] = startup_guarded

    def wrapped_by_phase():
        return [path for path in wrapped_targets() if path not in startup_guarded]

    # 1. Kill switch: SGLang untouched (identity of every table target).
    clear_env()
    os.environ[ENV_KILL_SWITCH] = "0"
    error, registered = load_plugins_fresh()
    result["kill_switch"] = {
        "error": error,
        "registered": registered,
        "identical": all(compat.resolve(t.path)[2] is originals[t.path] for t in compat.installed_table()),
    }

    # 2. Invalid configuration values: a clear SystemExit naming the variable, nothing patched.
    invalid = {}
    for name, value in [
        (ENV_INDEX_K_DTYPE, "int8"),
        (ENV_GATE, "always"),
        (ENV_KILL_SWITCH, "yes"),
        ("SGLANG_DSV4_BF16_INDEX_K", "2"),
        ("SGLANG_DSV4_EXT_ALLOW_UNTESTED_SGLANG", "true"),
    ]:
        clear_env()
        os.environ[name] = value
        error, registered = load_plugins_fresh()
        invalid[f"{name}={value}"] = {"error": error, "registered": registered, "wrapped": wrapped_by_phase()}
    clear_env()
    os.environ[ENV_INDEX_K_DTYPE] = "fp8"
    os.environ["SGLANG_DSV4_BF16_INDEX_K"] = "1"
    error, registered = load_plugins_fresh()
    invalid["contradiction"] = {"error": error, "registered": registered, "wrapped": wrapped_by_phase()}
    result["invalid"] = invalid

    # 3. A drifted table (one signature changed in a copy of the table): refused, nothing patched.
    clear_env()
    activation.reset_for_tests()
    drifted = compat.installed_table()
    index = [t.path for t in drifted].index(compat.MAKE_INDEXER_POOL.path)
    victim = drifted[index]
    changed = victim.signature.replace("force_fp4=False", "force_fp4=True")
    assert changed != victim.signature
    drifted[index] = compat.Target(victim.path, changed, victim.area, victim.feature, victim.why)
    try:
        activation.activate(targets=drifted)
        result["drift"] = {"error": None}
    except activation.ActivationError as exc:
        result["drift"] = {
            "error": str(exc),
            "victim": victim.path,
            "wrapped": wrapped_by_phase(),
            "status": activation.STATE.statuses.get(victim.path),
        }

    # 3b. A drifted name the hooks call (not wrap): refused the same way, naming it, nothing patched.
    clear_env()
    activation.reset_for_tests()
    called = compat.table_for(compat.installed_sglang_version(), compat.CALLED)  # the running release's rows
    victim = next(t for t in called if t.attribute == "_forward_prepare_normal")
    changed = victim.signature.replace("skip_compressor=False", "skip_compressor=True")  # on every release
    assert changed != victim.signature
    called[called.index(victim)] = compat.Target(victim.path, changed, victim.area, victim.feature, victim.why)
    try:
        activation.activate(called=called)
        result["called_drift"] = {"error": None}
    except activation.ActivationError as exc:
        result["called_drift"] = {"error": str(exc), "victim": victim.path, "wrapped": wrapped_by_phase()}

    # 4. Default configuration through the real entry point: every hook applied and verified.
    clear_env()
    error, registered = load_plugins_fresh()
    state = activation.STATE
    result["default"] = {
        "error": error,
        "activated": state.activated,
        "statuses": state.statuses,
        "wrapped": wrapped_targets(),
    }
    # 5. Idempotent: SGLang calls load_plugins in several places; a second activate is a no-op.
    again = activation.activate()
    result["idempotent"] = again is state and wrapped_targets() == result["default"]["wrapped"]
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
