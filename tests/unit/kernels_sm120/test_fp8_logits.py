"""The fp8 paged MQA logits kernel (``kernels_sm120.paged_mqa_logits_fp8``) on CPU.

Our Triton kernel runs through Triton's interpreter (tests/support/triton_interpreter.py; nothing of
it stubbed) over SGLang's fp8 index-K pool exactly as stored (uint8 [num_pages, 64, 1, 132]: per page
64 rows of 128 e4m3 values, then 64 fp32 scales) and is checked against
  * SGLang's own ``fp8_paged_mqa_logits_torch_sm120`` (the installed function, run on CPU tensors: it
    is plain torch) on the same data, and
  * a float64 reference of the same fp8 values (``reference.fp8_paged_mqa_logits_reference``).
"""

import dataclasses
import functools

import pytest
import torch

from kernels_sm120 import _triton_helpers, dispatch, paged_mqa_logits
from kernels_sm120 import reference as R
from tests.support import logits_inputs
from tests.support.triton_interpreter import interpreted_kernels

HEADS = 16  # the kernel takes any power of two >= 16; DeepSeek-V4 has 64 (the GPU tests use 64)
fp8_case = functools.partial(logits_inputs.fp8_case, heads=HEADS)


@pytest.fixture
def interp():
    with interpreted_kernels(_triton_helpers, paged_mqa_logits):
        yield


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(20261201)


@pytest.fixture(scope="module")
def sglang_fp8_torch_sm120():
    from sglang.srt.layers.attention.dsv4.indexer import fp8_paged_mqa_logits_torch_sm120

    return fp8_paged_mqa_logits_torch_sm120


def written(seq_lens, max_len):
    n = seq_lens.reshape(-1).long().clamp(min=0, max=max_len)
    return torch.arange(max_len)[None, :] < n[:, None]


def rel_err(out, ref):
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


def test_fp8_pages_reference_reads_sglang_layout():
    """The reference's page layout is SGLang's: value bytes first, then one fp32 scale per key, and
    the scale is ``max(1e-4, amax) / 448`` (``fp8_quant_dequant_rows``)."""
    rows = torch.randn(128, 128, dtype=torch.float32)
    cache = R.fp8_index_k_pages(rows)
    assert cache.shape == (2, 64, 1, 132) and cache.dtype == torch.uint8
    page = cache.view(2, 64 * 132)
    scales = page[:, 64 * 128 :].contiguous().view(torch.float32).reshape(-1)
    assert torch.allclose(scales, rows.abs().amax(-1) / 448.0)
    assert torch.allclose(R.fp8_index_k_cache_as_rows(cache).float(), R.fp8_quant_dequant_rows(rows))


def test_fp8_kernel_matches_sglang_torch_sm120_and_float64(interp, gen, sglang_fp8_torch_sm120):
    lens = [0, 1, 63, 64, 65, 300, 512]
    q, cache, w, seq, pt = fp8_case(lens, width=8, gen=gen)
    max_len = 512
    out = torch.full((len(lens), max_len), float("nan"))
    got = dispatch.paged_mqa_logits_fp8(q, cache, w, seq, pt, max_len, out=out)
    assert got is out
    ref = R.fp8_paged_mqa_logits_reference(q, cache, w, seq, pt, max_len)
    sglang = sglang_fp8_torch_sm120(q, cache, w, seq, pt, None, max_len, clean_logits=False)
    mask = written(seq, max_len)
    assert torch.isnan(out[~mask]).all(), "columns past each row's length are not written"
    assert torch.isfinite(out[mask]).all()
    assert rel_err(out[mask], ref[mask]) < 1e-6  # fp16 products are exact, fp32 sums
    # SGLang's torch path rounds q and k to bf16 (exact for e4m3) and runs a bf16 bmm: same numbers
    assert rel_err(out[mask], sglang[mask]) < 1e-2
    assert torch.isneginf(sglang[~mask]).all()


def test_fp8_kernel_scale_is_applied_per_key(interp, gen):
    """Doubling one key's scale doubles that key's logit and no other (the scale is read from the
    page's scale region at the key's own row)."""
    q, cache, w, seq, pt = fp8_case([128], width=2, spare_pages=0, gen=gen)
    w = w.abs()  # all-positive logits, so the doubled one is told apart
    base = dispatch.paged_mqa_logits_fp8(q, cache, w, seq, pt, 128)
    page, row = int(pt[0, 1]), 5  # key 64 + 5
    scales = cache.view(-1, 64 * 132)[page, 64 * 128 :].view(torch.float32)
    scales[row] *= 2
    again = dispatch.paged_mqa_logits_fp8(q, cache, w, seq, pt, 128)
    ratio = again[0] / base[0]
    assert torch.allclose(ratio[64 + row], torch.tensor(2.0), rtol=1e-6)
    others = torch.ones(128, dtype=torch.bool)
    others[64 + row] = False
    assert torch.equal(again[0, others], base[0, others])


