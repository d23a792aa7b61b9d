"""recall's fp8 / fp4 rounding (sglang_dsv4_ext/tools/recall/formats.py) against SGLang's own GPU quantizers.

* fp8: SGLang's CUDA JIT index-K store ``fused_store_cache(..., type="indexer")`` (``store.cuh``,
  ``fused_store_indexer_cache``; the c4 compressor's fused store uses the same arithmetic) on every
  row, tiny ones included; and its Triton store ``triton_fused_store_indexer`` (the ROCm path,
  compiled here for CUDA) on rows with amax >= 1e-4 (its floor is 1e-8): equal up to the 1-ulp scale
  differences of Triton's approximate fp32 division, bit for bit given the kernel's scale.
* fp4: SGLang's Triton ``quantize_fp4_indexer_tensor`` (behind ``set_index_fp4``) on groups with
  amax >= 6e-4 (it floors ``amax / 6`` where the CUDA compressor store floors ``amax``).

Nothing is stubbed. The JIT test skips, saying so, where SGLang's JIT toolchain cannot build here.
"""

import pytest
import torch

from sglang_dsv4_ext.tools.recall import formats

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

PAGE = 64


def _rows(n, low_exp, high_exp, seed):
    g = torch.Generator().manual_seed(seed)
    magnitude = 10 ** (low_exp + (high_exp - low_exp) * torch.rand(n, 1, generator=g))
    return (torch.randn(n, 128, generator=g) * magnitude).to(torch.bfloat16).cuda()


def _read_fp8_pages(cache, slots):
    page, offset = slots // PAGE, slots % PAGE
    values = cache[page.unsqueeze(1), (offset * 128).unsqueeze(1) + torch.arange(128, device=cache.device)]
    scales = cache[page.unsqueeze(1), (PAGE * 128 + offset * 4).unsqueeze(1) + torch.arange(4, device=cache.device)]
    return values, scales.contiguous().view(torch.float32)


def _assert_fp8_equal(x, cache, slots):
    values, scales = _read_fp8_pages(cache, slots)
    ours_values, ours_scales = formats.fp8_quantize(x.cpu())
    assert torch.equal(values.cpu(), ours_values.view(torch.uint8))
    assert torch.equal(scales.cpu(), ours_scales)


def test_fp8_equals_sglangs_cuda_jit_index_k_store(sglang_gpu):
    try:
        from sglang.kernels.ops.attention.dsv4 import fused_store_cache
    except Exception as exc:  # the JIT wrappers import their toolchain at module import
        pytest.skip(f"SGLang's JIT kernels cannot be imported here: {exc}")
    x = torch.cat([_rows(200, -6, 3, 1), torch.zeros(2, 128, dtype=torch.bfloat16, device="cuda")])
    slots = torch.randperm(8 * PAGE, device="cuda")[: x.shape[0]]
    cache = torch.zeros(8, PAGE * 132, dtype=torch.uint8, device="cuda")
    try:
        fused_store_cache(x, cache, slots, page_size=PAGE, type="indexer")
    except (RuntimeError, OSError, ImportError) as exc:
        pytest.skip(f"SGLang's JIT index-K store cannot be built here: {exc}")
    torch.cuda.synchronize()
    _assert_fp8_equal(x, cache, slots)


def test_fp8_matches_sglangs_triton_index_k_store_up_to_its_approximate_division(sglang_gpu):
    """Triton compiles ``amax / 448`` to an approximate fp32 division (measured on the H200: the scale is
    1 ulp away in about half the rows); given the kernel's scale, our rule reproduces every value byte."""
    from sglang.kernels.ops.kvcache.triton_store_cache import triton_fused_store_indexer

    x = _rows(300, -3, 3, 2)
    slots = torch.randperm(8 * PAGE, device="cuda")[: x.shape[0]]
    cache = torch.zeros(8, PAGE * 132, dtype=torch.uint8, device="cuda")
    triton_fused_store_indexer(x, cache, slots, PAGE)
    torch.cuda.synchronize()
    values, scales = _read_fp8_pages(cache, slots)
    values, scales = values.cpu(), scales.cpu()
    ours = formats.fp8_scale(x.cpu())
    assert (scales.view(torch.int32) - ours.view(torch.int32)).abs().max() <= 1  # at most 1 ulp
    assert torch.equal(values, formats.fp8_values(x.cpu(), scales).view(torch.uint8))
    differing = (values != formats.fp8_values(x.cpu(), ours).view(torch.uint8)).float().mean()
    assert differing < 0.01, f"{differing:.4%} of the values differ with our own scale"


def test_fp4_equals_sglangs_triton_quantizer(sglang_gpu):
    from sglang.kernels.ops.quantization.fp4_indexer_quant import quantize_fp4_indexer_tensor

    x = _rows(5000, -2, 3, 3)  # >= 4096 rows also takes the multi-row kernel on Blackwell
    packed, sf = quantize_fp4_indexer_tensor(x)
    code, exponent = formats.fp4_quantize(x.cpu())
    ours_packed = (code[:, 0::2] | (code[:, 1::2] << 4)).to(torch.uint8)
    ours_sf = exponent[:, 0] | (exponent[:, 1] << 8) | (exponent[:, 2] << 16) | (exponent[:, 3] << 24)
    assert torch.equal(packed.view(torch.uint8).cpu(), ours_packed)
    assert torch.equal(sf.cpu(), ours_sf.to(torch.int32))
