"""Time the extension's activation per process kind: ``python -m benchmarks.activation``.

SGLang calls our entry point from ``load_plugins()`` in every process for every model. Activation
is deferred (sglang_dsv4_ext/runtime/activation.py): the entry point validates the configuration, and each
target module is checked and patched when SGLang itself imports it. Each row is a fresh interpreter:

* launcher: has imported only SGLang's plugin package; goal: ``load_plugins()`` costs at most 0.3 s
  more than with ``SGLANG_DSV4_EXT=0``, and imports none of our target modules;
* detokenizer: SGLang's detokenizer module imported first (it pulls in two target modules itself);
* scheduler (DSV4): every target module imported by SGLang first, then ``load_plugins()`` checks,
  patches and verifies the whole table, as before a DeepSeek-V4 pool is built;
* deferred completion: a launcher-like process builds a DSV4 pool: the completion imports the target
  modules SGLang had not imported yet (SGLang's import time, reported apart) and verifies.

"SGLang imports s" is what the process pays for SGLang's own modules before ``load_plugins()``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

_CHILD = r"""
import importlib, json, sys, time
from sglang_dsv4_ext.runtime import activation
from sglang_dsv4_ext.runtime import compat
kind = sys.argv[1]
modules = [m for m in compat.target_modules(compat.installed_table()) if m != compat.HOOK_REGISTRY_PROPAGATE.module]
first = {"launcher": ["sglang.srt.plugins"], "detokenizer": ["sglang.srt.managers.detokenizer_manager"],
         "scheduler": ["sglang.srt.plugins"] + modules, "completion": ["sglang.srt.plugins"]}[kind]
t0 = time.perf_counter()
for m in first:
    importlib.import_module(m)
t1 = time.perf_counter()
before = {m for m in modules if m in sys.modules}
import sglang.srt.plugins as plugins
plugins.load_plugins()
t2 = time.perf_counter()
imported_by_us = sorted({m for m in modules if m in sys.modules} - before)
extra = {}
if kind == "completion":
    for m in modules:
        importlib.import_module(m)  # what SGLang imports before it builds a DSV4 pool
    t3 = time.perf_counter()
    activation.complete_before_dsv4_build()
    extra = {"sglang_pool_imports_s": t3 - t2, "complete_s": time.perf_counter() - t3}
print(json.dumps({"import_s": t1 - t0, "load_plugins_s": t2 - t1, "imported_by_us": imported_by_us,
                  "activated": activation.STATE.activated, "patch_s": activation.STATE.patch_seconds, **extra}))
"""

KINDS = ("launcher", "detokenizer", "scheduler", "completion")


def run_once(kind: str, env_overrides=None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_DSV4")}
    env.update(env_overrides or {})
    proc = subprocess.run([sys.executable, "-c", _CHILD, kind], capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} child failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _median(samples, key):
    return statistics.median(s[key] for s in samples)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per row (default 3)")
    args = parser.parse_args(argv)
    rows = {}
    for kind in KINDS:
        for label, env in (("off", {"SGLANG_DSV4_EXT": "0"}), ("on", {})):
            samples = []
            for i in range(args.runs):
                print(f"[{kind} / extension {label}] run {i + 1}/{args.runs} ...", file=sys.stderr, flush=True)
                samples.append(run_once(kind, env))
            rows[(kind, label)] = samples
    print(
        f"{'process':<13}{'SGLang imports s':>17}{'load_plugins off s':>20}{'on s':>8}{'added s':>9}"
        f"{'target modules we imported':>28}{'verified':>10}"
    )
    for kind in KINDS:
        off, on = rows[(kind, "off")], rows[(kind, "on")]
        added = _median(on, "load_plugins_s") - _median(off, "load_plugins_s")
        ours = max(len(s["imported_by_us"]) for s in on)
        print(
            f"{kind:<13}{_median(on, 'import_s'):>17.2f}{_median(off, 'load_plugins_s'):>20.3f}"
            f"{_median(on, 'load_plugins_s'):>8.3f}{added:>9.3f}{ours:>28}{str(on[0]['activated']):>10}"
        )
        if kind == "completion":
            print(
                f"{'':<13}DSV4 build: SGLang imports the remaining target modules in "
                f"{_median(on, 'sglang_pool_imports_s'):.2f} s, of which checking and patching each module as "
                f"it was imported {_median(on, 'patch_s'):.3f} s; completion (verify) "
                f"{_median(on, 'complete_s'):.3f} s"
            )
    launcher_added = _median(rows[("launcher", "on")], "load_plugins_s") - _median(
        rows[("launcher", "off")], "load_plugins_s"
    )
    print(
        f"added to a process that never builds a pool (launcher): {launcher_added:.3f} s -> "
        f"{'meets' if launcher_added <= 0.3 else 'MISSES'} the 0.3 s goal"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
