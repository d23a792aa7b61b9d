"""Ahead-of-time compilation of every kernel for sm_120a, sm_100a and sm_90a (no GPU).

Checks what only the compiler can tell on a CPU machine: each kernel's configuration for
each architecture compiles, fits that architecture's shared memory per block (SM120:
101376 B), and the logits kernel's SM120 SASS uses mma.sync tensor-core instructions
(HMMA) and nothing Hopper/datacenter-Blackwell-only (wgmma HGMMA, tcgen05 UTC*MMA) with both
of its tilings (decode; prefill row groups), and the store / q kernels need no tensor cores
at all (butterfly Hadamard). The same SM120 tilings are executed (forced) on the H200 by
tests/gpu/test_kernels_gpu.py and ``python -m benchmarks.kernels``.
"""

import pytest

from kernels_sm120 import aot
from kernels_sm120.dispatch import SM120_MAX_SHARED_BYTES

pytestmark = pytest.mark.slow  # compiles every kernel for three architectures: about a minute


@pytest.fixture(scope="module")
def results():
    if aot.cuobjdump_path() is None:
        pytest.fail("cuobjdump not found: Triton's NVIDIA backend ships one under triton/backends/nvidia/bin")
    return {(r.kernel, r.arch): r for r in aot.run_aot()}


def test_every_kernel_compiles_for_every_arch(results):
    names = {s.name for s in aot.kernel_specs()}
    # store, scatter, q; logits: decode, few-row, one-row, prefill; fp8 decode, few-row, one-row, prefill; fp4
    assert len(names) == 12
    assert set(results) == {(n, a) for n in names for a in aot.ARCHS}
    for (name, arch), r in results.items():
        assert r.ptx_target == f"sm_{arch}a", (name, r.ptx_target)
        assert r.sass.strip(), f"{name} sm_{arch}a produced no SASS"


def test_shared_memory_fits(results):
    assert aot.MAX_SHARED_BYTES[120] == SM120_MAX_SHARED_BYTES == 101376
    for (name, arch), r in results.items():
        assert r.shared <= r.max_shared, f"{name} sm_{arch}a needs {r.shared} B > {r.max_shared} B"
    for name in {n for n, _ in results}:
        assert results[(name, 120)].shared <= 101376


@pytest.mark.parametrize(
    "kernel",
    [
        "paged_mqa_logits_kernel",
        "paged_mqa_logits_kernel[few rows]",
        "paged_mqa_logits_kernel[one row]",
        "paged_mqa_logits_kernel[prefill]",
        "paged_mqa_logits_kernel[fp8]",
        "paged_mqa_logits_kernel[fp8 few rows]",
        "paged_mqa_logits_kernel[fp8 one row]",
        "paged_mqa_logits_kernel[fp8 prefill]",
        "paged_mqa_logits_fp4_kernel",
    ],
)
def test_logits_kernel_sm120_uses_hmma_only(results, kernel):
    tc = results[(kernel, 120)].tensor_core_ops
    assert tc["HMMA"] > 0, "the SM120 logits kernel must run on tensor cores (mma.sync -> HMMA)"
    assert tc["HGMMA"] == 0 and tc["UTCMMA"] == 0, tc


def test_hadamard_kernels_are_butterflies(results):
    """The store / q Hadamard is an fp32 butterfly (v4): no tensor-core instructions and
    no operand tiles in shared memory (only the small layout exchange between its two
    stages), so many programs fit per SM on every architecture."""
    for name in ("index_k_norm_rope_hadamard_store_kernel", "index_q_rope_hadamard_kernel"):
        for arch in aot.ARCHS:
            r = results[(name, arch)]
            assert r.tensor_core_ops == {"HMMA": 0, "HGMMA": 0, "UTCMMA": 0}, (name, arch, r.tensor_core_ops)
            assert r.shared < 8448, (name, arch, r.shared)  # v3's bf16 Hadamard operands needed 8448 B


