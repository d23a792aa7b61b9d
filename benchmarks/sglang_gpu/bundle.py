"""Build what travels to a CUDA GPU machine without SGLang's native packages so SGLang 0.5.23's own Python runs there.

Why: the GPU image has torch 2.11, triton 3.6 and Python 3.12 but no SGLang, none of its native
packages and no registry; what a device call carries is limited to 64 MiB in all. The sglang wheel
is 39 MB (123 MB unpacked) and pure Python apart from five Rust extension modules.

What it writes into ``--out`` (default ``.gpu_carry`` in the repository root, ignored by git):
  * ``sglang-<version>-pruned.zip``: the wheel's files minus the Rust extension modules (CPython 3.11
    builds; nothing on the tested paths imports them), ``multimodal_gen/`` and ``test/`` (not on the
    tested paths), re-compressed; the dist-info stays, so ``importlib.metadata.version("sglang")`` works;
  * ``wheels/``: the small packages SGLang's import chain needs that the image lacks, for CPython 3.12
    (:data:`EXTRA_WHEELS`);
  * ``MANIFEST.json``: versions, sha256 of every file, the stub list, a bundle key.
The device side is :mod:`benchmarks.sglang_gpu.bootstrap`; the one command that runs the GPU tests
there is ``bash tests/run_gpu_tests.sh`` (see benchmarks/GPU-NOTES.md).

Run:  python -m benchmarks.sglang_gpu.bundle [--out DIR] [--sglang-wheel PATH]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

SGLANG_VERSION = "0.5.23"
DEVICE_PYTHON = "3.12"
DEVICE_PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64")
# Pure-Python or small binary packages SGLang's tested import chain needs and the GPU image lacks
# (measured there on 2026-11-30, see ../shared/reference/environment-notes.md).
EXTRA_WHEELS = (
    "pydantic==2.14.4",
    "pydantic-core==2.50.5",
    "annotated-types==0.8.0",
    "typing-inspection==0.4.5",
    "orjson==3.13.0",
    "msgspec==0.23.0",
    "pyzmq==27.3.0",
    "pybase64==1.5.1",
    "zstandard==0.25.0",
    "dill==0.4.1",
    "starlette==1.10.0",
    # the extension's own: activation's post-import hooks and the gauge it exports before a DSV4 pool is built
    "wrapt==2.5.2",
    "prometheus-client==0.26.0",
)
PRUNED_DIRS = ("sglang/multimodal_gen/", "sglang/test/")
CARRY_LIMIT_BYTES = 64 << 20
# What else travels with the bundle (worktree, main tree): keep the bundle well under the limit.
BUNDLE_BUDGET_BYTES = 40 << 20


class BuildError(RuntimeError):
    pass


def _keep(name: str) -> bool:
    if name.endswith(".so") or name.endswith((".pyc", ".pyo")):
        return False
    return not name.startswith(PRUNED_DIRS)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _pip_download(args: list[str], dest: Path, what: str) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(dest), *args]
    print(f"  pip download {what} ...", flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"pip download of {what} failed (exit {proc.returncode}):\n{proc.stderr.strip()[-2000:]}")


def fetch_sglang_wheel(cache: Path) -> Path:
    found = sorted(cache.glob(f"sglang-{SGLANG_VERSION}-*.whl"))
    if not found:
        _pip_download([f"sglang=={SGLANG_VERSION}"], cache, f"sglang=={SGLANG_VERSION}")
        found = sorted(cache.glob(f"sglang-{SGLANG_VERSION}-*.whl"))
    if not found:
        raise BuildError(f"no sglang-{SGLANG_VERSION} wheel in {cache} after pip download")
    return found[0]


def prune_wheel(wheel: Path, out_zip: Path) -> dict:
    kept = dropped = kept_bytes = 0
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out_zip, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as dst:
        for info in src.infolist():
            if info.is_dir():
                continue
            if not _keep(info.filename):
                dropped += 1
                continue
            dst.writestr(info, src.read(info.filename))
            kept += 1
            kept_bytes += info.file_size
    return {"files_kept": kept, "files_dropped": dropped, "unpacked_bytes": kept_bytes}


def fetch_extra_wheels(dest: Path) -> list[Path]:
    platform_args = [arg for p in DEVICE_PLATFORMS for arg in ("--platform", p)]
    missing = [spec for spec in EXTRA_WHEELS if not _find_wheel(dest, spec)]
    if missing:
        _pip_download(
            ["--only-binary=:all:", "--python-version", DEVICE_PYTHON, *platform_args, *missing],
            dest,
            f"{len(missing)} wheels for CPython {DEVICE_PYTHON}",
        )
    wheels = []
    for spec in EXTRA_WHEELS:
        path = _find_wheel(dest, spec)
        if path is None:
            raise BuildError(f"{spec}: no wheel for CPython {DEVICE_PYTHON} in {dest} after pip download")
        wheels.append(path)
    return wheels


def _find_wheel(dest: Path, spec: str) -> Path | None:
    name, ver = spec.split("==")
    stem = name.replace("-", "_").lower()
    for path in dest.glob("*.whl"):
        parts = path.name.split("-")
        if parts[0].lower() == stem and parts[1] == ver:
            return path
    return None


def build(out: Path, sglang_wheel: Path | None = None, cache: Path | None = None) -> dict:
    from benchmarks.sglang_gpu import stubs

    out.mkdir(parents=True, exist_ok=True)
    cache = cache or Path(tempfile.gettempdir()) / "sglang-gpu-bundle-downloads"
    cache.mkdir(parents=True, exist_ok=True)
    print(f"[1/3] sglang {SGLANG_VERSION} wheel", flush=True)
    wheel = sglang_wheel or fetch_sglang_wheel(cache)
    if not wheel.is_file():
        raise BuildError(f"--sglang-wheel {wheel}: no such file")
    zip_name = f"sglang-{SGLANG_VERSION}-pruned.zip"
    tmp_zip = out / (zip_name + ".tmp")
    prune = prune_wheel(wheel, tmp_zip)
    tmp_zip.replace(out / zip_name)
    print(f"[2/3] extra wheels for CPython {DEVICE_PYTHON}", flush=True)
    wheel_dir = out / "wheels"
    wheel_dir.mkdir(exist_ok=True)
    extra = fetch_extra_wheels(cache)
    for path in wheel_dir.glob("*.whl"):
        if path.name not in {w.name for w in extra}:
            path.unlink()  # a wheel from an older EXTRA_WHEELS list
    for path in extra:
        if not (wheel_dir / path.name).is_file():
            shutil.copy2(path, wheel_dir / path.name)
    print("[3/3] manifest", flush=True)
    files = [out / zip_name, *sorted(wheel_dir.glob("*.whl"))]
    digests = {p.name: _sha256(p) for p in files}
    manifest = {
        "sglang_version": SGLANG_VERSION,
        "sglang_wheel": wheel.name,
        "sglang_wheel_sha256": _sha256(wheel),
        "sglang_zip": zip_name,
        "pruned": {"dirs": list(PRUNED_DIRS), "rust_extension_modules": True, **prune},
        "device_python": DEVICE_PYTHON,
        "wheels": [{"file": p.name, "sha256": digests[p.name]} for p in files[1:]],
        "stub_roots": sorted(stubs.STUB_ROOTS),
        "bundle_key": hashlib.sha256("".join(sorted(digests.values())).encode()).hexdigest()[:16],
    }
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    sizes = {p.name: p.stat().st_size for p in files}
    total = sum(sizes.values())
    manifest["bytes"] = total
    if total > BUNDLE_BUDGET_BYTES:
        raise BuildError(
            f"bundle is {total / 2**20:.1f} MiB, over its {BUNDLE_BUDGET_BYTES >> 20} MiB share of the "
            f"{CARRY_LIMIT_BYTES >> 20} MiB a device call carries"
        )
    return {"manifest": manifest, "sizes": sizes, "total": total}


def format_sizes(result: dict) -> str:
    rows = sorted(result["sizes"].items(), key=lambda kv: -kv[1])
    width = max(len(name) for name, _ in rows)
    lines = [f"{'file':<{width}}  {'MiB':>7}", "-" * (width + 9)]
    lines += [f"{name:<{width}}  {size / 2**20:>7.2f}" for name, size in rows]
    lines.append(
        f"{'total':<{width}}  {result['total'] / 2**20:>7.2f}  (limit per device call "
        f"{CARRY_LIMIT_BYTES >> 20} MiB with everything else that travels)"
    )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.sglang_gpu.bundle",
        description="Build the folder that travels to the GPU machine (pruned sglang wheel, extra CPython "
        f"{DEVICE_PYTHON} wheels, manifest). Carry it as '.gpu_carry' and run "
        "'bash tests/run_gpu_tests.sh' there.",
    )
    p.add_argument(
        "--out",
        default=str(Path(__file__).resolve().parents[2] / ".gpu_carry"),
        help="output folder; keep it git-ignored (default %(default)s)",
    )
    p.add_argument(
        "--sglang-wheel", type=Path, default=None, help=f"a local sglang-{SGLANG_VERSION} wheel instead of pip download"
    )
    p.add_argument("--cache", type=Path, default=None, help="download cache (default: a temp folder)")
    args = p.parse_args(argv)
    try:
        result = build(Path(args.out), args.sglang_wheel, args.cache)
    except BuildError as exc:
        print(f"bundle: {exc}", file=sys.stderr)
        return 1
    print(format_sizes(result))
    print(f"\nwrote {args.out}/MANIFEST.json (bundle key {result['manifest']['bundle_key']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
