"""The fp8 paged MQA logits kernel on a real GPU, over SGLang's fp8 index-K pool as stored.

Fresh random inputs, outputs poisoned (NaN) first. Every configuration set of ``dispatch.CONFIGS`` is
forced on this GPU (on the H200 that is how the SM120 tilings execute), decode and prefill tilings;
checked against the float64 reference of the same fp8 values and against SGLang's own
``fp8_paged_mqa_logits_torch_sm120`` (the installed function, from the GPU bundle). The TileLang
comparison needs TileLang's carried packages and lives in ``python -m benchmarks.kernels_fp8``.
"""

import pytest
import torch

from kernels_sm120 import dispatch
from kernels_sm120 import reference as R
from tests.support.logits_inputs import fp8_case

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

CONFIG_NAMES = sorted(dispatch.CONFIGS)


@pytest.fixture
def dev():
    torch.seed()
    return torch.device("cuda")


def tolerance(cfg):
    """Widened to fp16 the products are exact and summed in fp32; on fp8 tensor cores Hopper's wgmma
    keeps fewer accumulator bits (SGLang's TileLang kernel measured 2.4e-4 of the largest logit on
    the same data, NOTES.md)."""
    return 1e-3 if cfg.fp8_mma else 1e-5


def check(out, ref, seq, max_len, tol):
    mask = torch.arange(max_len, device=out.device)[None, :] < seq.long()[:, None]
    assert torch.isnan(out[~mask]).all(), "columns past each row's length are not written"
    assert torch.isfinite(out[mask]).all()
    err = ((out[mask].double() - ref[mask]).norm() / ref[mask].norm()).item()
    assert err < tol, err
    return mask


@pytest.mark.parametrize("name", CONFIG_NAMES)
@pytest.mark.parametrize("kind", ["decode", "few-rows", "prefill"])
def test_fp8_logits_vs_float64(dev, name, kind):
    cfgs = dispatch.CONFIGS[name]
    if kind == "prefill":
        lens = [int(x) for x in torch.linspace(1, 3000, 520)]
        q, cache, w, seq, pt = fp8_case(lens, 48, device=dev, shared=True)
        cfg = cfgs.logits_prefill
    else:
        rows = 4 if kind == "few-rows" else 40
        lens = [int(x) for x in torch.randint(0, 9000, (rows,))]
        lens[0], lens[-1] = 0, 9000
        q, cache, w, seq, pt = fp8_case(lens, 4096 // 64 * 4, device=dev)  # a wide table, as under a decode graph
        cfg = cfgs.logits_for(rows, key_fp8=True)
    max_len = pt.shape[1] * 64
    out = torch.full((len(lens), max_len), float("nan"), device=dev)
    dispatch.paged_mqa_logits_fp8(q, cache, w, seq, pt, max_len, out=out, config=cfg)
    torch.cuda.synchronize()
    ref = R.fp8_paged_mqa_logits_reference(q, cache, w, seq, pt, max_len)
    check(out, ref, seq, max_len, tolerance(cfg))


def test_fp8_logits_vs_sglang_torch_sm120(sglang_gpu, dev):
    from sglang.srt.layers.attention.dsv4.indexer import fp8_paged_mqa_logits_torch_sm120

    lens = [1, 64, 65, 777, 4096, 8191]
    q, cache, w, seq, pt = fp8_case(lens, 128, device=dev)
    max_len = 128 * 64
    ours = dispatch.paged_mqa_logits_fp8(q, cache, w, seq, pt, max_len)
    theirs = fp8_paged_mqa_logits_torch_sm120(q, cache, w, seq, pt, None, max_len, clean_logits=False)
    ref = R.fp8_paged_mqa_logits_reference(q, cache, w, seq, pt, max_len)
    mask = torch.arange(max_len, device=dev)[None, :] < seq.long()[:, None]
    err_ours = ((ours[mask].double() - ref[mask]).norm() / ref[mask].norm()).item()
    err_theirs = ((theirs[mask].double() - ref[mask]).norm() / ref[mask].norm()).item()
    # SGLang's torch path runs a bf16 bmm (bf16 products' sums rounded to bf16); ours sums in fp32
    cfg = dispatch.configs_for(dev).logits_for(len(lens), key_fp8=True)
    assert err_ours < tolerance(cfg) and err_theirs < 1e-2
    assert ((ours[mask] - theirs[mask]).norm() / theirs[mask].norm()).item() < 1e-2


def test_fp8_logits_under_cuda_graph(dev):
    lens = [300, 5000, 0, 64]
    q, cache, w, seq, pt = fp8_case(lens, 100, device=dev)
    out = torch.full((4, 6400), float("nan"), device=dev)
    dispatch.paged_mqa_logits_fp8(q, cache, w, seq, pt, 6400, out=out)  # compile outside the capture
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        dispatch.paged_mqa_logits_fp8(q, cache, w, seq, pt, 6400, out=out)
    out.fill_(float("nan"))
    seq.copy_(torch.tensor([6000, 1, 64, 2], device=dev))  # new lengths, same graph
    g.replay()
    torch.cuda.synchronize()
    ref = R.fp8_paged_mqa_logits_reference(q, cache, w, seq, pt, 6400)
    check(out, ref, seq, 6400, tolerance(dispatch.configs_for(dev).logits_for(4, key_fp8=True)))
