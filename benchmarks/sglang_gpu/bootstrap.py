"""Make SGLang 0.5.23's own Python importable on a CUDA GPU machine without its native packages (the carried bundle).

Why: that machine has torch 2.11 but no SGLang and none of its native packages, and nothing reaches
a registry from it. :mod:`benchmarks.sglang_gpu.bundle` builds, on a CPU machine, what travels there
(``.gpu_carry/``: the pruned sglang wheel, a few pure-Python/small wheels, a manifest).

How (:func:`prepare`, idempotent, before anything imports SGLang):
  1. unpack the pruned sglang tree and install the carried wheels into a cache folder once
     (keyed by the manifest's hashes), and put both on ``sys.path``;
  2. install the import stubs for the native packages (:mod:`.stubs`);
  3. bridge torch calls this torch lacks (:func:`.standins.bridge_torch`);
  4. publish SGLang's runtime server-args context for ``device`` (as SGLang's own test kit does);
  5. import the tested SGLang modules and bind the plain-torch stand-ins (:mod:`.standins`).
Where SGLang is already importable with its native packages (a full install), steps 1-2 and 5 are
skipped: nothing is stubbed or stood in.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MANIFEST = "MANIFEST.json"

# The SGLang modules the GPU tests drive (pools, host pools, HiCache, indexer, breakable graphs, plugins).
TESTED_MODULES = (
    "sglang.srt.server_args",
    "sglang.srt.runtime_context",
    "sglang.srt.managers.cache_controller",
    "sglang.srt.mem_cache.deepseek_v4_memory_pool",
    "sglang.srt.mem_cache.memory_pool_host",
    "sglang.srt.layers.attention.dsv4.indexer",
    "sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph",
    "sglang.srt.model_executor.runner.prefill_cuda_graph_runner",
    "sglang.srt.plugins",
)


class BundleError(RuntimeError):
    """The carried bundle is missing or inconsistent (names the path and the command that builds it)."""


@dataclass
class BootReport:
    mode: str = ""  # "bundle" (stubs + stand-ins) or "installed" (a full SGLang install)
    carry: str = ""
    seconds: float = 0.0
    sglang_version: str = ""
    torch_version: str = ""
    stubbed_roots: list[str] = field(default_factory=list)
    import_time_stub_calls: list[str] = field(default_factory=list)
    standins: list[str] = field(default_factory=list)
    bridges: list[str] = field(default_factory=list)
    imports: dict = field(default_factory=dict)  # module -> seconds, or "FAIL: ..."

    def lines(self) -> list[str]:
        out = [
            f"bootstrap: mode={self.mode} sglang={self.sglang_version} torch={self.torch_version} "
            f"({self.seconds:.1f}s) carry={self.carry}"
        ]
        for name, what in self.imports.items():
            out.append(f"  import {name}: {what}")
        out.append(f"  stubbed roots ({len(self.stubbed_roots)}): {' '.join(self.stubbed_roots)}")
        calls = sorted(set(self.import_time_stub_calls))
        out.append(f"  stub calls made by module top-level code while importing ({len(calls)}): {' '.join(calls)}")
        out.append(f"  stand-ins bound: {' '.join(self.standins) or '-'}")
        out.append(f"  torch bridges: {' | '.join(self.bridges) or 'none needed'}")
        return out


REPORT = BootReport()
_server_args_override = None


def find_carry(carry: str | None = None) -> Path:
    """The bundle folder: ``carry``, ``$SGLANG_GPU_CARRY``, or ``.gpu_carry`` in the repository or a folder above it."""
    candidates = [carry, os.environ.get("SGLANG_GPU_CARRY")]
    # On the device the worktree travels as <root>/.wt/13 next to <root>/.gpu_carry.
    for parent in [REPO, *REPO.parents]:
        candidates.append(str(parent / ".gpu_carry"))
    for candidate in candidates:
        if candidate and (Path(candidate) / MANIFEST).is_file():
            return Path(candidate)
    raise BundleError(
        "no GPU bundle found (looked for .gpu_carry/MANIFEST.json in: "
        + ", ".join(str(c) for c in candidates if c)
        + "); build it on a CPU machine with: python -m benchmarks.sglang_gpu.bundle"
    )


def _unpack(carry: Path, manifest: dict) -> Path:
    key = manifest["bundle_key"]
    root = Path(os.environ.get("SGLANG_GPU_CACHE", Path(tempfile.gettempdir()) / "sglang-gpu-bundle")) / key
    done = root / ".complete"
    if done.is_file():
        return root
    root.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(carry / manifest["sglang_zip"]) as zf:
        zf.extractall(root / "sglang")
    wheels = [str(carry / "wheels" / w["file"]) for w in manifest["wheels"]]
    if wheels:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-index",
                "--no-deps",
                "--disable-pip-version-check",
                "--target",
                str(root / "deps"),
                *wheels,
            ],
            check=True,
        )
    done.write_text(key)
    return root


def _sglang_importable_natively() -> bool:
    import importlib.util

    return importlib.util.find_spec("sglang") is not None and importlib.util.find_spec("sgl_kernel") is not None


def prepare(*, device: str = "cuda", carry: str | None = None, force_bundle: bool = False) -> BootReport:
    """Steps 1-5 of the module docstring; returns (and keeps in :data:`REPORT`) what was done."""
    global _server_args_override
    if REPORT.mode:
        return REPORT
    started = time.perf_counter()
    import torch

    from benchmarks.sglang_gpu import standins, stubs

    if force_bundle or not _sglang_importable_natively():
        carry_dir = find_carry(carry)
        manifest = json.loads((carry_dir / MANIFEST).read_text())
        root = _unpack(carry_dir, manifest)
        sys.path.insert(0, str(root / "sglang"))
        sys.path.append(str(root / "deps"))
        stubs.install(force=force_bundle)
        REPORT.mode, REPORT.carry = "bundle", str(carry_dir)
    else:
        REPORT.mode = "installed"
    REPORT.bridges = [f"{b.call} ({b.called_from}): {b.bridge}" for b in standins.bridge_torch()]

    from sglang.srt.runtime_context import get_context

    _server_args_override = get_context().override_server_args(device=device)
    _server_args_override.install()
    import importlib

    for name in TESTED_MODULES:
        t0 = time.perf_counter()
        try:
            importlib.import_module(name)
            REPORT.imports[name] = f"ok ({time.perf_counter() - t0:.1f}s)"
        except Exception as exc:  # reported, then raised: the caller sees which module and why
            REPORT.imports[name] = f"FAIL {type(exc).__name__}: {str(exc)[:300]}"
            raise
    if REPORT.mode == "bundle":
        REPORT.standins = standins.install()
    REPORT.stubbed_roots = stubs.stubbed_roots()
    REPORT.import_time_stub_calls = list(stubs.IMPORT_TIME_CALLS)
    from importlib.metadata import version

    REPORT.sglang_version = version("sglang")
    REPORT.torch_version = torch.__version__
    REPORT.seconds = time.perf_counter() - started
    return REPORT


def prepare_for_main(prog: str) -> bool:
    """A GPU benchmark's start: False (the reason on stderr) without a CUDA GPU, else :func:`prepare` done and its
    report printed."""
    import torch

    if not torch.cuda.is_available():
        print(f"{prog}: needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return False
    print("\n".join(prepare().lines()), flush=True)
    return True


def restore() -> None:
    """Withdraw the server-args context (test teardown)."""
    global _server_args_override
    if _server_args_override is not None:
        _server_args_override.restore()
        _server_args_override = None
