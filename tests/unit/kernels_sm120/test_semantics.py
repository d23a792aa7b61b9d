"""Semantics of the bf16 index-K kernels on CPU.

Two layers:
  1. ``kernels_sm120.reference`` (the float64 ground truth the GPU benchmark uses) against
     independent naive loops written here from SGLang's definitions.
  2. The Triton kernels themselves, run through Triton's interpreter on CPU tensors, against
     the reference, plus the launchers' argument validation.

The interpreter is enabled for the kernel modules only, inside this process, without
TRITON_INTERPRET (which Triton reads when a kernel is decorated, so setting it here would
be too late for our modules and would also turn every SGLang kernel imported elsewhere in
the session into an interpreted one). ``interpreted_kernels`` swaps the modules'
``@triton.jit`` functions (and Triton's own ``tl.sum``-style library functions) for
interpreted ones and patches three interpreter gaps, restoring everything afterwards:
  * bf16 ``tl.dot``: the interpreter stores bf16 as uint16 and multiplies the raw bits;
  * fp32 -> bf16 casts: the interpreter truncates, GPUs round to nearest even;
  * nested device-function calls leave triton.language.core patched.
Nothing of our code is stubbed.
"""

import math

import pytest
import torch

from kernels_sm120 import _triton_helpers, dispatch, index_k_store, index_q, paged_mqa_logits
from kernels_sm120 import reference as R
from tests.support.triton_interpreter import interpreted_kernels

# The interpreter harness lives in tests/support/triton_interpreter.py (the indexer hook tests use it too).


@pytest.fixture
def interp():
    with interpreted_kernels(_triton_helpers, index_k_store, index_q, paged_mqa_logits):
        yield


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(20261130)


def rel_err(out, ref):
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm()).item()


def random_freqs(gen, positions=512):
    ang = torch.rand(positions, 32, generator=gen, dtype=torch.float64) * 2 * math.pi
    return torch.polar(torch.ones_like(ang), ang).to(torch.complex64)


# ---------------------------------------------------------------------------
# 1. Reference vs independent naive loops
# ---------------------------------------------------------------------------


def naive_fwht(v):
    """In-place butterflies, lower index keeps the sum (SGLang's JIT kernels), then / sqrt(n)."""
    v = [float(x) for x in v]
    n, h = len(v), 1
    while h < n:
        for i in range(0, n, 2 * h):
            for j in range(i, i + h):
                a, b = v[j], v[j + h]
                v[j], v[j + h] = a + b, a - b
        h *= 2
    return [x / math.sqrt(n) for x in v]


def naive_rope_tail(v, freqs_row):
    """v: list of 128 floats; freqs_row: 32 complex numbers; pairs (64+2k, 65+2k)."""
    v = list(v)
    for k in range(32):
        c, s = freqs_row[k].real, freqs_row[k].imag
        re, im = v[64 + 2 * k], v[65 + 2 * k]
        v[64 + 2 * k], v[65 + 2 * k] = re * c - im * s, re * s + im * c
    return v


def test_hadamard_matrix_is_sylvester_and_orthogonal():
    h = R.hadamard_matrix(128)
    i = torch.arange(128)
    parity = torch.tensor([[bin(a & b).count("1") % 2 for b in range(128)] for a in range(128)])
    assert torch.equal(h, (1 - 2 * parity).double())
    assert torch.allclose(h @ h.T, 128 * torch.eye(128, dtype=torch.float64))
    assert torch.equal(h[i, 0], torch.ones(128, dtype=torch.float64))
    with pytest.raises(ValueError, match="power of two"):
        R.hadamard_matrix(96)


def test_index_k_transform_reference_matches_naive_loop(gen):
    freqs = random_freqs(gen)
    kv = torch.randn(5, 128, generator=gen).to(torch.bfloat16)
    w = torch.rand(128, generator=gen) + 0.5
    pos = torch.tensor([0, 7, 100, 511, 3])
    eps = 1e-6
    ref = R.index_k_transform_reference(kv, w, eps, freqs, pos)
    for r in range(5):
        x = [float(v) for v in kv[r]]
        inv = 1.0 / math.sqrt(sum(v * v for v in x) / 128 + eps)
        x = [v * inv * float(w[d]) for d, v in enumerate(x)]
        x = naive_rope_tail(x, [complex(z) for z in freqs[pos[r]].tolist()])
        want = torch.tensor(naive_fwht(x), dtype=torch.float64)
        assert torch.allclose(ref[r], want, rtol=1e-6, atol=1e-6)


def test_index_q_reference_matches_naive_loop(gen):
    freqs = random_freqs(gen)
    heads = 16
    q = torch.randn(3, heads * 128, generator=gen).to(torch.bfloat16)
    w = torch.randn(3, heads, generator=gen).to(torch.bfloat16)
    pos = torch.tensor([5, 0, 200])
    q_ref, w_ref = R.index_q_reference(q, w, 0.25, freqs, pos, num_heads=heads)
    for t in range(3):
        f = [complex(z) for z in freqs[pos[t]].tolist()]
        for h in range(heads):
            x = [float(v) for v in q[t, h * 128 : (h + 1) * 128]]
            want = torch.tensor(naive_fwht(naive_rope_tail(x, f)), dtype=torch.float64)
            assert torch.allclose(q_ref[t, h], want, rtol=1e-6, atol=1e-6)
            assert w_ref[t, h].item() == pytest.approx(float(w[t, h]) * 0.25)


