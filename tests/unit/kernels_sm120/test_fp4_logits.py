"""The fp4 paged MQA logits kernel (``kernels_sm120.paged_mqa_logits_fp4``, module ``paged_logits_fp4``) on CPU.

Our Triton kernel runs through Triton's interpreter (tests/support/triton_interpreter.py; nothing of
it stubbed) over SGLang's fp4 index-K pool exactly as stored (uint8 [num_pages, 64, 1, 68]: per
page 64 x 64 payload bytes, then 64 x 4 ue8m0 exponents) with SGLang's fp4 q (packed int8 payload,
int32 of four exponent bytes per head). The keys are quantized by recall's CPU restatement of
SGLang's fp4 quantizer (``recall.formats.fp4_quantize``, checked bit for bit against SGLang's
``quantize_fp4_indexer_ref`` in tests/unit/recall/test_formats.py), and the page layout and values
the reference uses are read back by SGLang's own ``DeepSeekV4IndexerPool.get_index_k_dequant``.
"""

import types

import pytest
import torch

from kernels_sm120 import _triton_helpers, paged_logits_fp4, paged_mqa_logits
from kernels_sm120 import reference as R
from sglang_dsv4_ext.tools.recall import formats
from tests.support.triton_interpreter import interpreted_kernels

HEADS = 16  # any power of two >= 16; DeepSeek-V4 has 64 (the GPU tests use 64)


@pytest.fixture
def interp():
    with interpreted_kernels(_triton_helpers, paged_mqa_logits, paged_logits_fp4):
        yield


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(20261202)


def sglang_dequant(pages):
    """SGLang's ``DeepSeekV4IndexerPool.get_index_k_dequant`` (the installed method, plain torch on
    CPU) over our pages: bf16 [num_pages * 64, 128]. The pool object itself needs a GPU allocator;
    the method reads only the attributes given here."""
    from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4IndexerPool

    flat = pages.reshape(pages.shape[0], -1)
    pool = types.SimpleNamespace(use_fp4_indexer=True, index_k_with_scale_buffer=[flat], start_layer=0, page_size=64)
    return DeepSeekV4IndexerPool.get_index_k_dequant(pool, 0, torch.arange(flat.shape[0] * 64))