FP8_TILINGS = [
    dispatch.LogitsConfig(64, 4, 2, programs_per_sm=1),  # page ids loaded one tile ahead
    dispatch.LogitsConfig(32, 4, 2, programs_per_sm=8, busy_per_sm=2, page_block=4),  # gathered page ids
    dispatch.LogitsConfig(128, 4, 2, programs_per_sm=16, page_block=2),  # two pages per tile
    dispatch.LogitsConfig(64, 4, 3, programs_per_sm=2, min_chunk=128, busy_per_sm=1, page_block=4, item_grid=True),
    dispatch.LogitsConfig(64, 4, 2, programs_per_sm=1, rows_per_program=2),  # row pairs, pages not shared
    # the product on fp8 tensor cores (q and keys as stored), both decode grids
    dispatch.LogitsConfig(64, 4, 2, programs_per_sm=2, page_block=4, busy_per_sm=1, fp8_mma=True),
    dispatch.LogitsConfig(64, 4, 3, min_chunk=128, busy_per_sm=1, page_block=4, item_grid=True, fp8_mma=True),
    # interleaved few-row parts: one part per row (4 programs over 6 rows), and 5 parts per row
    dispatch.LogitsConfig(64, 4, 3, programs_per_sm=1, interleaved=True, fp8_mma=True),
    dispatch.LogitsConfig(64, 4, 2, programs_per_sm=8, interleaved=True),
    # key scales one tile ahead: the item grid over 4-page id blocks, the (rows, split) grid over 2-page
    # blocks (a block edge every other tile), 32-key tiles (two tiles per page)
    dispatch.LogitsConfig(
        64, 4, 3, min_chunk=128, busy_per_sm=1, page_block=4, item_grid=True, fp8_mma=True, scales_ahead=True
    ),
    dispatch.LogitsConfig(64, 4, 2, programs_per_sm=2, page_block=2, busy_per_sm=1, scales_ahead=True),
    dispatch.LogitsConfig(32, 4, 3, programs_per_sm=2, page_block=2, fp8_mma=True, scales_ahead=True),
    # one page per tile, its id and scales one tile ahead (page_block 0): the item grid (parts of two pages)
    # and the (rows, split) grid
    dispatch.LogitsConfig(64, 4, 3, min_chunk=128, busy_per_sm=1, item_grid=True, fp8_mma=True, scales_ahead=True),
    dispatch.LogitsConfig(64, 4, 2, programs_per_sm=2, busy_per_sm=1, scales_ahead=True),
]


@pytest.mark.parametrize(
    "cfg",
    FP8_TILINGS,
    ids=lambda c: (
        f"bn{c.block_n}-pb{c.page_block}-r{c.rows_per_program}-mma{int(c.fp8_mma)}-items{int(c.item_grid)}"
        f"-p{c.programs_per_sm}{'-interleaved' if c.interleaved else ''}{'-scales-ahead' if c.scales_ahead else ''}"
    ),
)
def test_fp8_kernel_every_tiling(interp, gen, cfg):
    lens = [500, 257, 0, 64, 1, 130]
    q, cache, w, seq, pt = fp8_case(lens, width=12, gen=gen)
    out = torch.full((6, 768), float("nan"))
    dispatch.paged_mqa_logits_fp8(q, cache, w, seq, pt, 768, out=out, config=cfg)
    ref = R.fp8_paged_mqa_logits_reference(q, cache, w, seq, pt, 768)
    mask = written(seq, 768)
    assert torch.isnan(out[~mask]).all()
    assert rel_err(out[mask], ref[mask]) < 1e-6


