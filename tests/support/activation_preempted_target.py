"""Run in a FRESH interpreter by tests/integration/test_activation_verify.py.

The scenario activation's post-apply check exists for: another plugin hooked one of our targets
and ``HookRegistry.apply_hooks()`` ran before our plugin registered. SGLang's registry then skips
the target on our apply (``if target in cls._patched: continue``) without a word, so our hook is
registered but never installed. Everything here is SGLang's real plugin machinery; the "other
plugin" is a plain AFTER hook registered through the same public API.

Prints one JSON object: the activation error (or None) and whether our wrapper is on the target.
"""

from __future__ import annotations

import json
import sys

from sglang_dsv4_ext.errors import ActivationError
from sglang_dsv4_ext.runtime import activation, compat

VICTIM = compat.LOGICAL_HOST_POOL_INIT  # a row every supported release has


def _other_plugins_hook(result, *args, **kwargs):
    return None


def main() -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookSource, HookType

    HookRegistry.register(
        VICTIM.path,
        _other_plugins_hook,
        HookType.AFTER,
        source=HookSource(plugin_name="another_plugin", dist_name="another-plugin"),
    )
    HookRegistry.apply_hooks()
    try:
        activation.activate()
        error = None
    except ActivationError as exc:
        error = str(exc)
    json.dump({"victim": VICTIM.path, "error": error, "activated": activation.STATE.activated}, sys.stdout)


if __name__ == "__main__":
    main()