def page_table_for(gen, lens, width, spare_pages=3):
    need = [min(-(-n // 64), width) for n in lens]
    pages = sum(need) + spare_pages
    perm = torch.randperm(pages, generator=gen).to(torch.int32)
    pt = torch.zeros((len(lens), width), dtype=torch.int32)
    off = 0
    for r, p in enumerate(need):
        pt[r, :p] = perm[off : off + p]
        off += p
    return pages, pt


def quantized_case(gen, lens, width, heads=HEADS):
    """SGLang's fp4 inputs from random bf16-like rows, quantized with SGLang's rule."""
    pages, pt = page_table_for(gen, lens, width)
    keys = torch.randn(pages * 64, 128, generator=gen) * torch.rand(pages * 64, 1, generator=gen) * 4
    k_codes, k_exps = formats.fp4_quantize(keys)
    queries = torch.randn(len(lens), heads, 128, generator=gen) * 3
    q_codes, q_exps = formats.fp4_quantize(queries)
    w = torch.randn(len(lens), heads, generator=gen)
    return (q_codes, q_exps), (k_codes, k_exps), w, torch.tensor(lens, dtype=torch.int32), pt


def written(seq_lens, max_len):
    n = seq_lens.reshape(-1).long().clamp(min=0, max=max_len)
    return torch.arange(max_len)[None, :] < n[:, None]


def test_fp4_pages_are_sglang_layout():
    """Our packer writes what SGLang's pool reads back: its dequant of our pages equals recall's
    float64 dequant of the same codes (bit for bit: fp4 values are bf16 values)."""
    gen = torch.Generator().manual_seed(7)
    keys = torch.randn(128, 128, generator=gen) * 5
    codes, exps = formats.fp4_quantize(keys)
    pages = R.fp4_index_k_pages(codes, exps)
    assert pages.shape == (2, 64, 1, 68) and pages.dtype == torch.uint8
    assert torch.equal(sglang_dequant(pages).double(), formats.fp4_dequantize(codes, exps))
    assert torch.equal(R.fp4_values(codes, exps), formats.fp4_dequantize(codes, exps))


def test_fp4_kernel_matches_float64(interp, gen):
    lens = [0, 1, 63, 64, 65, 300, 512]
    width, max_len = 9, 520
    (qc, qe), (kc, ke), w, seq_lens, pt = quantized_case(gen, lens, width)
    q_fp4, q_sf = R.fp4_q(qc, qe)
    pages = R.fp4_index_k_pages(kc, ke)
    out = torch.full((len(lens), max_len), float("nan"))
    paged_logits_fp4.paged_mqa_logits_fp4(
        q_fp4, q_sf, pages, w, seq_lens.unsqueeze(-1), pt, max_len, out=out, target_programs=16, max_chunk=128
    )
    ref = R.paged_mqa_logits_reference(formats.fp4_dequantize(qc, qe), sglang_dequant(pages), w, seq_lens, pt, max_len)
    mask = written(seq_lens, max_len)
    assert torch.isnan(out[~mask]).all(), "columns at or past a row's length must not be written"
    err = (out.double()[mask] - ref[mask]).abs().max() / ref[mask].abs().max()
    assert err < 1e-6, err


def test_fp4_kernel_is_exact_where_fp32_sums_are(interp, gen):
    """Bit-level: with exponents in 126..128 and weights +-1, +-2 every partial sum is a multiple of
    2^-4 below 2^20, so fp32 holds each exactly and the kernel must equal float64 bit for bit (a
    wrong nibble order, exponent byte or e2m1 value changes the result)."""
    lens = [5, 64, 130, 200]
    width, max_len = 4, 256
    pages, pt = page_table_for(gen, lens, width)
    kc = torch.randint(0, 16, (pages * 64, 128), generator=gen, dtype=torch.uint8)
    ke = torch.randint(126, 129, (pages * 64, 4), generator=gen, dtype=torch.int32)
    qc = torch.randint(0, 16, (len(lens), HEADS, 128), generator=gen, dtype=torch.uint8)
    qe = torch.randint(126, 129, (len(lens), HEADS, 4), generator=gen, dtype=torch.int32)
    w = torch.tensor([-2.0, -1.0, 1.0, 2.0])[torch.randint(0, 4, (len(lens), HEADS), generator=gen)]
    seq_lens = torch.tensor(lens, dtype=torch.int32)
    q_fp4, q_sf = R.fp4_q(qc, qe)
    k_pages = R.fp4_index_k_pages(kc, ke)
    out = paged_logits_fp4.paged_mqa_logits_fp4(q_fp4, q_sf, k_pages, w, seq_lens, pt, max_len, target_programs=8)
    ref = R.paged_mqa_logits_reference(R.fp4_values(qc, qe), sglang_dequant(k_pages), w, seq_lens, pt, max_len)
    mask = written(seq_lens, max_len)
    assert torch.equal(out.double()[mask], ref[mask])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda a: a.update(kvcache_fp4=a["kvcache_fp4"].view(-1, 64, 1, 68)[:, :, :, :64]), "kvcache_fp4"),
        (lambda a: a.update(q_sf=a["q_sf"].to(torch.int64)), "q_sf"),
        (lambda a: a.update(q_fp4=a["q_fp4"][..., :32]), "q_fp4"),
        (lambda a: a.update(max_seq_len=-1), "max_seq_len"),
    ],
)
def test_fp4_launcher_names_the_bad_argument(gen, change, message):
    (qc, qe), (kc, ke), w, seq_lens, pt = quantized_case(gen, [10, 70], 2)
    q_fp4, q_sf = R.fp4_q(qc, qe)
    args = dict(
        q_fp4=q_fp4,
        q_sf=q_sf,
        kvcache_fp4=R.fp4_index_k_pages(kc, ke),
        weights=w,
        seq_lens=seq_lens,
        page_table=pt,
        max_seq_len=80,
    )
    change(args)
    with pytest.raises((TypeError, ValueError), match=message):
        paged_logits_fp4.paged_mqa_logits_fp4(**args)
