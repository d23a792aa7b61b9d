"""SGLang 0.5.23's own index-K / index-Q quantization, in torch, for ``sglang-dsv4 recall``.

Why: recall must round captured bf16 rows exactly as SGLang's serving kernels would have stored
them. Those kernels are GPU-only (JIT CUDA; Triton on ROCm), so the arithmetic is restated here,
line for line, from the CUDA sources in the installed wheel (``sglang/kernels/jit/csrc``):

* fp8, keys: ``deepseek_v4/fused_norm_rope_v2.cuh`` (the c4 compressor's indexer store, "part 4")
  and ``deepseek_v4/store.cuh`` (``fused_store_indexer_cache``, behind ``fused_store_cache(...,
  type="indexer")``): per 128-value row ``scale = fmaxf(1e-4f, amax) / 448`` (fp32, stored as is),
  values ``pack_fp8(x * (1.0f / scale))``, which clips to +-448 and rounds to nearest e4m3.
  Queries: ``deepseek_v4/main_norm_rope.cuh`` (``fused_q_indexer_rope_hadamard_quant``), the same
  rule per (token, head), the scale folded into the head weights.
* fp4, keys: ``fused_norm_rope_v2.cuh`` (``fused_norm_rope_indexer_fp4``); queries:
  ``main_norm_rope.cuh``: per 32 values ``scale_raw = fmaxf(1e-4f, amax) / 6``, exponent
  ``cast_to_ue8m0`` (the fp32 exponent, +1 unless the mantissa is zero: the power of two at or
  above), values ``quant_fp4_e2m1(x * 2^-e)``: the e2m1 code counting the thresholds 0.25, 0.75,
  1.25, 1.75, 2.5, 3.5, 5.0 that ``min(|x|, 6)`` strictly exceeds (ties round down), sign kept
  unless the code is 0.

Checked bit for bit: on CPU against SGLang's pure-torch ``quantize_fp4_indexer_ref``
(``sglang/test/kernels/deepseek_v4/common.py``, the reference of its Triton
``quantize_fp4_indexer_tensor``), its pool's ``get_index_k_dequant``, and its Triton fp8 indexer
store (``sglang/kernels/ops/kvcache/triton_store_cache.py``) run by Triton's interpreter
(tests/unit/recall/test_formats.py); on a GPU against the CUDA JIT store and the Triton fp4
quantizer (tests/gpu/test_recall_formats_gpu.py). On an H200 (2026-12-01) the Triton fp8 store (the
ROCm path, compiled for CUDA) computes ``amax / 448`` with Triton's approximate fp32 division: its
scale is 1 ulp away in about half the rows, and then about 0.1% of the values land one e4m3 step
away; with the kernel's own scale the rule above reproduces every value byte. The CUDA JIT store
(the NVIDIA serving path) could not be built on that machine. Two SGLang paths differ from the rule above only
for near-zero rows: the Triton fp4 quantizer clamps ``amax / 6`` (not ``amax``) at 1e-4, and the
ROCm Triton fp8 store clamps ``amax`` at 1e-8; neither changes a row with ``amax >= 6e-4``.
"""

from __future__ import annotations

import torch

FP8_E4M3_MAX = 448.0
AMAX_FLOOR = 1e-4  # fmaxf(1e-4f, amax) in every CUDA index-K / index-Q quantizer
FP4_GROUP = 32
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
E2M1_THRESHOLDS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)


def fp8_scale(x: torch.Tensor) -> torch.Tensor:
    """The fp32 scale ``[..., 1]`` of each row (last dim): ``fmaxf(1e-4f, amax) / 448``."""
    return x.to(torch.float32).abs().amax(-1, keepdim=True).clamp(min=AMAX_FLOOR) / FP8_E4M3_MAX


def fp8_values(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """e4m3 values ``[..., D]`` of each row for a given scale: ``pack_fp8(x * (1.0f / scale))``."""
    return (x.to(torch.float32) * (1.0 / scale)).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)


def fp8_quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """e4m3 values ``[..., D]`` and the fp32 scale ``[..., 1]`` of each row (last dim)."""
    scale = fp8_scale(x)
    return fp8_values(x, scale), scale


def fp8_round_trip(x: torch.Tensor) -> torch.Tensor:
    values, scale = fp8_quantize(x)
    return values.to(torch.float32) * scale


def ue8m0_ceil(x: torch.Tensor) -> torch.Tensor:
    """``cast_to_ue8m0``: the biased fp32 exponent of ``x``, plus one unless ``x`` is a power of two."""
    bits = x.to(torch.float32).contiguous().view(torch.int32)
    return ((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0).to(torch.int32)


def fp4_quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """e2m1 codes ``[..., D]`` (uint8, sign in bit 3) and biased ue8m0 exponents ``[..., D/32]`` (int32)."""
    groups = x.to(torch.float32).reshape(*x.shape[:-1], -1, FP4_GROUP)
    exponent = ue8m0_ceil(groups.abs().amax(-1).clamp(min=AMAX_FLOOR) / 6.0)
    inv_scale = ((254 - exponent) << 23).view(torch.float32)  # inv_scale_ue8m0: exactly 2^-(e-127)
    scaled = groups * inv_scale.unsqueeze(-1)
    magnitude = scaled.abs().clamp(max=6.0)
    code = torch.zeros_like(magnitude, dtype=torch.uint8)
    for threshold in E2M1_THRESHOLDS:
        code += (magnitude > threshold).to(torch.uint8)
    code |= ((scaled < 0) & (code != 0)).to(torch.uint8) << 3
    return code.reshape(x.shape), exponent


def fp4_dequantize(code: torch.Tensor, exponent: torch.Tensor) -> torch.Tensor:
    """float64 values of :func:`fp4_quantize`'s output."""
    table = torch.tensor(E2M1_VALUES, dtype=torch.float64)
    magnitude = table[(code & 0x7).long()]
    value = torch.where((code & 0x8) != 0, -magnitude, magnitude)
    scale = torch.exp2(exponent.to(torch.float64) - 127).repeat_interleave(FP4_GROUP, dim=-1)
    return value * scale


def fp4_round_trip(x: torch.Tensor) -> torch.Tensor:
    return fp4_dequantize(*fp4_quantize(x))
