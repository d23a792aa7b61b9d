"""Run in a FRESH interpreter by tests/integration/test_activation_scope.py: deferred, scoped activation.

``python activation_scope.py deferred|drift`` prints one JSON object with what it observed.
Everything is SGLang's real machinery: ``load_plugins()`` calls our entry point, SGLang's own
imports fire our post-import hooks, SGLang's real pools are built on CPU.

* deferred: the entry point in a process that has imported only SGLang's plugin package (a
  launcher, a detokenizer) imports none of the DSV4/HiCache target modules and prints only the
  launcher's "configuration loaded" line; a module SGLang imports later is patched on import; a
  non-DSV4 pool leaves activation incomplete (no "active" anywhere); building a DeepSeek-V4 pool
  completes it (every target verified), prints the activation line and exports the activation gauge
  (into ``PROMETHEUS_MULTIPROC_DIR`` when the test sets it: SGLang's multiprocess metrics).
* drift: one signature in the pool module is changed in the table (as if SGLang had drifted);
  the module is left stock with a warning, a non-DSV4 pool still builds, and a DeepSeek-V4
  pool is refused naming the drifted target.
* untested: the installed version reads as 0.5.99 (our version lookup is the one thing replaced);
  one warning at the entry point, nothing patched, a non-DSV4 pool builds, a DSV4 pool is refused.
* moved: SGLang's DSV4 pool configurator class is gone when its module finishes importing (as if
  renamed; removed by a post-import hook that runs before ours): importing it stops nothing, a non-DSV4
  pool builds, and building the DeepSeek-V4 model is refused by the model guard, naming it (and a
  target whose whole module is gone).
* no_wrapt: ``wrapt`` cannot be imported (an image built with ``pip install --no-deps``); SGLang's
  ``load_plugins()`` would log "Failed to execute general plugin" and serve stock: the process must stop.
* hook_bug: a post-import hook fails with an error that is not a refusal (a bug), while the module is
  imported under ``except Exception`` as SGLang's model registry imports models
  (``srt/models/registry.py: import_model_classes``): the process must stop, not skip the module.

The last two print JSON only if the process survived (the test expects it not to).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import logging
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from sglang_dsv4_ext.runtime import activation, compat, launch_identity  # noqa: E402

TARGET_MODULES = [
    m for m in compat.target_modules(compat.installed_table()) if m != compat.HOOK_REGISTRY_PROPAGATE.module
]


def loaded_target_modules():
    return sorted(m for m in TARGET_MODULES if m in sys.modules)


def ours_on(target) -> bool:
    """Whether any hook of ours (not the pool-build guard) wraps ``target``."""
    current = compat.resolve(target.path)[2]
    return any(
        activation.carries_hook(current, h.fn)
        for h in activation.STATE.hooks
        if h.target.path == target.path and h.fn is not activation._before_dsv4_build
    )


def build_mha_pool():
    import torch
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    MHATokenToKVPool(
        size=64,
        page_size=1,
        dtype=torch.bfloat16,
        head_num=1,
        head_dim=8,
        layer_num=1,
        device="cpu",
        enable_memory_saver=False,
        enable_alt_stream=False,
    )


def build_dsv4_pool():
    from sglang_dsv4_ext.tools.sglang_cpu.dsv4_model import cpu_server_args
    from tests.support.dsv4_pools import small_pool

    with cpu_server_args():
        small_pool()


def gauge_samples():
    from prometheus_client import REGISTRY

    return [
        dict(s.labels) for f in REGISTRY.collect() for s in f.samples if s.name == activation.ACTIVE_GAUGE and s.value
    ]


def _ours(text: str) -> list:
    return [line for line in text.splitlines() if line.startswith("sglang-dsv4-ext")]


def deferred() -> dict:
    import sglang.srt.plugins as plugins

    out = {"before": loaded_target_modules(), "identity": launch_identity.of_process()}
    with contextlib.redirect_stderr(io.StringIO()) as printed:
        plugins.load_plugins()
    out["lines_at_load"] = _ours(printed.getvalue())
    out["after_load_plugins"] = loaded_target_modules()
    out["loaded"], out["activated_after_load"] = activation.STATE.loaded, activation.STATE.activated
    import sglang.srt.managers.cache_controller  # noqa: F401  (SGLang importing one target module)

    out["counter_hooked"] = ours_on(compat.COUNTER_WAIT_UNTIL)
    out["after_cache_controller"] = loaded_target_modules()
    with contextlib.redirect_stderr(io.StringIO()) as printed:
        build_mha_pool()
    out["lines_at_mha_pool"] = _ours(printed.getvalue())
    out["activated_after_mha_pool"] = activation.STATE.activated
    out["gauge_before_dsv4"] = gauge_samples()
    out["record_before_dsv4"] = activation.evidence_record()
    with contextlib.redirect_stderr(io.StringIO()) as printed:
        build_dsv4_pool()
        build_dsv4_pool()  # a second build point in the same process: the line is printed once
    out["lines_at_dsv4_pool"] = _ours(printed.getvalue())
    out["record"] = activation.evidence_record()
    out["activated_after_dsv4_pool"] = activation.STATE.activated
    out["modules"] = activation.STATE.modules
    out["unhooked"] = [
        t.path
        for t in compat.installed_table()
        if t.area != "activation" and activation.STATE.statuses.get(t.path) == activation.APPLIED and not ours_on(t)
    ]
    out["gauge"] = gauge_samples()
    return out


def _warnings() -> list:
    warnings = []
    handler = logging.Handler()
    handler.emit = lambda record: warnings.append(record.getMessage())
    handler.setLevel(logging.WARNING)
    logging.getLogger("sglang_dsv4_ext").addHandler(handler)
    return warnings


def _dsv4_error():
    try:
        build_dsv4_pool()
        return None
    except activation.ActivationError as exc:
        return str(exc)


def untested() -> dict:
    activation.installed_sglang_version = lambda: "0.5.99"
    import sglang.srt.plugins as plugins

    warnings = _warnings()
    plugins.load_plugins()
    out = {"loaded": activation.STATE.loaded}
    build_mha_pool()
    out["mha_pool_built"] = True
    import sglang.srt.managers.cache_controller  # noqa: F401

    out["counter_hooked"] = ours_on(compat.COUNTER_WAIT_UNTIL)
    out["warnings"] = warnings
    out["dsv4_error"] = _dsv4_error()
    out["modules"] = sorted(set(activation.STATE.modules.values()))
    return out


def moved() -> dict:
    import wrapt

    # The configurator only: SGLang's own DSV4 modules import the pool class by name.
    removed = {"sglang.srt.model_executor.pool_configurator": "DSV4PoolConfigurator"}
    for module_name, attribute in removed.items():
        wrapt.register_post_import_hook(lambda m, a=attribute: delattr(m, a), module_name)
    # ...and a target in a module SGLang no longer has at all (the guard must refuse, not raise ImportError).
    compat.TARGETS.append(compat.Target("sglang.srt.no_such_module.gone", "(x)", "sizing", compat.ALWAYS, "test"))
    # ...and a name the indexer hook calls that SGLang no longer has (refused at the build, not mid-forward).
    compat.CALLED.append(
        compat.Target(
            "sglang.srt.layers.attention.dsv4.indexer.C4IndexerBackendMixin._gone",
            "(self)",
            "indexer",
            compat.BF16,
            "test",
        )
    )
    import sglang.srt.plugins as plugins

    warnings = _warnings()
    plugins.load_plugins()
    out = {"import_errors": []}
    for module_name in removed:
        try:
            importlib.import_module(module_name)
        except Exception as exc:  # what a missing class must not do to a server of another model
            out["import_errors"].append(f"{module_name}: {type(exc).__name__}: {exc}")
    build_mha_pool()
    out["mha_pool_built"] = True
    out["warnings"] = warnings
    from sglang.srt.models.deepseek_v4 import DeepseekV4ForCausalLM

    try:  # the guard runs before SGLang's __init__ reads its config
        DeepseekV4ForCausalLM.__init__(object.__new__(DeepseekV4ForCausalLM), None)
        out["model_error"] = None
    except activation.ActivationError as exc:
        out["model_error"] = str(exc)
    except Exception as exc:
        out["model_error"] = f"not refused by the guard: {type(exc).__name__}: {exc}"
    return out


def drift() -> dict:
    index = compat.TARGETS.index(compat.MAKE_INDEXER_POOL)
    victim = compat.TARGETS[index]
    signature = victim.row_for(compat.rows_release(compat.installed_sglang_version())).signature  # this release's
    compat.TARGETS[index] = compat.Target(
        victim.path, signature.replace("force_fp4=False", "force_fp4=True"), victim.area, victim.feature, victim.why
    )
    import sglang.srt.plugins as plugins

    warnings = _warnings()
    plugins.load_plugins()
    out = {"victim": victim.path}
    build_mha_pool()
    out["mha_pool_built"] = True
    import sglang.srt.mem_cache.deepseek_v4_memory_pool  # noqa: F401  (SGLang importing the drifted module)

    out["pool_module"] = activation.STATE.modules.get(compat.MAKE_INDEXER_POOL.module)
    out["sizing_hooked"] = ours_on(compat.INDEXER_BYTES_PER_TOKEN)
    out["warnings"] = warnings
    out["dsv4_error"] = _dsv4_error()
    out["activated"] = activation.STATE.activated
    return out


def no_wrapt() -> dict:
    sys.modules["wrapt"] = None  # `import wrapt` now raises ImportError, as when the package is not installed
    import sglang.srt.plugins as plugins

    plugins.load_plugins()
    return {"survived": True, "loaded": activation.STATE.loaded}


def hook_bug() -> dict:
    import sglang.srt.plugins as plugins

    plugins.load_plugins()

    def broken(module_name):
        raise KeyError(f"a bug while patching {module_name}")

    activation.patch_module = broken
    try:
        import sglang.srt.managers.cache_controller  # noqa: F401  (SGLang importing one target module)
    except Exception as exc:  # SGLang's model registry: "Ignore import error when loading ..."
        return {"survived": True, "swallowed": repr(exc)}
    return {"survived": True, "swallowed": None}


if __name__ == "__main__":
    scenarios = {
        "deferred": deferred,
        "drift": drift,
        "untested": untested,
        "moved": moved,
        "no_wrapt": no_wrapt,
        "hook_bug": hook_bug,
    }
    json.dump(scenarios[sys.argv[1]](), sys.stdout)
