"""Which SGLang 0.5.23 entry points load plugins, and what the extension does where they do not.

SGLang runs plugins only where its code calls ``sglang.srt.plugins.load_plugins()``. A process started
another way builds its model with stock SGLang unless the startup hook (:mod:`sglang_dsv4_ext.runtime.bootstrap`)
runs in its interpreter. ``doctor`` prints this table; ``tests/integration/test_entry_points.py`` checks
it against the installed SGLang's source (every file that calls ``load_plugins()``).
"""

from __future__ import annotations

# (what an operator starts, the SGLang file that calls load_plugins() in it)
LOAD_PLUGINS = (
    ("python -m sglang.launch_server", "launch_server.py"),
    ("sglang serve", "cli/serve.py"),
    ("sglang.Engine (offline use; the servers above run one)", "srt/entrypoints/engine.py"),
    ("the scheduler processes", "srt/managers/scheduler.py"),
    ("the DP controller process", "srt/managers/data_parallel_controller.py"),
    ("the detokenizer process", "srt/managers/detokenizer_manager.py"),
)
# (what an operator starts, the SGLang file it runs, which never calls load_plugins())
NEVER_LOAD_PLUGINS = (
    ("python -m sglang.benchmark.one_batch", "benchmark/one_batch.py"),
    (
        "--use-ray: the Ray scheduler actors (the driver loads plugins, the actors build the model)",
        "srt/ray/scheduler_actor.py",
    ),
)


def report() -> dict[str, object]:
    """doctor's ``entry_points``: both lists and whether the startup hook runs in this interpreter."""
    from sglang_dsv4_ext.runtime import bootstrap

    hook = (
        "installed: in those entry points the DeepSeek-V4 model build calls load_plugins() first"
        if bootstrap.installed()
        else "NOT running in this interpreter (sglang_dsv4_ext-bootstrap.pth is not in its site-packages: a --target "
        "install, or the checkout on PYTHONPATH?): those entry points build DeepSeek-V4 with stock SGLang"
    )
    return {
        "load_plugins": [name for name, _ in LOAD_PLUGINS],
        "never_load_plugins": [name for name, _ in NEVER_LOAD_PLUGINS],
        "startup_hook": hook,
        "use_ray": "refused by `sglang-dsv4 serve`: the actors' output goes to Ray's logs, where serve cannot "
        "check the activation line",
    }


def lines(entry_points: dict[str, object]) -> list[str]:
    """The report as doctor prints it."""
    return [
        f"entry points    load plugins: {', '.join(entry_points['load_plugins'])}",
        f"                never load plugins: {'; '.join(entry_points['never_load_plugins'])}",
        f"                startup hook: {entry_points['startup_hook']}",
        f"                --use-ray: {entry_points['use_ray']}",
    ]
