"""The bf16 index-K kernels on a real GPU against the float64 references.

Fresh random inputs, outputs poisoned (NaN) first so unwritten elements show. Runs each
configuration set of ``dispatch.CONFIGS`` on this GPU (the tile shapes differ, the
semantics must not). Speed lives in ``python -m kernels_sm120.bench_kernels``.
"""

import math

import pytest
import torch

from kernels_sm120 import dispatch
from kernels_sm120 import reference as R

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

CONFIG_NAMES = sorted(dispatch.CONFIGS)


def rel_err(out, ref):
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm()).item()


@pytest.fixture
def dev():
    torch.seed()  # fresh random inputs every run
    return torch.device("cuda")


def freqs_table(dev, positions=4096):
    ang = torch.rand(positions, 32, device=dev, dtype=torch.float64) * 2 * math.pi
    return torch.polar(torch.ones_like(ang), ang).to(torch.complex64)


def test_device_config_is_picked_at_call_time(dev):
    cap = torch.cuda.get_device_capability(dev)
    assert dispatch.configs_for(dev).name == dispatch.arch_key(cap)


@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_store_and_scatter(dev, name):
    cfgs = dispatch.CONFIGS[name]
    n, pages = 2000, 40
    freqs = freqs_table(dev)
    kv = (torch.randn(n, 128, device=dev) * 3).to(torch.bfloat16)
    w = torch.rand(128, device=dev) + 0.5
    pos = torch.randint(0, 4096, (n,), device=dev)
    loc = torch.randperm(pages * 64, device=dev)[:n]
    loc[::5] = -1
    pos[::5] = -7  # skipped rows: their position must never be read
    cache = torch.full((pages, 64 * 256), 0xFF, dtype=torch.uint8, device=dev)
    dispatch.store_index_k_bf16(kv, w, 1e-6, freqs, pos, loc, cache, config=cfgs.store)
    torch.cuda.synchronize()
    rows = R.index_k_cache_as_rows(cache)
    keep = loc >= 0
    got = rows[loc[keep]]
    ref = R.index_k_transform_reference(kv[keep], w, 1e-6, freqs, pos[keep])
    assert torch.isfinite(got.float()).all()
    assert rel_err(got, ref) < 3e-3
    # fp32 butterfly, one bf16 rounding: round-to-nearest(float64) but near rounding boundaries
    assert (got.double() != ref.to(torch.bfloat16).double()).float().mean() < 0.002
    written = torch.zeros(pages * 64, dtype=torch.bool, device=dev)
    written[loc[keep]] = True
    assert torch.isnan(rows[~written].float()).all()
    cache2 = torch.full_like(cache, 0xFF)
    dispatch.scatter_index_k_bf16(got, loc[keep], cache2, config=cfgs.scatter)
    torch.cuda.synchronize()
    assert torch.equal(cache2, cache)


@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_index_q(dev, name):
    cfgs = dispatch.CONFIGS[name]
    n = 257
    freqs = freqs_table(dev)
    q = torch.randn(n, 64 * 128, device=dev).to(torch.bfloat16)
    w = torch.randn(n, 64, device=dev).to(torch.bfloat16)
    pos = torch.randint(0, 4096, (n,), device=dev, dtype=torch.int32)
    q_out = torch.full((n, 64, 128), float("nan"), dtype=torch.bfloat16, device=dev)
    w_out = torch.full((n, 64), float("nan"), device=dev)
    dispatch.index_q_bf16(q, w, 0.01, freqs, pos, q_out=q_out, weights_out=w_out, config=cfgs.q)
    torch.cuda.synchronize()
    q_ref, w_ref = R.index_q_reference(q, w, 0.01, freqs, pos)
    assert torch.isfinite(q_out.float()).all() and torch.isfinite(w_out).all()
    assert rel_err(q_out, q_ref) < 3e-3
    assert (q_out.double() != q_ref.to(torch.bfloat16).double()).float().mean() < 0.002
    assert rel_err(w_out, w_ref) < 1e-6


@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_paged_logits(dev, name):
    cfgs = dispatch.CONFIGS[name]
    lens = [0, 1, 63, 64, 65, 1000, 2047, 2048] + torch.randint(1, 2049, (24,)).tolist()
    rows, width, max_len = len(lens), 32, 2050
    num_pages = sum(-(-n // 64) for n in lens) + 4
    perm = torch.randperm(num_pages, device=dev).to(torch.int32)
    pt = torch.full((rows, width), -1, dtype=torch.int32, device=dev)
    off = 0
    for r, n in enumerate(lens):
        p = -(-n // 64)
        pt[r, :p] = perm[off:off + p]
        off += p
    k_exact = torch.randn(num_pages * 64, 128, device=dev, dtype=torch.float64)
    q_exact = torch.randn(rows, 64, 128, device=dev, dtype=torch.float64)
    w = torch.randn(rows, 64, device=dev)
    seq = torch.tensor(lens, dtype=torch.int32, device=dev)
    cache = k_exact.to(torch.bfloat16).view(num_pages, 64 * 128).view(torch.uint8)
    q = q_exact.to(torch.bfloat16)
    out = torch.full((rows, max_len), float("nan"), device=dev)
    dispatch.paged_mqa_logits_bf16(q.unsqueeze(1), cache, w, seq, pt, max_len, out=out, config=cfgs.logits)
    torch.cuda.synchronize()
    ref_same = R.paged_mqa_logits_reference(q, R.index_k_cache_as_rows(cache), w, seq, pt, max_len)
    ref_exact = R.paged_mqa_logits_reference(q_exact, k_exact, w, seq, pt, max_len)
    fin = torch.isfinite(ref_same)
    assert not torch.isnan(out).any(), "every element must be written"
    assert torch.equal(torch.isneginf(out), ~fin), "-inf exactly past each row's length"
    assert rel_err(out[fin], ref_same[fin]) < 1e-4
    assert rel_err(out[fin], ref_exact[fin]) < 1e-2