def test_fp8_kernel_rows_sharing_pages(interp, gen):
    """Prefill rows of one request (same page table, causal lengths): the shared-tile path."""
    lens = [1, 70, 130, 200]
    q, cache, w, seq, pt = fp8_case([200], width=4, gen=gen)
    q = q.expand(4, 1, HEADS, 128).clone()
    pt = pt.expand(4, 4).contiguous()
    seq = torch.tensor(lens, dtype=torch.int32)
    w = torch.randn(4, HEADS, generator=gen)
    cfg = dispatch.LogitsConfig(64, 4, 2, programs_per_sm=1, rows_per_program=4)
    out = torch.full((4, 256), float("nan"))
    dispatch.paged_mqa_logits_fp8(q, cache, w, seq, pt, 256, out=out, config=cfg)
    ref = R.fp8_paged_mqa_logits_reference(q, cache, w, seq, pt, 256)
    mask = written(seq, 256)
    assert rel_err(out[mask], ref[mask]) < 1e-6


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda a: a.update(q=a["q"].to(torch.bfloat16)), "q must have dtype in \\(float8_e4m3fn\\)"),
        (lambda a: a.update(cache=a["cache"].view(-1, 64, 1, 132)[:, :, :, :128]), "fp8 index-K"),
        (
            lambda a: a.update(cache=a["cache"].view(torch.float8_e4m3fn)),
            "index_k_cache must have dtype in \\(uint8\\)",
        ),
        (lambda a: a.update(cache=torch.zeros(4, 64 * 256, dtype=torch.uint8)), "fp8 index-K"),  # a bf16 page
    ],
    ids=["bf16-q", "no-scales", "fp8-dtype-cache", "bf16-page-rows"],
)
def test_fp8_launcher_validation(gen, change, match):
    q, cache, w, seq, pt = fp8_case([64], width=1, gen=gen)
    args = dict(q=q, cache=cache, w=w, seq=seq, pt=pt)
    change(args)
    with pytest.raises((TypeError, ValueError), match=match):
        dispatch.paged_mqa_logits_fp8(args["q"], args["cache"], args["w"], args["seq"], args["pt"], 64)


def test_fp8_tiling_falls_back_to_bf16_tiling_when_unset():
    cfgs = dispatch.CONFIGS["default"]
    assert cfgs.logits_for(4, key_fp8=True) == cfgs.logits_for(4)
    assert cfgs.logits_for(4096, key_fp8=True) == cfgs.logits_prefill


def test_fp8_few_row_tiling_applies_where_bf16_has_none():
    """SM120 sets an fp8 few-row tiling but no bf16 one: two to eight rows over fp8 keys take the fp8
    few-row tiling (it was chosen for them), more rows the fp8 decode tiling."""
    cfgs = dispatch.CONFIGS["sm120"]
    assert cfgs.logits_few_rows is None and cfgs.logits_fp8_few_rows is not None
    assert cfgs.logits_for(2, key_fp8=True) == cfgs.logits_fp8_few_rows
    assert cfgs.logits_for(cfgs.few_rows_max, key_fp8=True) == cfgs.logits_fp8_few_rows
    assert cfgs.logits_for(cfgs.few_rows_max + 1, key_fp8=True) == cfgs.logits_fp8
    assert cfgs.logits_for(2) == cfgs.logits


@pytest.mark.parametrize("arch", ["sm90", "sm100", "sm120"])
def test_one_row_takes_the_interleaved_tiling_of_its_key_type(arch):
    """A single decode row takes the one-row tiling of its key type (interleaved parts); two to few_rows_max fp8
    rows the fp8 few-row tiling, interleaved too (measured faster on uniform rows and on a long row beside one to
    three short ones, 7% slower beside seven); two to few_rows_max bf16 rows the few-row tiling where the arch has
    one (interleaved on sm90 / sm100: measured faster on uniform rows, at most 10% slower on a long row beside short
    ones), more rows the decode tiling of their key type, which is not interleaved."""
    cfgs = dispatch.CONFIGS[arch]
    assert cfgs.logits_for(1, key_fp8=True) == cfgs.logits_fp8_one_row and cfgs.logits_fp8_one_row.interleaved
    assert cfgs.logits_for(1) == cfgs.logits_one_row and cfgs.logits_one_row.interleaved
    fp8_few = cfgs.logits_fp8_few_rows
    assert cfgs.logits_for(2, key_fp8=True) == fp8_few and fp8_few is not None and fp8_few.interleaved
    assert not cfgs.logits_for(cfgs.few_rows_max + 1, key_fp8=True).interleaved
    few = cfgs.logits_few_rows or cfgs.logits
    assert cfgs.logits_for(2) == few and cfgs.logits_for(cfgs.few_rows_max) == few
    assert cfgs.logits_for(cfgs.few_rows_max + 1) == cfgs.logits
    assert dispatch.CONFIGS["default"].logits_for(1) == dispatch.CONFIGS["default"].logits


@pytest.mark.parametrize(
    ("tiling", "match"),
    [
        (dict(block_n=32), "or 64-key tiles, got .*page_block=0, block_n=32"),
        (dict(interleaved=True), "not interleaved, .*interleaved=True"),
        (dict(rows_per_program=2), "one row per program, .*rows_per_program=2"),
    ],
    ids=["tiles-of-part-of-a-page", "interleaved", "two-rows-per-program"],
)
def test_scales_ahead_without_page_id_blocks_needs_whole_page_tiles(gen, tiling, match):
    """With page_block 0 each tile's page id is one scalar: a tile must be exactly one page."""
    q, cache, w, seq, pt = fp8_case([64], width=1, gen=gen)
    cfg = dataclasses.replace(dispatch.LogitsConfig(64, 4, 2, programs_per_sm=2, scales_ahead=True), **tiling)
    with pytest.raises(ValueError, match=match):
        dispatch.paged_mqa_logits_fp8(q, cache, w, seq, pt, 64, config=cfg)