def test_cli_prints_table(capsys):
    rc = aot.main(["--arch", "120", "--kernel", "index_k_scatter_rows_kernel"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "index_k_scatter_rows_kernel" in out and "sm_120a" in out and "101376" in out


@pytest.mark.parametrize("arch", [90, 120])
@pytest.mark.parametrize("item_grid", [False, True], ids=["rows-x-split", "item-grid"])
def test_decode_logits_keep_their_pipeline_stages(arch, item_grid):
    """Triton's pipeliner must give the key loads num_stages - 1 shared-memory buffers (cp.async,
    LDGSTS) on both decode grids. With loop bounds derived from the item grid's search it pipelined
    nothing (one key buffer, no LDGSTS); the loops count from 0 since."""
    import dataclasses

    from kernels_sm120 import dispatch

    spec = next(s for s in aot.kernel_specs() if s.name == "paged_mqa_logits_kernel")
    cfgs = dispatch.CONFIGS[dispatch.arch_key((arch // 10, arch % 10))]
    cfg = dataclasses.replace(cfgs.logits, item_grid=item_grid, busy_per_sm=cfgs.logits.busy_per_sm or 2)
    compiled, _, _ = aot.compile_kernel(spec, arch, dataclasses.replace(cfgs, logits=cfg))
    key_tile = cfg.block_n * 128 * 2
    assert compiled.metadata.shared >= (cfg.num_stages - 1) * key_tile, (compiled.metadata.shared, key_tile)
    assert "LDGSTS" in aot.disassemble(compiled.asm["cubin"])


@pytest.mark.parametrize("arch", [90, 120])
@pytest.mark.parametrize("kernel", ["[fp8]", "[fp8 few rows]", "[fp8 one row]"])
def test_fp8_decode_logits_keep_their_pipeline_stages(arch, kernel):
    """The fp8 decode tilings carry values across tiles (key scales one tile ahead; the one-row tiling's
    interleaved page ids) and must keep num_stages - 1 cp.async key buffers. With the interleaved parts'
    ids read two tiles ahead (for their scales) Triton's pipeliner dropped cp.async altogether (no LDGSTS)."""
    from kernels_sm120 import dispatch

    cfgs = dispatch.CONFIGS[dispatch.arch_key((arch // 10, arch % 10))]
    rows = {"[fp8]": 64, "[fp8 few rows]": cfgs.few_rows_max, "[fp8 one row]": 1}[kernel]
    cfg = cfgs.logits_for(rows, key_fp8=True)
    spec = next(s for s in aot.kernel_specs() if s.name == f"paged_mqa_logits_kernel{kernel}")
    compiled, _, _ = aot.compile_kernel(spec, arch)
    key_tile = cfg.block_n * 128  # e4m3 bytes
    assert compiled.metadata.shared >= (cfg.num_stages - 1) * key_tile, (compiled.metadata.shared, key_tile)
    assert "LDGSTS" in aot.disassemble(compiled.asm["cubin"])


DECODE_LOGITS_FIELDS = (
    "logits",
    "logits_few_rows",
    "logits_one_row",
    "logits_fp8",
    "logits_fp8_few_rows",
    "logits_fp8_one_row",
)


def _with_decode(cfgs, **changes):
    """``cfgs`` with every decode logits tiling changed by ``changes``."""
    import dataclasses

    tilings = {f: getattr(cfgs, f) for f in DECODE_LOGITS_FIELDS if getattr(cfgs, f) is not None}
    return dataclasses.replace(cfgs, **{f: dataclasses.replace(c, **changes) for f, c in tilings.items()})


@pytest.mark.parametrize("arch", [90, 120])
@pytest.mark.parametrize(
    "kernel", ["", "[few rows]", "[one row]", "[fp8]", "[fp8 few rows]", "[fp8 one row]"], ids=lambda k: k or "[decode]"
)
def test_direct_store_reaches_every_decode_kernel(arch, kernel):
    """The direct store (inline PTX) is compiled into every decode tiling that asks for it: its store is in the
    PTX, and the shared-memory round trip of the layout change is gone (on sm_120a, with it, barriers). It runs
    only on a GPU, where tests/gpu/test_logits_direct_store_gpu.py compares it bit for bit with tl.store; this
    check fails if a function between the kernel and the store drops the switch."""
    from kernels_sm120 import dispatch

    spec = next(s for s in aot.kernel_specs() if s.name == f"paged_mqa_logits_kernel{kernel}")
    cfgs = dispatch.CONFIGS[dispatch.arch_key((arch // 10, arch % 10))]
    plain, _, _ = aot.compile_kernel(spec, arch, cfgs)
    direct, _, _ = aot.compile_kernel(spec, arch, _with_decode(cfgs, direct_store=True))
    assert "@p st.global.b32" not in plain.asm["ptx"]
    assert "@p st.global.b32" in direct.asm["ptx"]
    assert direct.asm["ptx"].count("st.shared") < plain.asm["ptx"].count("st.shared")
    if arch == 120:
        assert direct.asm["ptx"].count("bar.sync") < plain.asm["ptx"].count("bar.sync")


def _tiling_id(changes: dict) -> str:
    return "bf16 page tiles" if changes == BF16_PAGE_TILES else "its own tiling"


# bf16 keys on the item grid, one page per tile (a sweep candidate, ``benchmarks/kernels_fp8_tilings.py``)
BF16_PAGE_TILES = dict(block_n=64, page_block=0, busy_per_sm=3, min_chunk=128, item_grid=True)


@pytest.mark.parametrize(
    "arch, kernel, tiling",
    [(90, "[few rows]", {})]
    + [(a, k, {}) for a in (90, 120) for k in ("[one row]", "[fp8]", "[fp8 few rows]", "[fp8 one row]")]
    + [(a, "", BF16_PAGE_TILES) for a in (90, 120)],
    ids=lambda v: (v or "[decode]") if isinstance(v, str) else _tiling_id(v) if isinstance(v, dict) else None,
)
def test_page_ids_two_ahead_keep_the_key_tiles_pipelined(arch, kernel, tiling):
    """Page ids two tiles ahead (``ids_ahead=2``, the one-page tilings) reach the kernel and leave its key
    tiles streamed by cp.async into as many shared-memory buffers. Triton's pipeliner leaves a loop unpipelined
    when it carries a value on unchanged to the next iteration (a distance of two), which handing the id on
    from one tile to the next does; the kernel makes it a new value each time. This fails if that is undone."""
    from kernels_sm120 import dispatch

    spec = next(s for s in aot.kernel_specs() if s.name == f"paged_mqa_logits_kernel{kernel}")
    cfgs = dispatch.CONFIGS[dispatch.arch_key((arch // 10, arch % 10))]
    one, _, _ = aot.compile_kernel(spec, arch, _with_decode(cfgs, ids_ahead=1, **tiling))
    two, _, _ = aot.compile_kernel(spec, arch, _with_decode(cfgs, ids_ahead=2, **tiling))
    assert two.asm["ptx"] != one.asm["ptx"], "ids_ahead did not reach the kernel"
    assert one.asm["ptx"].count("cp.async.cg") > 0
    assert two.asm["ptx"].count("cp.async.cg") == one.asm["ptx"].count("cp.async.cg")
    assert two.metadata.shared == one.metadata.shared
    if "fp8" in kernel:  # ids three ahead, scales two ahead
        three, _, _ = aot.compile_kernel(spec, arch, _with_decode(cfgs, ids_ahead=3))
        assert three.asm["ptx"] != two.asm["ptx"], "ids_ahead=3 did not reach the kernel"
        assert three.asm["ptx"].count("cp.async.cg") == one.asm["ptx"].count("cp.async.cg")
        assert three.metadata.shared == one.metadata.shared
