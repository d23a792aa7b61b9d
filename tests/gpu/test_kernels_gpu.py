"""The bf16 index-K kernels on a real GPU against the float64 references.

Fresh random inputs, outputs poisoned (NaN) first so unwritten elements show. Runs each
configuration set of ``dispatch.CONFIGS`` on this GPU, forced (the tile shapes differ, the
semantics must not; on the H200 this is how the SM120 tilings execute), with both logits
tilings (decode: one row per program; prefill: row groups sharing key tiles). Speed lives
in ``python -m benchmarks.kernels``.
"""

import math

import pytest
import torch

from kernels_sm120 import dispatch
from kernels_sm120 import reference as R
from tests.support.logits_inputs import logits_inputs

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


def check_logits_against_references(dev, cfg, lens, width, max_len, **kw):
    k_exact, q_exact, w, seq, pt, cache = logits_inputs(dev, lens, width, **kw)
    q = q_exact.to(torch.bfloat16)
    out = torch.full((len(lens), max_len), float("nan"), device=dev)
    dispatch.paged_mqa_logits_bf16(q.unsqueeze(1), cache, w, seq, pt, max_len, out=out, config=cfg)
    torch.cuda.synchronize()
    ref_same = R.paged_mqa_logits_reference(q, R.index_k_cache_as_rows(cache), w, seq, pt, max_len)
    ref_exact = R.paged_mqa_logits_reference(q_exact, k_exact, w, seq, pt, max_len)
    written = torch.arange(max_len, device=dev)[None, :] < seq.long().clamp(max=max_len)[:, None]
    fin = torch.isfinite(ref_same) & written
    assert not torch.isnan(out[written]).any(), "every column below a row's length must be written"
    assert torch.isnan(out[~written]).all(), "columns past a row's length must stay untouched (output contract)"
    assert torch.equal(torch.isneginf(out[written]), ~fin[written])
    assert rel_err(out[fin], ref_same[fin]) < 1e-4
    assert rel_err(out[fin], ref_exact[fin]) < 1e-2


@pytest.mark.parametrize("tiling", ["logits", "logits_prefill", "logits_few_rows"])
@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_paged_logits_decode_rows_wide_output(dev, name, tiling):
    """Own pages per row, -1 padding, an output 4x wider than the longest row (SGLang's decode
    graph passes the whole context's width). The few-row tiling (where an arch has one) is run on
    these 33 rows too: any tiling must be right for any rows."""
    cfg = getattr(dispatch.CONFIGS[name], tiling) or dispatch.CONFIGS[name].logits
    lens = [0, 1, 63, 64, 65, 1000, 2047, 2048] + torch.randint(1, 2049, (25,)).tolist()
    check_logits_against_references(dev, cfg, lens, width=128, max_len=128 * 64)


@pytest.mark.parametrize("tiling", ["logits", "logits_prefill", "logits_few_rows"])
@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_paged_logits_prefill_rows_sharing_pages(dev, name, tiling):
    """Causal prefill rows of one request (one page table), one row from another request in
    the middle (its group falls back to one row at a time)."""
    cfg = getattr(dispatch.CONFIGS[name], tiling) or dispatch.CONFIGS[name].logits
    lens = [int(x) for x in torch.linspace(1, 3000, 301)]
    check_logits_against_references(dev, cfg, lens, width=47, max_len=47 * 64, shared=True, differing_row=150)


def test_paged_logits_one_long_row_wide_output(dev):
    """One row of 64K keys under a 262,144-column output: split over many programs
    (device-side key split), still exact."""
    cfg = dispatch.configs_for(dev).logits_for(1)
    check_logits_against_references(dev, cfg, [65536], width=4096, max_len=262144)