@pytest.mark.parametrize("ids_ahead", [0, 4])
def test_page_ids_ahead_other_than_one_to_three_tiles_are_refused_by_name(gen, ids_ahead):
    q, cache, w, seq, pt = fp8_case([64], width=1, gen=gen)
    cfg = dataclasses.replace(dispatch.CONFIGS["sm90"].logits_fp8, ids_ahead=ids_ahead)
    with pytest.raises(ValueError, match=f"ids_ahead must be 1 or 2 \\(tiles\\), or 3 with fp8 keys, got {ids_ahead}"):
        dispatch.paged_mqa_logits_fp8(q, cache, w, seq, pt, 64, config=cfg)


def test_scales_two_ahead_are_refused_for_bf16_keys():
    """ids_ahead=3 also carries each tile's fp8 scales two tiles ahead: bf16 keys have none."""
    _k, q_exact, w, seq, pt, cache = logits_inputs.logits_inputs(torch.device("cpu"), [64], 1)
    cfg = dataclasses.replace(dispatch.CONFIGS["sm90"].logits_one_row, ids_ahead=3)
    with pytest.raises(ValueError, match="or 3 with fp8 keys, got 3 \\(key_fp8=False\\)"):
        dispatch.paged_mqa_logits_bf16(q_exact.to(torch.bfloat16).unsqueeze(1), cache, w, seq, pt, 64, config=cfg)


@pytest.mark.parametrize("arch", ["sm90", "sm120"])
def test_fp8_decode_tiling_past_the_tables_reach_and_the_output_width(interp, gen, arch):
    """The architectures' fp8 decode tiling (one page per tile): a row longer than its page table reaches
    gets -inf from the table's end up to the output width, and rows past the width are cut there."""
    lens = [700, 65, 1, 0, 384, 5000]  # 6 pages of table: 384 keys reachable
    q, cache, w, seq, pt = fp8_case(lens, width=6, gen=gen)
    max_len = 450
    out = torch.full((6, max_len), float("nan"))
    cfg = dataclasses.replace(dispatch.CONFIGS[arch].logits_fp8, busy_per_sm=1)  # a few programs on the interpreter
    assert cfg.scales_ahead and cfg.page_block == 0
    dispatch.paged_mqa_logits_fp8(q, cache, w, seq, pt, max_len, out=out, config=cfg)
    ref = R.fp8_paged_mqa_logits_reference(q, cache, w, seq, pt, max_len)
    mask = written(seq, max_len)
    assert torch.isnan(out[~mask]).all()
    for r in (0, 5):
        assert torch.isneginf(out[r, 384:max_len]).all() and torch.isfinite(out[r, :384]).all()
    fin = torch.isfinite(ref) & mask
    assert torch.equal(torch.isneginf(out[mask]), ~fin[mask])
    assert rel_err(out[fin], ref[fin]) < 1e-6


@pytest.mark.parametrize("tiling", ["logits_fp8", "logits_fp8_one_row"], ids=["decode", "interleaved"])
def test_direct_store_tilings_run_on_the_interpreter_with_tl_store(interp, gen, tiling):
    """A tiling with the direct store (inline PTX, CUDA only) still runs on CPU tensors: the launcher stores
    with tl.store there (the interpreter runs no PTX). The direct store itself is compared bit for bit with
    tl.store on the GPU (tests/gpu/test_logits_direct_store_gpu.py)."""
    lens = [700, 65, 1, 0, 384]
    q, cache, w, seq, pt = fp8_case(lens, width=12, gen=gen)
    max_len = 12 * 64
    cfg = dataclasses.replace(getattr(dispatch.CONFIGS["sm120"], tiling), direct_store=True)
    if cfg.busy_per_sm:
        cfg = dataclasses.replace(cfg, busy_per_sm=1)  # a few programs on the interpreter
    out = torch.full((len(lens), max_len), float("nan"))
    dispatch.paged_mqa_logits_fp8(q, cache, w, seq, pt, max_len, out=out, config=cfg)
    ref = R.fp8_paged_mqa_logits_reference(q, cache, w, seq, pt, max_len)
    mask = written(seq, max_len)
    assert torch.isnan(out[~mask]).all()
    assert rel_err(out[mask], ref[mask]) < 1e-6
