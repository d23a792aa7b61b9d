"""recall's fp8 / fp4 rounding is SGLang 0.5.23's own index-K quantization, bit for bit (on CPU).

SGLang's serving quantizers are GPU kernels (JIT CUDA; Triton). What runs here, unstubbed: SGLang's
pure-torch fp4 reference ``quantize_fp4_indexer_ref`` (shipped in its wheel), its pool's pure-torch
fp4 reader ``DeepSeekV4IndexerPool.get_index_k_dequant``, and its Triton kernels
``triton_fused_store_indexer`` (the fp8 index-K store) and ``quantize_fp4_indexer_tensor`` run by
Triton's interpreter (tests/support/triton_interpreter.py; its fp32 -> fp8 conversion is torch's
round-to-nearest-even, as on a GPU). The JIT CUDA kernels are compared in tests/gpu.
"""

from __future__ import annotations

import pytest
import torch

from kernels_sm120 import reference
from sglang_dsv4_ext.tools.recall import formats
from tests.support.releases import only_on
from tests.support.triton_interpreter import interpreted_kernels


def _rows(n: int, seed: int, low_exp: float = -3.0, high_exp: float = 3.0) -> torch.Tensor:
    """bf16 rows of 128 (what a bf16 capture holds), each with its own magnitude 10**U(low, high)."""
    g = torch.Generator().manual_seed(seed)
    magnitude = 10 ** (low_exp + (high_exp - low_exp) * torch.rand(n, 1, generator=g))
    return (torch.randn(n, 128, generator=g) * magnitude).to(torch.bfloat16)


def _pack_fp4(code: torch.Tensor, exponent: torch.Tensor):
    """Our codes/exponents in SGLang's packed layout: two codes a byte (low nibble first), four exponents an int32."""
    packed = (code[:, 0::2] | (code[:, 1::2] << 4)).to(torch.uint8)
    sf = exponent[:, 0] | (exponent[:, 1] << 8) | (exponent[:, 2] << 16) | (exponent[:, 3] << 24)
    return packed, sf.to(torch.int32)


def test_fp8_equals_the_kernels_reference_bit_for_bit():
    x = torch.cat([_rows(512, 1, -7, 4), torch.zeros(2, 128, dtype=torch.bfloat16)])
    assert torch.equal(formats.fp8_round_trip(x), reference.fp8_quant_dequant_rows(x))


def test_fp8_equals_sglangs_triton_index_k_store_bit_for_bit():
    """SGLang's Triton fp8 index-K store (its ROCm path of ``fused_store_cache(type="indexer")``), run by Triton's
    interpreter: the CPU suite's guard of recall's fp8 rule (a mutation row shows a 10% scale error fails it).

    The kernel's ``scale = max(amax, EPS) / FP8_MAX`` is an fp32 division. Compiled for a GPU, Triton emits an
    approximate division (the scale is then 1 ulp away in about half the rows, benchmarks/GPU-NOTES.md; the GPU
    test compares the values given the kernel's own scale). The interpreter divides with numpy's IEEE fp32
    division, correctly rounded like torch's, so here the scales and every value byte must be equal outright.
    Its floor is ``amax >= 1e-8`` where the CUDA store's is 1e-4, so rows here have amax >= 1e-4.
    """
    from sglang.kernels.ops.kvcache import triton_store_cache

    x = _rows(96, 2, -3, 3)
    page_size, pages = 64, 2
    cache = torch.zeros(pages, page_size * 132, dtype=torch.uint8)
    slots = torch.randperm(pages * page_size, generator=torch.Generator().manual_seed(3))[:96]
    with interpreted_kernels(triton_store_cache):
        triton_store_cache.triton_fused_store_indexer(x, cache, slots, page_size)

    page, offset = slots // page_size, slots % page_size
    value_cols = (offset * 128).unsqueeze(1) + torch.arange(128)
    scale_cols = (page_size * 128 + offset * 4).unsqueeze(1) + torch.arange(4)
    sglang_values = cache[page.unsqueeze(1), value_cols]
    sglang_scales = cache[page.unsqueeze(1), scale_cols].contiguous().view(torch.float32)
    values, scales = formats.fp8_quantize(x)
    assert torch.equal(values.view(torch.uint8), sglang_values)
    assert torch.equal(scales, sglang_scales)


def _fp4_rows() -> torch.Tensor:
    """Random groups (amax >= 6e-4, where SGLang's Triton and CUDA floors agree) plus exact e2m1 ties."""
    x = _rows(256, 4, -2, 3)
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -0.75, 6.0] + [0.0] * 22)
    return torch.cat([x, torch.cat([ties] * 4).view(1, 128).to(torch.bfloat16)])


@only_on(
    "0.5.23",
    "SGLang 0.5.22 has no sglang.kernels.ops.quantization.fp4_indexer_quant (the reference this compares with)",
)
@pytest.mark.slow  # SGLang's Triton quantizer through Triton's interpreter
def test_fp4_equals_sglangs_torch_reference_and_triton_quantizer_bit_for_bit():
    from sglang.kernels.ops.quantization import fp4_indexer_quant
    from sglang.test.kernels.deepseek_v4.common import quantize_fp4_indexer_ref

    x = _fp4_rows()
    ours = _pack_fp4(*formats.fp4_quantize(x))
    ref_packed, ref_sf = quantize_fp4_indexer_ref(x)
    with interpreted_kernels(fp4_indexer_quant):
        kernel_packed, kernel_sf = fp4_indexer_quant.quantize_fp4_indexer_tensor(x)
    assert torch.equal(ours[0], ref_packed) and torch.equal(ours[1], ref_sf)
    assert torch.equal(ours[0], kernel_packed.view(torch.uint8)) and torch.equal(ours[1], kernel_sf)


def test_fp4_round_trip_equals_sglangs_pool_reader():
    """Our codes written in SGLang's fp4 page layout, read back by its pool's own pure-torch dequant."""
    from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4IndexerPool

    x = _fp4_rows()
    packed, sf = _pack_fp4(*formats.fp4_quantize(x))
    page_size, n = 64, x.shape[0]
    pages = (n + page_size - 1) // page_size
    buf = torch.zeros(pages, page_size * 68, dtype=torch.uint8)
    slots = torch.arange(n)
    page, offset = slots // page_size, slots % page_size
    buf[page.unsqueeze(1), (offset * 64).unsqueeze(1) + torch.arange(64)] = packed
    scale_bytes = sf.view(torch.uint8).view(n, 4)  # little-endian: group g's exponent is byte g
    buf[page.unsqueeze(1), (page_size * 64 + offset * 4).unsqueeze(1) + torch.arange(4)] = scale_bytes

    pool = object.__new__(DeepSeekV4IndexerPool)  # the real class; only the reader's fields are set
    pool.__dict__.update(
        use_fp4_indexer=True,
        index_k_with_scale_buffer=[buf],
        start_layer=0,
        page_size=page_size,
        size=pages * page_size,
    )
    sglang_values = DeepSeekV4IndexerPool.get_index_k_dequant(pool, 0, slots)
    assert torch.equal(sglang_values, formats.fp4_round_trip(x).to(torch.bfloat16))


@pytest.mark.parametrize("fmt", ["fp8", "fp4"])
def test_round_trip_is_close_but_lossy(fmt):
    """A sanity bound that fails if a format silently became the identity or garbage."""
    from sglang_dsv4_ext.tools.recall import cli as recall

    x = _rows(64, 5, 0, 0).double()
    err = ((recall.round_trip(fmt, x) - x).norm() / x.norm()).item()
    assert 1e-4 < err < (0.05 if fmt == "fp8" else 0.2)
