"""The fp4 paged MQA logits kernel on a real GPU, over SGLang's fp4 index-K pool written by SGLang.

The keys are stored by SGLang's own ``store_fp4_index_k_cache`` (the installed Triton store the fp4
pool's ``set_index_fp4`` calls, from the GPU bundle) into a pool-shaped uint8 buffer, and q is
quantized by SGLang's own ``quantize_fp4_indexer_tensor`` (what the c4 indexer's fp4 q path
produces): our kernel reads exactly SGLang's bytes. Checked against the float64 logits of the values
SGLang's pool dequantizes (``DeepSeekV4IndexerPool.get_index_k_dequant``) and of SGLang's q bytes.
Outputs are poisoned (NaN) first: columns past each row's length must stay untouched.
"""

import types

import pytest
import torch

from kernels_sm120 import paged_mqa_logits_fp4
from kernels_sm120 import reference as R

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


@pytest.fixture
def dev():
    torch.seed()
    return torch.device("cuda")


def sglang_pages(dev, num_pages):
    from sglang.kernels.ops.kvcache.dsv4_fp4_index_k_cache import store_fp4_index_k_cache

    keys = torch.randn(num_pages * 64, 128, device=dev) * torch.rand(num_pages * 64, 1, device=dev) * 4
    cache = torch.zeros(num_pages, 64 * 68, dtype=torch.uint8, device=dev)
    loc = torch.randperm(num_pages * 64, device=dev)  # key i to slot loc[i], as the compressor's out_loc
    store_fp4_index_k_cache(keys.to(torch.bfloat16), cache, loc, page_size=64)
    return cache


def sglang_dequant(cache):
    from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4IndexerPool

    pool = types.SimpleNamespace(use_fp4_indexer=True, index_k_with_scale_buffer=[cache], start_layer=0, page_size=64)
    return DeepSeekV4IndexerPool.get_index_k_dequant(
        pool, 0, torch.arange(cache.shape[0] * 64, device=cache.device)
    ).double()


def sglang_q(dev, rows, heads):
    from sglang.kernels.ops.quantization.fp4_indexer_quant import quantize_fp4_indexer_tensor

    q = torch.randn(rows, heads, 128, device=dev) * 3
    q_fp4, q_sf = quantize_fp4_indexer_tensor(q.flatten(0, 1).to(torch.bfloat16), rne=True)
    q_fp4, q_sf = q_fp4.view(rows, 1, heads, 64), q_sf.view(rows, 1, heads)
    u = q_fp4.view(torch.uint8)[:, 0]
    codes = torch.stack([u & 0x0F, u >> 4], dim=-1).flatten(-2)  # element 2i low, 2i+1 high
    exps = torch.stack([(q_sf[:, 0] >> (8 * g)) & 0xFF for g in range(4)], dim=-1)
    return q_fp4, q_sf, R.fp4_values(codes, exps)


@pytest.mark.parametrize("lens", [[1], [2048], [70, 0, 513, 4096, 64, 65, 8000, 3]], ids=["1", "2k", "mixed"])
def test_fp4_kernel_reads_sglang_bytes(dev, lens):
    heads, width = 64, max(-(-n // 64) for n in lens) + 1
    num_pages = width * len(lens) + 2
    cache = sglang_pages(dev, num_pages)
    pt = torch.randperm(num_pages, device=dev)[: width * len(lens)].view(len(lens), width).to(torch.int32)
    q_fp4, q_sf, q_values = sglang_q(dev, len(lens), heads)
    w = torch.randn(len(lens), heads, device=dev)
    seq = torch.tensor(lens, dtype=torch.int32, device=dev)
    max_len = max(lens) + 17
    out = torch.full((len(lens), max_len), float("nan"), device=dev)
    paged_mqa_logits_fp4(q_fp4, q_sf, cache.view(-1, 64, 1, 68), w, seq.unsqueeze(-1), pt, max_len, out=out)
    ref = R.paged_mqa_logits_reference(q_values, sglang_dequant(cache), w, seq, pt, max_len)
    mask = torch.arange(max_len, device=dev)[None, :] < seq.long()[:, None]
    assert torch.isnan(out[~mask]).all(), "columns past each row's length are not written"
    err = ((out.double()[mask] - ref[mask]).abs().max() / ref[mask].abs().max()).item()
    assert err < 1e-5, err
