"""What stock SGLang 0.5.23 runs for the decode indexer logits on an SM120 box, timed beside ours.

On an SM120 card without an SM120 DeepGEMM, SGLang's C4 indexer (``forward_c4_indexer`` in
``sglang/srt/layers/attention/dsv4/indexer.py``) takes, testing the TileLang switch first (``model_hook.py``
sets both switches on SM120, so stock SM120 runs the first where ``tilelang`` is installed):

  * ``tilelang_fp8_paged_mqa_logits`` (``SGLANG_OPT_USE_TILELANG_INDEXER=1``), a TileLang kernel,
    when ``tilelang`` is installed: stock SM120's default;
  * ``fp8_paged_mqa_logits_torch_sm120`` (``SGLANG_FP8_PAGED_MQA_LOGITS_TORCH=1`` on SM120) and
    ``fp8_paged_mqa_logits_torch`` (the same switch elsewhere): SGLang's own torch code over the
    stock fp8 index-K pages (132 B per key: 128 e4m3 values and one fp32 scale), without TileLang.

This module runs those functions, SGLang's own Python from the GPU bundle
(:mod:`benchmarks.sglang_gpu.bootstrap`), at the decode shapes of ``benchmarks/kernels.py``,
CUDA-graphed like ours, and writes ``kernels_stock.json``. ``benchmarks/kernels.py`` starts it as
a subprocess at its beginning (``--stock``, the default where the bundle is found), so that SGLang's
import (~20 s) and TileLang's compile overlap the correctness checks; it times nothing until the
parent writes ``go`` on its stdin (the parent's own timing is over by then), so the two processes
never time at the same moment.

Widths: the torch fallbacks get a page table and output as wide as the longest row (their best case:
under SGLang's decode CUDA graph they would gather and multiply all 262,144 columns); TileLang gets
SGLang's decode width (it only touches each row's pages).

TileLang travels as a stripped archive (``--pack-tilelang`` builds it on a CPU machine into the
bundle folder; ``tilelang-carry.tar.xz``, about 32 MB); if it is absent or fails to import or
compile, the reason is written to the JSON and printed by ``benchmarks/kernels.py``.

    python -m benchmarks.kernels_stock --pack-tilelang .gpu_carry   # CPU machine, repository root
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from pathlib import Path

TILELANG_ARCHIVE = "tilelang-carry.tar.xz"
# SGLang 0.5.23 pins tilelang==0.1.12; what it needs that the GPU image lacks (the rest is there).
TILELANG_WHEELS = ("tilelang==0.1.12", "apache-tvm-ffi==0.1.11", "torch-c-dlpack-ext==0.1.5", "z3-solver==4.15.4.0")
# Not needed to build and run a CUDA kernel: ROCm's composable_kernel, TVM's C++ sources, CUTLASS's
# tools, z3's command-line binary, wheel RECORD files.
TILELANG_STRIP = (
    "tilelang/3rdparty/composable_kernel",
    "tilelang/3rdparty/tvm/src",
    "tilelang/3rdparty/cutlass/tools",
    "z3_solver-4.15.4.0.data",
    "build_backend.py",
)
_PLATFORMS = (
    "manylinux2014_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_28_x86_64",
)


def pack_tilelang(out_dir: Path) -> Path:
    """CPU side: download the wheels for CPython 3.12, unpack, strip, write ``tilelang-carry.tar.xz``."""
    with tempfile.TemporaryDirectory() as tmp:
        wheels, root = Path(tmp, "wheels"), Path(tmp, "root")
        platforms = [x for p in _PLATFORMS for x in ("--platform", p)]
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--only-binary=:all:",
                "--python-version",
                "3.12",
                "--implementation",
                "cp",
                *platforms,
                "-d",
                str(wheels),
                *TILELANG_WHEELS,
            ],
            check=True,
        )
        for whl in sorted(wheels.glob("*.whl")):
            shutil.unpack_archive(str(whl), str(root), "zip")
        for rel in TILELANG_STRIP:
            shutil.rmtree(root / rel, ignore_errors=True)
            (root / rel).unlink(missing_ok=True) if (root / rel).is_file() else None
        for record in root.glob("*.dist-info/RECORD"):
            record.unlink()
        z3 = root / "z3" / "lib"
        if (z3 / "libz3.so").is_file() and (z3 / "libz3.so.4.15").is_file():  # two copies of one library
            (z3 / "libz3.so").unlink()
            (z3 / "libz3.so").symlink_to("libz3.so.4.15")
        out = out_dir / TILELANG_ARCHIVE
        with tarfile.open(out, "w:xz", preset=9) as tar:
            for child in sorted(root.iterdir()):
                tar.add(str(child), arcname=child.name)
    return out


def _unpack_tilelang(carry: Path) -> str:
    """Device side: unpack the archive once; its folder ('' if there is no archive)."""
    archive = carry / TILELANG_ARCHIVE
    if not archive.is_file():
        return ""
    root = Path(tempfile.gettempdir()) / "tilelang-carry"
    if not (root / ".complete").is_file():
        with tarfile.open(archive) as tar:
            tar.extractall(root)
        (root / ".complete").write_text("1")
    return str(root)


_TILELANG_ROOTS = ("tilelang", "tvm_ffi", "torch_c_dlpack_ext", "z3")
TILELANG_MODULE = "sglang.kernels.ops.attention.dsa.tilelang_kernel"


def _use_real_tilelang(root: str) -> None:
    """After the bootstrap (which stubs tilelang and tvm_ffi, as in every other GPU run): put the
    carried packages first on sys.path and drop their stubs, and SGLang's TileLang module if it was
    imported over them, so the next import finds the real ones (the stub finder comes last)."""
    sys.path.insert(0, root)
    for name in list(sys.modules):
        if name.split(".")[0] in _TILELANG_ROOTS or name == TILELANG_MODULE:
            del sys.modules[name]


def _fp8_case(torch, rows: int, lens: list[int], width_pages: int, dev):
    """SGLang's fp8 index-K pages [num_pages, 64, 1, 132] uint8 (e4m3 values, then one fp32 scale per key)."""
    need = [-(-n // 64) for n in lens]
    num_pages = sum(need) + 3
    cache = torch.empty(num_pages, 64 * 132, dtype=torch.uint8, device=dev)
    cache[:, : 64 * 128] = torch.randn(num_pages, 64 * 128, device=dev).to(torch.float8_e4m3fn).view(torch.uint8)
    cache[:, 64 * 128 :] = (torch.rand(num_pages, 64, device=dev) * 0.01 + 0.001).view(torch.uint8)
    perm = torch.randperm(num_pages, device=dev).to(torch.int32)
    table = torch.zeros(rows, width_pages, dtype=torch.int32, device=dev)
    off = 0
    for r, p in enumerate(need):
        table[r, :p] = perm[off : off + p]
        off += p
    return dict(
        kv=cache.view(num_pages, 64, 1, 132),
        q=torch.randn(rows, 1, 64, 128, device=dev).to(torch.float8_e4m3fn),
        w=torch.randn(rows, 64, device=dev),
        seq=torch.tensor(lens, dtype=torch.int32, device=dev),
        table=table,
    )


class Stock:
    """SGLang's functions, imported once the bundle is booted."""

    def __init__(self):
        from sglang.srt.layers.attention.dsv4 import indexer

        self.fns = {
            "sm120_torch": indexer.fp8_paged_mqa_logits_torch_sm120,
            "torch": indexer.fp8_paged_mqa_logits_torch,
        }
        self.tilelang = None
        self.tilelang_status = "not tried"

    def load_tilelang(self, tilelang_root: str, wide: int, rows_list: list[int], dev) -> None:
        if not tilelang_root:
            self.tilelang_status = f"not carried ({TILELANG_ARCHIVE} absent from the bundle folder)"
            return
        import torch

        t0 = time.perf_counter()
        _use_real_tilelang(tilelang_root)
        try:
            from sglang.kernels.ops.attention.dsa.tilelang_kernel import tilelang_fp8_paged_mqa_logits
        except Exception as exc:  # noqa: BLE001  reported, not raised: the torch rows still run
            self.tilelang_status = f"import failed: {type(exc).__name__}: {str(exc)[:400]}"
            return
        try:  # compile every split_kv the decode shapes use (one per row count), on tiny inputs
            for rows in sorted(set(rows_list)):
                c = _fp8_case(torch, rows, [64] * rows, wide // 64, dev)
                tilelang_fp8_paged_mqa_logits(
                    c["q"], c["kv"], c["w"], c["seq"], c["table"], None, wide, clean_logits=False
                )
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001
            self.tilelang_status = (
                f"compile/run failed after {time.perf_counter() - t0:.0f}s: {type(exc).__name__}: {str(exc)[-600:]}"
            )
            return
        import tilelang

        self.tilelang = tilelang_fp8_paged_mqa_logits
        self.tilelang_status = f"tilelang {tilelang.__version__}, compiled in {time.perf_counter() - t0:.0f}s"


def time_shapes(stock: Stock, shapes, wide: int, dev, tilelang_only: bool = False) -> list[dict[str, object]]:
    """Both torch fallbacks (or, ``tilelang_only``, the TileLang kernel) at every decode shape."""
    import torch

    from benchmarks.timing import bench, log

    out = []
    for label, rows, lens, _goal in shapes:
        r: dict[str, object] = dict(shape=label, rows=rows, keys=sum(lens), fp8_key_bytes=sum(lens) * 132)
        if tilelang_only:
            fns, width, max_len = {"tilelang": stock.tilelang}, wide // 64, wide
        else:
            fns, width, max_len = stock.fns, -(-max(lens) // 64), max(lens)
        sets = [_fp8_case(torch, rows, lens, width, dev) for _ in range(2)]
        for name, fn in fns.items():
            try:

                def call(i, fn=fn, sets=sets, max_len=max_len):
                    case = sets[i]
                    return fn(
                        case["q"], case["kv"], case["w"], case["seq"], case["table"], None, max_len, clean_logits=False
                    )

                r[f"{name}_ms"] = bench(call, 2)
            except Exception as exc:  # noqa: BLE001  e.g. out of memory: recorded per shape
                r[f"{name}_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        sets.clear()
        torch.cuda.empty_cache()
        log(f"  stock {label}: " + ", ".join(f"{k} {v * 1e3:.1f} us" for k, v in r.items() if k.endswith("_ms")))
        out.append(r)
    return out


def compile_tilelang(out_dir: Path) -> int:
    """Child process: boot, import TileLang, compile (and run once, tiny) each split_kv of the decode
    shapes; write ``tilelang_compile.json``. A failure here (even a C++ abort) costs the timing nothing,
    and the compiled kernels stay in TileLang's disk cache for the timing process."""
    result: dict[str, object] = {"status": "started"}
    try:
        import torch

        from benchmarks.logits_cases import WIDE, decode_shapes
        from benchmarks.sglang_gpu import bootstrap

        root = _unpack_tilelang(bootstrap.find_carry())
        bootstrap.prepare(device="cuda")
        stock = Stock()
        stock.load_tilelang(root, WIDE, [rows for _, rows, _, _ in decode_shapes()], torch.device("cuda"))
        result["status"] = "ok" if stock.tilelang is not None else "failed"
        result["tilelang"] = stock.tilelang_status
    except Exception as exc:  # noqa: BLE001
        result["status"], result["tilelang"] = "failed", f"{type(exc).__name__}: {exc}"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "tilelang_compile.json").write_text(json.dumps(result, indent=1))
    return 0


def _tilelang_child(out_dir: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "benchmarks.kernels_stock", "--out", str(out_dir), "--compile-tilelang"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _tilelang_after(
    child: subprocess.Popen, out_dir: Path, stock: Stock, carry: Path, wide: int, dev, timeout_s: float
) -> str:
    """Wait for the compile child; if it compiled, load TileLang here (cache hits) and return ''."""
    try:
        _, err = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        child.kill()
        return f"compile not done within {timeout_s:.0f}s of the torch timings' end"
    path = out_dir / "tilelang_compile.json"
    if not path.is_file():
        return f"compile process ended (exit {child.returncode}) without a result: {(err or '')[-600:]}"
    status = json.loads(path.read_text())
    if status.get("status") != "ok":
        return str(status.get("tilelang"))
    stock.load_tilelang(_unpack_tilelang(carry), wide, [1], dev)  # the child unpacked it: nothing to do
    return "" if stock.tilelang is not None else stock.tilelang_status


def serve(out_dir: Path, wait_for_go: bool) -> int:
    """Boot SGLang (a child compiles TileLang meanwhile), say ``ready``, wait for ``go``, time, write the JSON."""
    result: dict[str, object] = {"status": "started"}
    path = out_dir / "kernels_stock.json"
    child = None
    try:
        import torch

        from benchmarks.logits_cases import WIDE, decode_shapes
        from benchmarks.sglang_gpu import bootstrap

        dev = torch.device("cuda")
        t0 = time.perf_counter()
        if (bootstrap.find_carry() / TILELANG_ARCHIVE).is_file():
            child = _tilelang_child(out_dir)
        else:
            result["tilelang"] = f"not carried ({TILELANG_ARCHIVE} absent from the bundle folder)"
        result["boot"] = bootstrap.prepare(device="cuda").lines()
        stock = Stock()
        result["setup_s"] = time.perf_counter() - t0
        print("ready", flush=True)
        if wait_for_go and sys.stdin.readline().strip() != "go":
            result["status"] = "not told to go"
            return 1
        shapes = decode_shapes()
        result["rows"] = time_shapes(stock, shapes, WIDE, dev)
        result["status"] = "torch fallbacks done"
        path.write_text(json.dumps(result, indent=1))
        if child is not None:
            why_not = _tilelang_after(child, out_dir, stock, bootstrap.find_carry(), WIDE, dev, timeout_s=120)
            result["tilelang"] = why_not or stock.tilelang_status
            if not why_not:
                for r, t in zip(result["rows"], time_shapes(stock, shapes, WIDE, dev, tilelang_only=True)):
                    r.update({k: v for k, v in t.items() if k.startswith("tilelang")})
        result["status"] = "done"
        return 0
    except Exception as exc:  # noqa: BLE001  the parent prints the reason
        result["status"] = f"failed: {type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc()[-3000:]
        print("ready", flush=True)  # never leave the parent waiting
        return 1
    finally:
        if child is not None and child.poll() is None:
            child.kill()
        out_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1))


def start(out_dir: str) -> subprocess.Popen | None:
    """Parent side: start ``serve`` in a subprocess (stdout: its log lines and ``ready``)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "benchmarks.kernels_stock", "--out", out_dir, "--wait-for-go"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.kernels_stock",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", default=os.environ.get("OUT", "bench_out"), help="folder for kernels_stock.json")
    p.add_argument("--wait-for-go", action="store_true", help="after setup print 'ready' and wait for 'go' on stdin")
    p.add_argument("--pack-tilelang", metavar="DIR", help="CPU side: build tilelang-carry.tar.xz into DIR and exit")
    p.add_argument("--compile-tilelang", action="store_true", help=argparse.SUPPRESS)  # serve's child
    args = p.parse_args(argv)
    if args.compile_tilelang:
        return compile_tilelang(Path(args.out))
    if args.pack_tilelang:
        out = pack_tilelang(Path(args.pack_tilelang))
        print(f"wrote {out} ({out.stat().st_size / 2**20:.1f} MiB)")
        return 0
    return serve(Path(args.out), args.wait_for_go)


if __name__ == "__main__":
    sys.exit(main())