def test_paged_logits_reference_matches_naive_loop(gen):
    pages, heads, max_len = 6, 4, 200
    k_rows = torch.randn(pages * 64, 128, generator=gen, dtype=torch.float64)
    q = torch.randn(3, heads, 128, generator=gen, dtype=torch.float64)
    w = torch.randn(3, heads, generator=gen, dtype=torch.float64)
    page_table = torch.tensor([[3, 1, 5], [0, 2, -1], [4, -1, -1]], dtype=torch.int32)
    seq = torch.tensor([190, 100, 0], dtype=torch.int32)
    ref = R.paged_mqa_logits_reference(q, k_rows, w, seq, page_table, max_len)
    for r in range(3):
        for t in range(max_len):
            if t >= seq[r]:
                assert ref[r, t] == float("-inf")
                continue
            k = k_rows[int(page_table[r, t // 64]) * 64 + t % 64]
            want = sum(max(0.0, float(q[r, h] @ k)) * float(w[r, h]) for h in range(heads))
            assert ref[r, t].item() == pytest.approx(want, rel=1e-9, abs=1e-9)


def test_paged_logits_reference_clamps_to_table_and_width():
    k_rows = torch.ones(2 * 64, 128, dtype=torch.float64)
    q = torch.ones(1, 16, 128, dtype=torch.float64)
    w = torch.ones(1, 16, dtype=torch.float64)
    # seq_len 500 but only one page in the table and max_len 100: 64 valid columns
    ref = R.paged_mqa_logits_reference(q, k_rows, w, torch.tensor([500]), torch.tensor([[1]]), 100)
    assert torch.isfinite(ref[0, :64]).all() and torch.isneginf(ref[0, 64:]).all()


def test_fp8_quant_dequant_uses_sglang_scale():
    x = torch.tensor([[0.5, -2.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0], [1e-6, 0.0, 0.0, 0.0]])
    y = R.fp8_quant_dequant_rows(x)
    # amax maps to 448 exactly, so the largest value survives the round trip exactly
    assert y[0, 1].item() == pytest.approx(-2.0, rel=1e-6)
    scale = 2.0 / 448
    want = (x[0] / scale).to(torch.float8_e4m3fn).float() * scale
    assert torch.equal(y[0], want)
    assert torch.equal(y[1], torch.zeros(4))
    # tiny rows use the 1e-4 floor: 1e-6 / (1e-4 / 448) = 4.48 -> e4m3 4.5
    assert y[2, 0].item() == pytest.approx(4.5 * 1e-4 / 448, rel=1e-6)


def test_topk_set_recall():
    ref = torch.tensor([[5.0, 4.0, 3.0, 2.0, 1.0, float("-inf")]], dtype=torch.float64)
    assert R.topk_set_recall(ref.clone(), ref, k=2) == 1.0
    other = torch.tensor([[5.0, 0.0, 3.0, 2.0, 9.0, 100.0]], dtype=torch.float64)
    # top-2 of other among valid columns {0..4}: {4, 0}; of ref: {0, 1} -> 1/2 (the -inf column is invalid)
    assert R.topk_set_recall(other, ref, k=2) == 0.5
    # rows with <= k valid columns are skipped (SGLang takes them all)
    assert math.isnan(R.topk_set_recall(other, ref, k=5))
    with pytest.raises(ValueError, match="differ in shape"):
        R.topk_set_recall(other[:, :3], ref, k=2)


def test_torch_baseline_matches_reference(gen):
    pages = 8
    cache = torch.randn(pages, 64, 128, generator=gen).to(torch.bfloat16)
    q = torch.randn(3, 16, 128, generator=gen).to(torch.bfloat16)
    w = torch.randn(3, 16, generator=gen)
    pt = torch.tensor([[1, 2, 3], [4, -1, -1], [0, 5, 6]], dtype=torch.int32)
    seq = torch.tensor([150, 64, 1], dtype=torch.int32)
    ref = R.paged_mqa_logits_reference(q, cache.view(-1, 128), w, seq, pt, 192)
    out = R.paged_mqa_logits_torch(q, cache.view(torch.uint8).view(pages, -1), w, seq, pt, 192)
    fin = torch.isfinite(ref)
    assert torch.equal(torch.isneginf(out), ~fin)
    assert rel_err(out[fin], ref[fin]) < 1e-2  # bf16 bmm output


# ---------------------------------------------------------------------------
# 2. Kernels in Triton's interpreter
# ---------------------------------------------------------------------------


def poisoned_cache(pages, layout="uint8"):
    cache = torch.full((pages, 64 * 256), 0xFF, dtype=torch.uint8)  # every bf16 is NaN
    if layout == "bf16_3d":
        return cache.view(torch.bfloat16).view(pages, 64, 128)
    return cache


@pytest.mark.parametrize("layout,loc_dtype", [("uint8", torch.int64), ("bf16_3d", torch.int32)])
def test_store_kernel_matches_reference(interp, gen, layout, loc_dtype):
    n, pages = 40, 4
    freqs = random_freqs(gen)
    big = torch.randn(n, 256, generator=gen).to(torch.bfloat16) * 3
    kv = big[:, 64:192]  # row stride 256: the kernel must honour it
    w = torch.rand(128, generator=gen) + 0.5
    pos = torch.randint(0, 512, (n,), generator=gen)
    loc = torch.randperm(pages * 64, generator=gen)[:n].to(loc_dtype)
    loc[[0, 9, 17]] = -1
    pos[[0, 9]] = torch.tensor([-3, 10**9])  # skipped rows: their position must not be read
    cache = poisoned_cache(pages, layout)
    dispatch.store_index_k_bf16(kv, w, 1e-6, freqs, pos, loc, cache)
    rows = R.index_k_cache_as_rows(cache)
    keep = loc >= 0
    ref = R.index_k_transform_reference(kv[keep], w, 1e-6, freqs, pos[keep])
    got = rows[loc[keep].long()]
    # one bf16 rounding of an fp32 computation: equal to round-to-nearest(ref) except where
    # ref lies within fp32 error of a rounding boundary (measured: < 0.03% of elements; a
    # bf16-operand Hadamard would miss on ~0.3%)
    assert (got.double() != ref.to(torch.bfloat16).double()).float().mean() < 0.002
    assert rel_err(got, ref) < 3e-3
    written = torch.zeros(pages * 64, dtype=torch.bool)
    written[loc[keep].long()] = True
    assert torch.isnan(rows[~written].float()).all(), "slots not in out_loc must stay untouched"


def test_store_kernel_fp32_norm_weight_vs_bf16(interp, gen):
    """SGLang's JIT store casts norm.weight to the kv dtype; passing the bf16 weight reproduces that."""
    freqs = random_freqs(gen)
    kv = torch.randn(16, 128, generator=gen).to(torch.bfloat16)
    w = torch.rand(128, generator=gen) + 0.5
    pos = torch.arange(16) * 4
    loc = torch.arange(16)
    a, b = poisoned_cache(1), poisoned_cache(1)
    dispatch.store_index_k_bf16(kv, w, 1e-6, freqs, pos, loc, a)
    dispatch.store_index_k_bf16(kv, w.to(torch.bfloat16), 1e-6, freqs, pos, loc, b)
    ref_b = R.index_k_transform_reference(kv, w.to(torch.bfloat16), 1e-6, freqs, pos)
    assert rel_err(R.index_k_cache_as_rows(b)[:16], ref_b) < 3e-3
    assert not torch.equal(a, b)  # the weight rounding is visible: the caller chooses


def test_store_and_q_tilings_agree(interp, gen):
    """Persistent grids with and without the next-tile prefetch, one or several tiles per
    program, q tiles with one RoPE row per tile or one per row, q with streaming cache hints,
    give the same bytes (the math is identical; only the schedule and the loads change)."""
    freqs = random_freqs(gen)
    kv = torch.randn(70, 128, generator=gen).to(torch.bfloat16)
    w = torch.rand(128, generator=gen) + 0.5
    pos = torch.randint(0, 512, (70,), generator=gen)
    loc = torch.randperm(256, generator=gen)[:70]
    q = torch.randn(5, 64 * 128, generator=gen).to(torch.bfloat16)
    hw = torch.randn(5, 64, generator=gen).to(torch.bfloat16)
    caches, qs = [], []
    for prefetch, per_sm, one_token, stream in (
        (True, 1, True, False),
        (False, 1, True, False),
        (True, 64, True, False),
        (True, 1, False, False),
        (False, 3, False, False),
        (True, 2, True, True),
    ):
        cache = poisoned_cache(4)
        dispatch.store_index_k_bf16(
            kv,
            w,
            1e-6,
            freqs,
            pos,
            loc,
            cache,
            config=dispatch.StoreConfig(16, 4, programs_per_sm=per_sm, prefetch=prefetch),
        )
        caches.append(cache)
        qs.append(
            dispatch.index_q_bf16(
                q,
                hw,
                0.5,
                freqs,
                pos[:5],
                config=dispatch.QConfig(
                    16, 4, programs_per_sm=per_sm, prefetch=prefetch, one_token_tiles=one_token, streaming=stream
                ),
            )
        )
    for cache in caches[1:]:
        assert torch.equal(cache, caches[0])
    for q_out, w_out in qs[1:]:
        assert torch.equal(q_out, qs[0][0]) and torch.equal(w_out, qs[0][1])


def test_scatter_kernel_writes_rows_bitwise(interp, gen):
    rows = torch.randn(20, 128, generator=gen).to(torch.bfloat16)
    loc = torch.randperm(128, generator=gen)[:20]
    loc[5] = -3
    cache = poisoned_cache(2)
    dispatch.scatter_index_k_bf16(rows, loc, cache)
    flat = R.index_k_cache_as_rows(cache)
    keep = loc >= 0
    assert torch.equal(flat[loc[keep]], rows[keep])
    expect = poisoned_cache(2)
    R.scatter_reference(expect, rows, loc)
    assert torch.equal(cache, expect)


@pytest.mark.parametrize("q_shape", ["flat", "3d"])
def test_index_q_kernel_matches_reference(interp, gen, q_shape):
    tokens, heads = 3, 64
    freqs = random_freqs(gen)
    q = torch.randn(tokens, heads * 128, generator=gen).to(torch.bfloat16)
    w = torch.randn(tokens, heads, 1, generator=gen).to(torch.bfloat16)
    pos = torch.tensor([0, 300, 17], dtype=torch.int32)
    q_in = q if q_shape == "flat" else q.view(tokens, heads, 128)
    q_out, w_out = dispatch.index_q_bf16(q_in, w, 0.0078125, freqs, pos)
    q_ref, w_ref = R.index_q_reference(q, w, 0.0078125, freqs, pos)
    assert q_out.shape == (tokens, heads, 128) and q_out.dtype == torch.bfloat16
    assert w_out.shape == (tokens, heads) and w_out.dtype == torch.float32
    assert (q_out.double() != q_ref.to(torch.bfloat16).double()).float().mean() < 0.002  # one rounding
    assert rel_err(q_out, q_ref) < 3e-3
    assert torch.allclose(w_out.double(), w_ref, rtol=1e-6)


def test_index_q_kernel_fills_given_outputs(interp, gen):
    freqs = random_freqs(gen)
    q = torch.randn(2, 64 * 128, generator=gen).to(torch.bfloat16)
    w = torch.randn(2, 64, generator=gen, dtype=torch.float32)
    q_out = torch.full((2, 64, 128), float("nan"), dtype=torch.bfloat16)
    w_out = torch.full((2, 64), float("nan"))
    got = dispatch.index_q_bf16(q, w, 1.0, freqs, torch.tensor([1, 2]), q_out=q_out, weights_out=w_out)
    assert got[0] is q_out and got[1] is w_out
    assert torch.isfinite(q_out.float()).all() and torch.equal(w_out, w)


def logits_case(gen, rows, lens, width, heads=64, pages=None):
    need = sum(-(-n // 64) for n in lens)
    pages = pages or need + 2
    perm = torch.randperm(pages, generator=gen).to(torch.int32)
    pt = torch.full((rows, width), -1, dtype=torch.int32)  # padding past each row's pages
    off = 0
    for r, n in enumerate(lens):
        p = min(-(-n // 64), width)
        pt[r, :p] = perm[off : off + p]
        off += p
    cache = torch.randn(pages, 64, 128, generator=gen).to(torch.bfloat16)
    q = torch.randn(rows, heads, 128, generator=gen).to(torch.bfloat16)
    w = torch.randn(rows, heads, generator=gen)
    return cache, q, w, torch.tensor(lens, dtype=torch.int32), pt


def written_columns(seq_lens, max_len):
    """The columns the logits kernel writes: t < min(seq_lens[r], max_len)."""
    n = seq_lens.reshape(-1).long().clamp(min=0, max=max_len)
    return torch.arange(max_len)[None, :] < n[:, None]


def check_logits_contract(out, ref, seq_lens, max_len, poison_is_nan=True):
    """Written columns match the float64 reference (-inf only past the page table's reach),
    columns past each row's length keep the poison."""
    written = written_columns(seq_lens, max_len)
    assert not torch.isnan(out[written]).any(), "every column below the row's length must be written"
    if poison_is_nan:
        assert torch.isnan(out[~written]).all(), "columns past the row's length must not be written"
    fin = torch.isfinite(ref) & written
    assert torch.equal(torch.isneginf(out[written]), ~fin[written])
    assert rel_err(out[fin], ref[fin]) < 1e-5


@pytest.mark.parametrize(
    "cfg",
    [None, dispatch.LogitsConfig(64, 4, 3, programs_per_sm=2, interleaved=True)],
    ids=["default-tiling", "interleaved"],
)
def test_logits_kernel_matches_reference_and_masks(interp, gen, cfg):
    lens = [0, 1, 64, 65, 300, 700]  # 700 > 6 pages * 64: -inf past the table's reach
    cache, q, w, seq, pt = logits_case(gen, 6, lens, width=6)
    max_len = 450  # also shorter than some rows
    out = torch.full((6, max_len), float("nan"))
    got = dispatch.paged_mqa_logits_bf16(q, cache, w, seq, pt, max_len, out=out, config=cfg)
    ref = R.paged_mqa_logits_reference(q, cache.view(-1, 128), w, seq, pt, max_len)
    assert got is out and out.shape == (6, max_len) and out.dtype == torch.float32
    check_logits_contract(out, ref, seq, max_len)
    assert torch.isneginf(out[5, 384:450]).all()  # seq 700 > 6 pages: written as -inf up to max_len


def test_logits_kernel_sglang_call_shapes(interp, gen):
    """SGLang passes q [R,1,H,D], the uint8 page rows, weights [R,H] fp32, seq_lens [R] or
    [R,1], an int32 page table; ``out`` is filled in place."""
    cache, q, w, seq, pt = logits_case(gen, 3, [130, 5, 256], width=5)
    cache_u8 = cache.view(torch.uint8).view(cache.shape[0], 64 * 256)
    out = torch.full((3, 320), float("nan"))
    got = dispatch.paged_mqa_logits_bf16(
        q.unsqueeze(1), cache_u8, w.unsqueeze(-1), seq.unsqueeze(-1), pt.to(torch.int64), 320, out=out
    )
    assert got is out
    ref = R.paged_mqa_logits_reference(q, cache.view(-1, 128), w, seq, pt, 320)
    check_logits_contract(out, ref, seq, 320)


LOGITS_TILINGS = [
    dispatch.LogitsConfig(64, 4, 2, programs_per_sm=1),  # few parts: long walks
    dispatch.LogitsConfig(32, 4, 1, programs_per_sm=64),  # many parts: one tile each, most programs idle
    dispatch.LogitsConfig(16, 4, 3, programs_per_sm=2, max_chunk=64),  # parts bounded by max_chunk
    dispatch.LogitsConfig(64, 4, 2, page_block=4),  # page ids 4 at a time, gathered per tile
    dispatch.LogitsConfig(32, 4, 3, programs_per_sm=8, min_chunk=96, page_block=2),  # half-page tiles, min chunk
    dispatch.LogitsConfig(128, 4, 2, programs_per_sm=16, page_block=2),  # two pages per tile
    dispatch.LogitsConfig(32, 4, 2, programs_per_sm=8, busy_per_sm=2, page_block=4),  # one chunk from the batch total
    dispatch.LogitsConfig(64, 4, 2, rows_per_program=2),  # row pairs (rows here do not share pages)
    dispatch.LogitsConfig(32, 4, 2, programs_per_sm=3, rows_per_program=4),
    # one program per part of one batch-wide chunk size (the item grid)
    dispatch.LogitsConfig(32, 4, 2, programs_per_sm=1, busy_per_sm=2, page_block=4, item_grid=True),
    dispatch.LogitsConfig(64, 4, 3, programs_per_sm=2, min_chunk=128, busy_per_sm=1, item_grid=True),
    # few rows, interleaved parts (part j takes pages j, j + split, ...): 1 and 5 parts per row
    dispatch.LogitsConfig(64, 4, 3, programs_per_sm=1, interleaved=True),
    dispatch.LogitsConfig(64, 4, 2, programs_per_sm=8, interleaved=True),
]


@pytest.mark.parametrize(
    "cfg",
    LOGITS_TILINGS,
    ids=lambda c: (
        f"bn{c.block_n}-p{c.programs_per_sm}-r{c.rows_per_program}-pb{c.page_block}{'-items' if c.item_grid else ''}"
        f"{'-interleaved' if c.interleaved else ''}"
    ),
)
def test_logits_kernel_tilings_and_splits(interp, gen, cfg):
    """Any split of the rows' keys over programs, any rows per program: same logits, same
    written columns (a wide output, as under SGLang's decode CUDA graph)."""
    lens = [500, 257, 0, 64, 1, 130]
    cache, q, w, seq, pt = logits_case(gen, 6, lens, width=12, heads=16)
    out = torch.full((6, 768), float("nan"))
    dispatch.paged_mqa_logits_bf16(q, cache, w, seq, pt, 768, out=out, config=cfg)
    ref = R.paged_mqa_logits_reference(q, cache.view(-1, 128), w, seq, pt, 768)
    check_logits_contract(out, ref, seq, 768)


@pytest.mark.slow  # many rows through Triton's interpreter: tens of seconds each
@pytest.mark.parametrize("item_grid", [False, True], ids=["rows-x-split", "item-grid"])
def test_logits_batch_balanced_chunks_over_many_rows(interp, gen, item_grid):
    """busy_per_sm: every program sums all rows' lengths (here 530 rows, three 256-row
    blocks) to size its part; short and long rows, a wide output. Item grid: the parts of
    rows in every 256-row block are found, rows of no parts skipped."""
    rows = 530
    lens = [int(x) for x in torch.randint(0, 40, (rows,), generator=gen)]
    lens[7], lens[150], lens[299], lens[260], lens[529] = 700, 0, 513, 0, 300
    cache, q, w, seq, pt = logits_case(gen, rows, lens, width=12, heads=16)
    out = torch.full((rows, 768), float("nan"))
    cfg = dispatch.LogitsConfig(
        64, 4, 2, programs_per_sm=1, max_chunk=256, busy_per_sm=1, page_block=8, item_grid=item_grid
    )
    dispatch.paged_mqa_logits_bf16(q, cache, w, seq, pt, 768, out=out, config=cfg)
    ref = R.paged_mqa_logits_reference(q, cache.view(-1, 128), w, seq, pt, 768)
    check_logits_contract(out, ref, seq, 768)


def shared_pages_case(gen, lens, width, heads=16, differing_row=None):
    """Prefill-like rows: one request's page table repeated on every row (causal lengths)."""
    rows = len(lens)
    pages = width + 4
    cache = torch.randn(pages, 64, 128, generator=gen).to(torch.bfloat16)
    q = torch.randn(rows, heads, 128, generator=gen).to(torch.bfloat16)
    w = torch.randn(rows, heads, generator=gen)
    table = torch.randperm(pages, generator=gen)[:width].to(torch.int32)
    pt = table[None, :].expand(rows, width).contiguous()
    if differing_row is not None:  # another request's row: its first page differs
        pt[differing_row, 0] = int(torch.tensor([p for p in range(pages) if p not in table.tolist()][0]))
    return cache, q, w, torch.tensor(lens, dtype=torch.int32), pt


@pytest.mark.parametrize("rows_per_program", [2, 4])
def test_logits_rows_sharing_pages_load_each_key_tile_once(interp, gen, monkeypatch, rows_per_program):
    """Rows whose page tables agree over a program's part take the shared path (one key
    tile for all of them): here the one-row path must not run at all."""
    lens = [1, 70, 130, 200, 0, 250, 256, 129]
    cache, q, w, seq, pt = shared_pages_case(gen, lens, width=4)

    def one_row_must_not_run(*args, **kwargs):
        raise AssertionError("rows sharing their pages fell back to the one-row path")

    monkeypatch.setattr(paged_mqa_logits, "_one_row", one_row_must_not_run)
    cfg = dispatch.LogitsConfig(32, 4, 2, programs_per_sm=2, rows_per_program=rows_per_program)
    out = torch.full((8, 256), float("nan"))
    dispatch.paged_mqa_logits_bf16(q, cache, w, seq, pt, 256, out=out, config=cfg)
    ref = R.paged_mqa_logits_reference(q, cache.view(-1, 128), w, seq, pt, 256)
    check_logits_contract(out, ref, seq, 256)


def test_logits_rows_with_different_pages_fall_back_per_row(interp, gen):
    """A row group that straddles two requests (row 5's table differs) is done row by row
    and gives the same logits; the other groups still share."""
    lens = [40, 80, 120, 160, 200, 240, 250, 7]
    cache, q, w, seq, pt = shared_pages_case(gen, lens, width=4, differing_row=5)
    out = torch.full((8, 256), float("nan"))
    cfg = dispatch.LogitsConfig(32, 4, 2, programs_per_sm=1, rows_per_program=4)
    dispatch.paged_mqa_logits_bf16(q, cache, w, seq, pt, 256, out=out, config=cfg)
    ref = R.paged_mqa_logits_reference(q, cache.view(-1, 128), w, seq, pt, 256)
    check_logits_contract(out, ref, seq, 256)


def test_pick_split_fills_the_chip_without_growing_with_the_output_width():
    split = paged_mqa_logits.pick_split
    # decode under a CUDA graph: 262,144 columns; the grid stays ~ programs_per_sm * SMs
    assert split(1, 262144, 128, 264, 16384) == 264
    assert split(8, 262144, 128, 264, 16384) == 33
    assert split(64, 262144, 128, 264, 16384) == 16  # at least max_seq_len / max_chunk parts per row
    assert split(128, 262144, 128, 264, 1 << 30) == 2
    # never more parts than the output has tiles, never fewer than one
    assert split(1, 100, 64, 376, 16384) == 2
    assert split(4096, 8192, 128, 132, 16384) == 1


# ---------------------------------------------------------------------------
# The output contract against SGLang's own top-k transform
# ---------------------------------------------------------------------------

TOPK = 512  # DeepSeek-V4's index_topk: SGLang's c4_sparse_page_indices are [rows, 512]


@pytest.fixture(scope="module")
def sglang_topk_transform():
    from sglang.srt.layers.attention.dsv4.indexer import topk_transform_pytorch_vectorized

    return topk_transform_pytorch_vectorized


POISONS = {
    "-inf (fully written, SGLang's SM120 torch fallback)": float("-inf"),
    "NaN": float("nan"),
    "+inf": float("inf"),
    "huge": 3.0e38,
    "0.0 (SGLang's non-SM120 torch fallback)": 0.0,
}


@pytest.mark.slow  # Triton's interpreter over every row length: about ten seconds
def test_topk_is_the_same_whatever_lies_past_each_row(interp, gen, sglang_topk_transform):
    """The contract: the kernel writes columns t < seq_len only, and SGLang's real top-k
    transform (``topk_transform_pytorch_vectorized``, the one that runs on CPU; the CUDA
    ones read ``scores[b, :seq_len]`` too, see the kernel's docstring) selects the same
    pool slots and raw indices whatever the columns past each row hold. Rows shorter than
    the top-k (sequential path) and longer ones (torch.topk path); width = 64 x page-table
    width, as SGLang passes it."""
    lens = [0, 1, 300, 512, 513, 700, 1500, 2048]
    width = 32
    max_len = 64 * width
    cache, q, w, seq, pt = logits_case(gen, len(lens), lens, width=width, pages=sum(-(-n // 64) for n in lens) + 3)
    # SGLang's page tables hold valid page ids everywhere (padding 0); the transform gathers
    # page_table[:, raw // 64] for every selected raw index, so no -1 padding here
    pt = pt.clamp(min=0)
    results = {}
    for name, poison in POISONS.items():
        out = torch.full((len(lens), max_len), poison)
        dispatch.paged_mqa_logits_bf16(q, cache, w, seq, pt, max_len, out=out)
        past = ~written_columns(seq, max_len)
        untouched = torch.isnan(out[past]).all() if poison != poison else (out[past] == poison).all()
        assert untouched, f"{name}: the kernel wrote past a row's length"
        page_indices = torch.full((len(lens), TOPK), -7, dtype=torch.int32)
        raw_indices = torch.full((len(lens), TOPK), -7, dtype=torch.int32)
        sglang_topk_transform(out, seq, pt, page_indices, 64, raw_indices)
        results[name] = (page_indices.sort(dim=1).values, raw_indices.sort(dim=1).values, out)
    base_pages, base_raw, base_out = results[next(iter(POISONS))]
    written = written_columns(seq, max_len)
    for name, (pages, raw, out) in results.items():
        assert torch.equal(out[written], base_out[written])
        assert torch.equal(pages, base_pages), f"top-k pool slots differ with {name} past each row"
        assert torch.equal(raw, base_raw), f"top-k raw indices differ with {name} past each row"
    # the selection is a real one: rows longer than k pick k in-range columns, shorter rows all of theirs
    for r, n in enumerate(lens):
        valid = base_raw[r][base_raw[r] >= 0]
        assert valid.numel() == min(n, TOPK) and (valid < n).all()
    # ... and the top-k of the float64 reference (ties aside) is what was picked for long rows
    ref = R.paged_mqa_logits_reference(q, cache.view(-1, 128), w, seq, pt, max_len)
    for r, n in enumerate(lens):
        if n > TOPK:
            want = ref[r, :n].topk(TOPK).indices.sort().values.to(torch.int32)
            assert (base_raw[r] == want).float().mean() > 0.98


def test_topk_contract_check_can_fail(interp, gen, sglang_topk_transform):
    """The comparison above is sensitive: a stray large value written INSIDE a row's length
    changes SGLang's selection."""
    lens = [700]
    cache, q, w, seq, pt = logits_case(gen, 1, lens, width=16, pages=16)
    out = dispatch.paged_mqa_logits_bf16(q, cache, w, seq, pt.clamp(min=0), 1024)
    a = torch.empty(1, TOPK, dtype=torch.int32)
    sglang_topk_transform(out, seq, pt.clamp(min=0), a, 64)
    smallest = out[0, :700].argmin()
    out[0, smallest] = 3.0e38
    b = torch.empty(1, TOPK, dtype=torch.int32)
    sglang_topk_transform(out, seq, pt.clamp(min=0), b, 64)
    assert not torch.equal(a.sort().values, b.sort().values)


# ---------------------------------------------------------------------------
# Dispatch and validation (no kernel launch)
# ---------------------------------------------------------------------------


def test_arch_key_and_cpu_default():
    assert dispatch.arch_key((9, 0)) == "sm90"
    assert dispatch.arch_key((10, 0)) == "sm100"
    assert dispatch.arch_key((10, 3)) == "sm100"
    assert dispatch.arch_key((12, 0)) == "sm120"
    assert dispatch.arch_key((12, 1)) == "sm120"
    assert dispatch.arch_key((8, 9)) == "default"
    assert dispatch.arch_key(None) == "default"
    assert dispatch.configs_for(torch.device("cpu")) is dispatch.CONFIGS["default"]
    assert set(dispatch.CONFIGS) == {"sm90", "sm100", "sm120", "default"}


def test_import_touches_no_gpu(monkeypatch):
    """Configs are picked per call: a fresh import must not query the device."""
    import importlib
    import sys

    def no_gpu(*_a, **_k):
        raise AssertionError("kernels_sm120 queried the GPU at import time")

    for name in ("get_device_capability", "get_device_properties", "current_device", "init"):
        monkeypatch.setattr(torch.cuda, name, no_gpu)
    saved = {k: v for k, v in sys.modules.items() if k == "kernels_sm120" or k.startswith("kernels_sm120.")}
    try:
        for k in saved:
            del sys.modules[k]
        fresh = importlib.import_module("kernels_sm120")
        importlib.import_module("kernels_sm120.aot")
        assert fresh.dispatch.configs_for(torch.device("cpu")).name == "default"
    finally:
        for k in [k for k in sys.modules if k == "kernels_sm120" or k.startswith("kernels_sm120.")]:
            del sys.modules[k]
        sys.modules.update(saved)


def _store_args():
    freqs = torch.polar(torch.ones(8, 32), torch.zeros(8, 32))
    return dict(
        kv=torch.zeros(4, 128, dtype=torch.bfloat16),
        norm_weight=torch.ones(128),
        norm_eps=1e-6,
        freqs_cis=freqs,
        positions=torch.zeros(4, dtype=torch.int64),
        out_loc=torch.arange(4),
        index_k_cache=torch.zeros(2, 64 * 256, dtype=torch.uint8),
    )


@pytest.mark.parametrize(
    "change,match",
    [
        (dict(kv=torch.zeros(4, 64, dtype=torch.bfloat16)), r"kv must be \[N, 128\]"),
        (dict(kv=torch.zeros(4, 128, dtype=torch.int32)), r"kv must have dtype"),
        (dict(norm_weight=torch.ones(64)), r"norm_weight must be \[128\]"),
        (dict(norm_eps=0.0), r"norm_eps must be a positive float"),
        (dict(freqs_cis=torch.zeros(8, 32)), r"freqs_cis as fp32 must be \[max_pos, 64\]"),
        (dict(freqs_cis=torch.zeros(8, 32, dtype=torch.float16)), r"freqs_cis must be complex64"),
        (dict(positions=torch.zeros(3, dtype=torch.int64)), r"positions must have 4 rows"),
        (dict(positions=torch.zeros(4)), r"positions must have dtype"),
        (dict(out_loc=torch.zeros(4, 2, dtype=torch.int64)), r"out_loc must be \[rows\] or \[rows, 1\]"),
        (dict(index_k_cache=torch.zeros(2, 64 * 132, dtype=torch.uint8)), r"an fp8 page row is 8448 bytes"),
        (dict(index_k_cache=torch.zeros(2, 64, 64, dtype=torch.bfloat16)), r"bf16 index_k_cache must be"),
        (dict(index_k_cache=torch.zeros(2, 64 * 256, dtype=torch.uint8)[:, ::2]), r"index_k_cache must be contiguous"),
    ],
)
def test_store_validation(change, match):
    args = {**_store_args(), **change}
    with pytest.raises((TypeError, ValueError), match=match):
        dispatch.store_index_k_bf16(**args)


def test_cache_view_never_copies():
    # A bf16 [P, 64, 128] whose rows are 256 apart cannot be viewed as pages: a reshape would copy and
    # the store would write into a temporary.
    bad = torch.zeros(2, 64, 256, dtype=torch.bfloat16)[:, :, :128]
    args = {**_store_args(), "index_k_cache": bad}
    with pytest.raises(ValueError, match="each page of index_k_cache must be contiguous"):
        dispatch.store_index_k_bf16(**args)


def test_q_validation():
    freqs = torch.polar(torch.ones(8, 32), torch.zeros(8, 32))
    q = torch.zeros(2, 64 * 128, dtype=torch.bfloat16)
    w = torch.zeros(2, 64)
    pos = torch.zeros(2, dtype=torch.int64)
    with pytest.raises(ValueError, match=r"q must be \[N, 8192\]"):
        dispatch.index_q_bf16(q[:, :4096], w, 1.0, freqs, pos)
    with pytest.raises(TypeError, match=r"q must have dtype in \(bfloat16\)"):
        dispatch.index_q_bf16(q.float(), w, 1.0, freqs, pos)
    with pytest.raises(ValueError, match=r"weight must be \[2, 64\]"):
        dispatch.index_q_bf16(q, w[:, :32], 1.0, freqs, pos)
    with pytest.raises(ValueError, match="weight must have unit head stride"):
        dispatch.index_q_bf16(q, torch.zeros(64, 2).T, 1.0, freqs, pos)
    with pytest.raises(ValueError, match=r"q_out must be contiguous \[2, 64, 128\]"):
        dispatch.index_q_bf16(q, w, 1.0, freqs, pos, q_out=torch.zeros(2, 64, 64, dtype=torch.bfloat16))


def test_logits_validation():
    q = torch.zeros(2, 64, 128, dtype=torch.bfloat16)
    cache = torch.zeros(3, 64 * 256, dtype=torch.uint8)
    w = torch.zeros(2, 64)
    seq = torch.zeros(2, dtype=torch.int32)
    pt = torch.zeros(2, 3, dtype=torch.int32)
    call = dispatch.paged_mqa_logits_bf16
    with pytest.raises(ValueError, match=r"q must be \[R, H, 128\] or \[R, 1, H, 128\]"):
        call(q.view(2, 2, 32, 128), cache, w, seq, pt, 10)
    with pytest.raises(ValueError, match="power of two >= 16"):
        call(torch.zeros(2, 8, 128, dtype=torch.bfloat16), cache, w[:, :8], seq, pt, 10)
    with pytest.raises(TypeError, match=r"weights must have dtype in \(float32\)"):
        call(q, cache, w.to(torch.bfloat16), seq, pt, 10)
    with pytest.raises(ValueError, match=r"weights must be \[2, 64\] fp32"):
        call(q, cache, w[:1], seq, pt, 10)
    with pytest.raises(ValueError, match="seq_lens must have 2 rows"):
        call(q, cache, w, seq[:1], pt, 10)
    with pytest.raises(ValueError, match="page_table must have 2 rows"):
        call(q, cache, w, seq, pt[:1], 10)
    with pytest.raises(ValueError, match="page_table must be contiguous in its last dim"):
        call(q, cache, w, seq, torch.zeros(3, 2, dtype=torch.int32).T, 10)
    with pytest.raises(ValueError, match="max_seq_len must be a non-negative python int"):
        call(q, cache, w, seq, pt, torch.tensor(10))
    with pytest.raises(ValueError, match=r"out must be \[2, 10\] fp32"):
        call(q, cache, w, seq, pt, 10, out=torch.zeros(2, 11))
    with pytest.raises(ValueError, match="an fp8 page row is 8448 bytes"):
        call(q, torch.zeros(3, 64 * 132, dtype=torch.uint8), w, seq, pt, 10)
