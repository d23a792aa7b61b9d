"""Activation refuses when SGLang's HookRegistry registered our hook but did not install it.

``HookRegistry.apply_hooks`` skips a target another plugin already got applied and logs nothing;
without activation's post-apply check the server would run with that fix missing. This runs SGLang's
real registry in a fresh interpreter (the registry is process-global).
"""

from __future__ import annotations

from tests.support.fresh_interpreter import last_json_line, run_python_ok


def test_a_target_preempted_by_another_plugin_is_refused_by_name():
    outcome = last_json_line(run_python_ok("-m", "tests.support.activation_preempted_target", timeout=300))
    assert outcome["activated"] is False
    assert outcome["error"] and "did not install our wrapper" in outcome["error"]
    assert outcome["victim"] in outcome["error"]
