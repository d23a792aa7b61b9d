"""Run by tests/integration/test_startup_hook.py in a FRESH virtual environment whose site-packages holds
the startup hook ``sglang_dsv4_ext-bootstrap.pth`` taken from the built wheel: Python's ``site`` runs it
at interpreter start, as in an installed environment. Prints one JSON object.

* startup: what the hook costs every interpreter: nothing of SGLang imported, only our two tiny modules.
* one_batch: ``sglang.benchmark.one_batch`` (SGLang's real module, imported as ``python -m`` would) never
  calls ``load_plugins()``; then the DeepSeek-V4 model is built and its pools configured as its
  ``ModelRunner.load_model`` / ``init_memory_pool`` would. ``ModelRunner`` itself needs a GPU and weights, so
  the model's constructor is entered directly (our guard runs before SGLang's ``__init__`` reads the
  config, which then fails on the missing config: recorded) and the pools are built through SGLang's real
  configurator on CPU (tests/support/dsv4_pools.py).
* ray_actor: the same with ``sglang.srt.ray.scheduler_actor`` (what ``--use-ray`` runs in each actor) as the
  entry module. Ray is not installed here: stand-in ``ray`` modules (``remote`` the identity, two empty
  classes) let SGLang's real modules import; nothing of it runs (its ``SchedulerActor.__init__`` would build a
  ``Scheduler``, which needs a GPU), so the build is entered as in one_batch.
* kill_switch: one_batch with ``SGLANG_DSV4_EXT=0``: the hook does nothing (activation is never imported,
  the model stays unwrapped).
"""

from __future__ import annotations

import json
import sys
import types


def _ours_loaded() -> list:
    return sorted(m for m in sys.modules if m == "sglang_dsv4_ext" or m.startswith("sglang_dsv4_ext."))


def startup() -> dict:
    from sglang_dsv4_ext.runtime import bootstrap  # already imported by the .pth: this only fetches it

    return {
        "sglang_modules": sorted(m for m in sys.modules if m == "sglang" or m.startswith("sglang.")),
        "ours": _ours_loaded(),
        "installed": bootstrap.installed(),
    }


def _build_dsv4(out: dict) -> dict:
    import sglang.srt.plugins as plugins
    from sglang.srt.models.deepseek_v4 import DeepseekV4ForCausalLM  # the model registry's import

    out["plugins_loaded_before_build"] = plugins._plugins_loaded
    out["ours_before_build"] = _ours_loaded()
    try:
        DeepseekV4ForCausalLM.__init__(object.__new__(DeepseekV4ForCausalLM), None)
        out["model_init"] = "returned"
    except SystemExit as exc:
        out["model_init"] = f"SystemExit: {exc}"
        return out
    except Exception as exc:  # SGLang's __init__ on a None config, after our guard: expected on CPU
        out["model_init"] = f"{type(exc).__name__}: {exc}"[:300]
    out["plugins_loaded_after_build"] = plugins._plugins_loaded
    if "sglang_dsv4_ext.runtime.activation" in sys.modules:
        from sglang_dsv4_ext.runtime import activation

        out["build_checked"] = activation.STATE.build_checked
    from tests.support.dsv4_pools import sized_pool  # the checkout is on PYTHONPATH

    with sized_pool(swa_full_tokens_ratio=0.1, _swa_full_tokens_ratio_explicitly_set=True) as (_, _, pool):
        out["c4_index_k_dtype"] = getattr(pool.index_pools[4], "index_k_dtype", "stock (fp8 layout)")
    return out


def one_batch() -> dict:
    import sglang.benchmark.one_batch  # noqa: F401  (SGLang's benchmark module: never calls load_plugins)

    return _build_dsv4({})


def _stand_in_ray() -> None:
    """The names SGLang's ``srt/ray`` modules take from Ray at import (Ray is not installed here)."""
    for name in ("ray", "ray.util", "ray.util.placement_group", "ray.util.scheduling_strategies"):
        sys.modules[name] = types.ModuleType(name)
        sys.modules[name].__path__ = []
    sys.modules["ray"].remote = lambda *args, **kwargs: args[0] if args else (lambda cls: cls)
    sys.modules["ray.util.placement_group"].PlacementGroup = type("PlacementGroup", (), {})
    sys.modules["ray.util.scheduling_strategies"].PlacementGroupSchedulingStrategy = type("Strategy", (), {})


def ray_actor() -> dict:
    _stand_in_ray()
    import sglang.srt.ray.scheduler_actor  # noqa: F401  (what each --use-ray actor imports)

    return _build_dsv4({})


def kill_switch() -> dict:
    import sglang.benchmark.one_batch  # noqa: F401
    import sglang.srt.models.deepseek_v4 as model

    return {"ours": _ours_loaded(), "model_init_wrapped": hasattr(model.DeepseekV4ForCausalLM.__init__, "__wrapped__")}


if __name__ == "__main__":
    scenarios = {"startup": startup, "one_batch": one_batch, "ray_actor": ray_actor, "kill_switch": kill_switch}
    print("\n" + json.dumps(scenarios[sys.argv[1]]()))
