"""Ahead-of-time compile every kernel for sm_120a, sm_100a and sm_90a on any machine.

No GPU needed: ``triton.compile(ASTSource(...), target=GPUTarget("cuda", cc, 32))``
runs the whole pipeline to a cubin. For each kernel and architecture this reports the
shared memory per block (``metadata.shared``) against the architecture's limit, and
counts tensor-core instructions in the SASS (``cuobjdump -sass`` from Triton's bundled
CUDA tools): the logits kernel must use HMMA (mma.sync) on SM120, which has no wgmma
and no TMEM.

    python -m kernels_sm120.aot               # table for all kernels and archs
    python -m kernels_sm120.aot --arch 120    # one arch
    python -m kernels_sm120.aot --dump-sass DIR   # also write each .sass file
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from . import index_k_store, index_q, paged_logits_fp4, paged_mqa_logits
from .dispatch import CONFIGS, SM120_MAX_SHARED_BYTES, ArchConfigs, LogitsConfig, arch_key

ARCHS = (120, 100, 90)
# Largest dynamic shared memory one block may use.
MAX_SHARED_BYTES = {120: SM120_MAX_SHARED_BYTES, 100: 232448, 90: 232448}
# Tensor-core instruction families in SASS: mma.sync (HMMA; QMMA for its fp8 form), Hopper wgmma
# (HGMMA; QGMMA for fp8),
# Blackwell datacenter tcgen05 (UTC*MMA).
_TC_PATTERNS = {"HMMA": r"\b[HQ]MMA\b", "HGMMA": r"\b[HQ]GMMA\b", "UTCMMA": r"\bUTC\w*MMA\b"}


@dataclass(frozen=True)
class KernelSpec:
    name: str
    fn: triton.runtime.JITFunction
    signature: dict[str, str]
    constexprs: Callable[[ArchConfigs], dict[str, int]]
    options: Callable[[ArchConfigs], dict[str, int]]
    needs_tensor_cores: bool


def _decode_constexprs(cfg: LogitsConfig, heads: int, head_dim: int, page: int) -> dict[str, int]:
    return dict(
        H=heads,
        D=head_dim,
        PAGE=page,
        BLOCK_N=cfg.block_n,
        ROWS=cfg.rows_per_program,
        PAGE_BLOCK=cfg.page_block,
        BALANCE=cfg.busy_per_sm > 0 and cfg.rows_per_program == 1,
        ITEM_GRID=cfg.item_grid,
        INTERLEAVED=cfg.interleaved,
        DIRECT_STORE=cfg.direct_store,
        IDS_AHEAD=cfg.ids_ahead,
    )


def _fp8_constexprs(cfg: LogitsConfig, heads: int, head_dim: int, page: int) -> dict[str, int]:
    mode = paged_mqa_logits.FP8_MMA if cfg.fp8_mma else paged_mqa_logits.FP8_WIDEN
    return dict(_decode_constexprs(cfg, heads, head_dim, page), KEY_FP8=mode, SCALES_AHEAD=cfg.scales_ahead)


def kernel_specs() -> list[KernelSpec]:
    head_dim, rope_dim, page, heads = 128, 64, 64, 64
    return [
        KernelSpec(
            "index_k_norm_rope_hadamard_store_kernel",
            index_k_store.index_k_norm_rope_hadamard_store_kernel,
            index_k_store.AOT_SIGNATURES["index_k_norm_rope_hadamard_store_kernel"],
            lambda c: dict(
                D=head_dim, ROPE_DIM=rope_dim, PAGE=page, BLOCK_M=c.store.block_m, PREFETCH=c.store.prefetch
            ),
            lambda c: dict(num_warps=c.store.num_warps, num_stages=c.store.num_stages),
            needs_tensor_cores=False,  # the Hadamard is an fp32 butterfly (v4)
        ),
        KernelSpec(
            "index_k_scatter_rows_kernel",
            index_k_store.index_k_scatter_rows_kernel,
            index_k_store.AOT_SIGNATURES["index_k_scatter_rows_kernel"],
            lambda c: dict(D=head_dim, PAGE=page, BLOCK_M=c.scatter.block_m),
            lambda c: dict(num_warps=c.scatter.num_warps, num_stages=c.scatter.num_stages),
            needs_tensor_cores=False,
        ),
        KernelSpec(
            "index_q_rope_hadamard_kernel",
            index_q.index_q_rope_hadamard_kernel,
            index_q.AOT_SIGNATURES["index_q_rope_hadamard_kernel"],
            lambda c: dict(
                H=heads,
                D=head_dim,
                ROPE_DIM=rope_dim,
                BLOCK_M=c.q.block_m,
                PREFETCH=c.q.prefetch,
                ONE_TOKEN=c.q.one_token_tiles and heads % c.q.block_m == 0,
                STREAM=c.q.streaming,
            ),
            lambda c: dict(num_warps=c.q.num_warps, num_stages=c.q.num_stages),
            needs_tensor_cores=False,  # fp32 butterfly Hadamard (v4)
        ),
        KernelSpec(
            "paged_mqa_logits_kernel",
            paged_mqa_logits.paged_mqa_logits_kernel,
            paged_mqa_logits.AOT_SIGNATURES["paged_mqa_logits_kernel"],
            lambda c: _decode_constexprs(c.logits, heads, head_dim, page),
            lambda c: dict(num_warps=c.logits.num_warps, num_stages=c.logits.num_stages),
            needs_tensor_cores=True,
        ),
        # the same kernel with the few-row and one-row decode tilings (the decode tiling where an arch has none)
        KernelSpec(
            "paged_mqa_logits_kernel[few rows]",
            paged_mqa_logits.paged_mqa_logits_kernel,
            paged_mqa_logits.AOT_SIGNATURES["paged_mqa_logits_kernel"],
            lambda c: _decode_constexprs(c.logits_for(c.few_rows_max), heads, head_dim, page),
            lambda c: dict(
                num_warps=c.logits_for(c.few_rows_max).num_warps, num_stages=c.logits_for(c.few_rows_max).num_stages
            ),
            needs_tensor_cores=True,
        ),
        KernelSpec(
            "paged_mqa_logits_kernel[one row]",
            paged_mqa_logits.paged_mqa_logits_kernel,
            paged_mqa_logits.AOT_SIGNATURES["paged_mqa_logits_kernel"],
            lambda c: _decode_constexprs(c.logits_for(1), heads, head_dim, page),
            lambda c: dict(num_warps=c.logits_for(1).num_warps, num_stages=c.logits_for(1).num_stages),
            needs_tensor_cores=True,
        ),
        # the same kernel with the prefill tiling (several rows per program share key tiles)
        KernelSpec(
            "paged_mqa_logits_kernel[prefill]",
            paged_mqa_logits.paged_mqa_logits_kernel,
            paged_mqa_logits.AOT_SIGNATURES["paged_mqa_logits_kernel"],
            lambda c: dict(
                H=heads,
                D=head_dim,
                PAGE=page,
                BLOCK_N=c.logits_prefill.block_n,
                ROWS=c.logits_prefill.rows_per_program,
                PAGE_BLOCK=c.logits_prefill.page_block,
            ),
            lambda c: dict(num_warps=c.logits_prefill.num_warps, num_stages=c.logits_prefill.num_stages),
            needs_tensor_cores=True,
        ),
        # over SGLang's fp8 pool as stored (uint8 pages, e4m3 q): the decode and few-row tilings
        KernelSpec(
            "paged_mqa_logits_kernel[fp8]",
            paged_mqa_logits.paged_mqa_logits_kernel,
            paged_mqa_logits.AOT_SIGNATURES["paged_mqa_logits_kernel[fp8]"],
            lambda c: _fp8_constexprs(c.logits_for(64, key_fp8=True), heads, head_dim, page),
            lambda c: dict(
                num_warps=c.logits_for(64, key_fp8=True).num_warps,
                num_stages=c.logits_for(64, key_fp8=True).num_stages,
            ),
            needs_tensor_cores=True,
        ),
        KernelSpec(
            "paged_mqa_logits_kernel[fp8 few rows]",
            paged_mqa_logits.paged_mqa_logits_kernel,
            paged_mqa_logits.AOT_SIGNATURES["paged_mqa_logits_kernel[fp8]"],
            lambda c: _fp8_constexprs(c.logits_for(c.few_rows_max, key_fp8=True), heads, head_dim, page),
            lambda c: dict(
                num_warps=c.logits_for(c.few_rows_max, key_fp8=True).num_warps,
                num_stages=c.logits_for(c.few_rows_max, key_fp8=True).num_stages,
            ),
            needs_tensor_cores=True,
        ),
        KernelSpec(
            "paged_mqa_logits_kernel[fp8 one row]",
            paged_mqa_logits.paged_mqa_logits_kernel,
            paged_mqa_logits.AOT_SIGNATURES["paged_mqa_logits_kernel[fp8]"],
            lambda c: _fp8_constexprs(c.logits_for(1, key_fp8=True), heads, head_dim, page),
            lambda c: dict(
                num_warps=c.logits_for(1, key_fp8=True).num_warps,
                num_stages=c.logits_for(1, key_fp8=True).num_stages,
            ),
            needs_tensor_cores=True,
        ),
        KernelSpec(
            "paged_mqa_logits_kernel[fp8 prefill]",
            paged_mqa_logits.paged_mqa_logits_kernel,
            paged_mqa_logits.AOT_SIGNATURES["paged_mqa_logits_kernel[fp8]"],
            lambda c: _fp8_constexprs(c.logits_for(c.prefill_min_rows, key_fp8=True), heads, head_dim, page),
            lambda c: dict(
                num_warps=c.logits_for(c.prefill_min_rows, key_fp8=True).num_warps,
                num_stages=c.logits_for(c.prefill_min_rows, key_fp8=True).num_stages,
            ),
            needs_tensor_cores=True,
        ),
        # over SGLang's fp4 pool as stored (uint8 pages of 68 B per key, packed e2m1 q): one tiling
        KernelSpec(
            "paged_mqa_logits_fp4_kernel",
            paged_logits_fp4.paged_mqa_logits_fp4_kernel,
            paged_logits_fp4.AOT_SIGNATURES["paged_mqa_logits_fp4_kernel"],
            lambda c: dict(H=heads, PAGE=page, BLOCK_N=paged_logits_fp4.BLOCK_N),
            lambda c: dict(num_warps=paged_logits_fp4.NUM_WARPS, num_stages=paged_logits_fp4.NUM_STAGES),
            needs_tensor_cores=True,
        ),
    ]


@dataclass
class AotResult:
    kernel: str
    arch: int
    config: str
    shared: int
    max_shared: int
    num_warps: int
    num_stages: int
    ptx_target: str
    tensor_core_ops: dict[str, int]
    sass: str

    @property
    def fits(self) -> bool:
        return self.shared <= self.max_shared


def compile_kernel(
    spec: KernelSpec, arch: int, configs: ArchConfigs | None = None
) -> tuple[Any, ArchConfigs, dict[str, int]]:
    """Compile ``spec`` for ``arch`` (90, 100, 120) with ``configs`` (default: the arch's own)."""
    configs = configs or CONFIGS[arch_key((arch // 10, arch % 10))]
    constexprs = spec.constexprs(configs)
    # constexpr parameters with a default (benchmark ablation switches) compile as the launcher runs them
    for p in spec.fn.params:
        if p.is_constexpr and p.has_default and p.name not in constexprs:
            constexprs[p.name] = p.default
    arg_names = spec.fn.arg_names
    missing = [n for n in arg_names if n not in spec.signature and n not in constexprs]
    if missing:
        raise ValueError(f"{spec.name}: no AOT type for arguments {missing}")
    signature, attrs = {}, {}
    for i, name in enumerate(arg_names):
        if name in constexprs:
            signature[name] = "constexpr"
            continue
        ty, _, hint = spec.signature[name].partition(":")
        signature[name] = ty
        if hint == "16":
            attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(fn=spec.fn, signature=signature, constexprs=constexprs, attrs=attrs)
    options = spec.options(configs)
    compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
    return compiled, configs, options


def cuobjdump_path() -> str | None:
    bundled = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    if os.path.exists(bundled):
        return bundled
    return shutil.which("cuobjdump")


def disassemble(cubin: bytes) -> str:
    tool = cuobjdump_path()
    if tool is None:
        raise RuntimeError("cuobjdump not found (neither Triton's bundled copy nor on PATH)")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        proc = subprocess.run([tool, "-sass", path], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"cuobjdump -sass failed: {proc.stderr.strip()}")
    return proc.stdout


def count_tensor_core_ops(sass: str) -> dict[str, int]:
    return {name: len(re.findall(pat, sass)) for name, pat in _TC_PATTERNS.items()}


def run_aot(
    archs: Sequence[int] = ARCHS, kernels: Sequence[str] | None = None, progress: Callable[[str], None] | None = None
) -> list[AotResult]:
    results = []
    for spec in kernel_specs():
        if kernels and spec.name not in kernels:
            continue
        for arch in archs:
            if progress:
                progress(f"compiling {spec.name} for sm_{arch}a")
            compiled, configs, options = compile_kernel(spec, arch)
            sass = disassemble(compiled.asm["cubin"])
            target = re.search(r"\.target\s+(\S+)", compiled.asm["ptx"])
            results.append(
                AotResult(
                    kernel=spec.name,
                    arch=arch,
                    config=configs.name,
                    shared=compiled.metadata.shared,
                    max_shared=MAX_SHARED_BYTES[arch],
                    num_warps=options["num_warps"],
                    num_stages=options["num_stages"],
                    ptx_target=target.group(1) if target else "?",
                    tensor_core_ops=count_tensor_core_ops(sass),
                    sass=sass,
                )
            )
    return results


def format_table(results: Sequence[AotResult]) -> str:
    head = (
        f"{'kernel':42s} {'arch':8s} {'config':7s} {'warps':>5s} {'stages':>6s} {'shared B':>9s} {'limit B':>8s} "
        f"{'fits':4s} {'HMMA':>5s} {'HGMMA':>5s} {'UTCMMA':>6s}"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        tc = r.tensor_core_ops
        lines.append(
            f"{r.kernel:42s} {r.ptx_target:8s} {r.config:7s} {r.num_warps:5d} {r.num_stages:6d} "
            f"{r.shared:9d} {r.max_shared:8d} {'yes' if r.fits else 'NO':4s} "
            f"{tc['HMMA']:5d} {tc['HGMMA']:5d} {tc['UTCMMA']:6d}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kernels_sm120.aot",
        description="Compile the bf16 index-K Triton kernels ahead of time for sm_120a, "
        "sm_100a and sm_90a (no GPU needed); print shared memory per block against each "
        "arch's limit and the tensor-core instructions found in the SASS.",
    )
    parser.add_argument(
        "--arch",
        type=int,
        action="append",
        choices=ARCHS,
        help="compute capability x10 to compile for (repeatable; default: all)",
    )
    parser.add_argument(
        "--kernel",
        action="append",
        choices=[s.name for s in kernel_specs()],
        help="kernel to compile (repeatable; default: all)",
    )
    parser.add_argument("--dump-sass", metavar="DIR", help="write <kernel>.sm_<arch>.sass files here")
    args = parser.parse_args(argv)
    results = run_aot(args.arch or ARCHS, args.kernel, progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    if args.dump_sass:
        os.makedirs(args.dump_sass, exist_ok=True)
        for r in results:
            with open(os.path.join(args.dump_sass, f"{r.kernel}.sm_{r.arch}.sass"), "w") as f:
                f.write(r.sass)
    print(format_table(results))
    bad = [r for r in results if not r.fits]
    no_tc = [
        r
        for r in results
        if r.arch == 120
        and r.kernel.startswith("paged_mqa_logits_kernel")
        and (r.tensor_core_ops["HMMA"] == 0 or r.tensor_core_ops["HGMMA"] or r.tensor_core_ops["UTCMMA"])
    ]
    for r in bad:
        print(f"FAIL: {r.kernel} sm_{r.arch}a needs {r.shared} B shared memory > {r.max_shared} B")
    for r in no_tc:
        print(f"FAIL: {r.kernel} sm_{r.arch}a SASS must use HMMA (mma.sync) only, found {r.tensor_core_ops}")
    return 1 if bad or no_tc else 0


if __name__ == "__main__":
    sys.exit(main())
