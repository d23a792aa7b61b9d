"""The benchmark's read-only gather (benchmarks/page_gather.py) reads exactly the key rows a
paged logits call must read: every row below each row's length, through its page table,
nothing else. Run through Triton's interpreter on CPU, every tiling the benchmark sweeps."""

import dataclasses

import pytest
import torch

from benchmarks import page_gather
from kernels_sm120 import paged_mqa_logits
from tests.support.fresh_interpreter import run_python_ok
from tests.support.triton_interpreter import interpreted_kernels


@pytest.fixture
def interp():
    with interpreted_kernels(paged_mqa_logits, page_gather):
        yield


def gathered_sum_reference(cache, seq_lens, page_table, max_len):
    total = 0.0
    rows = cache.view(-1, 64, 128).double()
    for r, n in enumerate(seq_lens.tolist()):
        n = max(0, min(n, max_len))
        t = torch.arange(n)
        total += rows[page_table[r, t // 64].long(), t % 64].sum().item()
    return total


def small_tiling(cfg):
    """The benchmark's tiling at interpreter scale (few programs, so each walks several items)."""
    return dataclasses.replace(cfg, programs_per_sm=1 if cfg.kind == "reg" else 0, busy_per_sm=2, min_chunk=64)


@pytest.mark.parametrize("cfg", page_gather.GATHER_TILINGS, ids=lambda c: c.label.replace(" ", "-"))
def test_gather_reads_exactly_the_rows_below_each_length(interp, cfg):
    gen = torch.Generator().manual_seed(7)
    lens = [0, 1, 64, 65, 300, 129, 1000]
    width = 16
    pages = 40
    # rows past each length hold huge values: reading one of them would show in the sum
    cache = torch.full((pages, 64 * 128), 1e30).to(torch.bfloat16)
    perm = torch.randperm(pages, generator=gen).to(torch.int32)
    page_table = torch.zeros((len(lens), width), dtype=torch.int32)
    used = 0
    for r, n in enumerate(lens):
        p = -(-min(n, 900) // 64)
        page_table[r, :p] = perm[used : used + p]
        rows = cache.view(pages, 64, 128)
        for i, t0 in enumerate(range(0, min(n, 900), 64)):
            k = min(64, min(n, 900) - t0)
            rows[perm[used + i], :k] = torch.randn(k, 128, generator=gen).to(torch.bfloat16)
        used += p
    seq = torch.tensor(lens, dtype=torch.int32)
    max_len = 900  # the last row is clamped to the output width
    out = torch.full((64,), float("nan"))
    tiling = small_tiling(cfg)
    page_gather.page_gather_sum(cache, seq, page_table, max_len, out, tiling, num_sms=4)
    programs = page_gather.gather_programs(tiling, len(lens), max_len, 4)
    got = out[:programs].double().sum().item()
    assert torch.isnan(out[programs:]).all()
    want = gathered_sum_reference(cache, seq, page_table, max_len)
    assert abs(got - want) < 1e-3 * max(1.0, abs(want)), (got, want)


CHILD = """
import torch
from benchmarks import page_gather
from kernels_sm120 import paged_mqa_logits
from tests.support.triton_interpreter import interpreted_kernels
cache = torch.randn(8, 64 * 128, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
table = torch.tensor([[5, 0], [2, 7]], dtype=torch.int32)
seq = torch.tensor([0, 65], dtype=torch.int32)
cfg = page_gather.GatherConfig("dot", 64, 4, 4, num_stages=2, min_chunk=64)
out = torch.zeros(64)
with interpreted_kernels(paged_mqa_logits, page_gather):
    page_gather.page_gather_sum(cache, seq, table, 128, out, cfg, num_sms=4)
print(repr(out[:page_gather.gather_programs(cfg, 2, 128, 4)].double().sum().item()))
"""


@pytest.mark.slow  # a fresh interpreter
def test_programs_past_the_last_item_read_nothing():
    """Most programs of the item grid have no part (here 18 programs, 2 parts): they must read
    no key row at all. Run in a child process: the interpreter dereferences what a program
    asks for, so a stray read crashes the child instead of failing quietly."""
    proc = run_python_ok("-c", CHILD, timeout=300)
    rows = torch.randn(8, 64 * 128, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16).view(8, 64, 128)
    want = rows[2].double().sum().item() + rows[7, :1].double().sum().item()
    assert abs(float(proc.stdout.strip().splitlines()[-1]) - want) < 1e-3 * max(1.0, abs(want))


def fp8_pages(gen, pages, lens, width, cap):
    """SGLang's fp8 pages viewed as bf16 [pages, 4224] (64 rows of 64 bf16, then 64 fp32 scales),
    with a page table; rows and scales past each length hold 1e30, so reading one shows in the sum."""
    cache = torch.full((pages, 4224), 1e30).to(torch.bfloat16)
    scales = cache[:, 4096:].view(torch.float32)
    scales.fill_(1e30)
    perm = torch.randperm(pages, generator=gen).to(torch.int32)
    page_table = torch.zeros((len(lens), width), dtype=torch.int32)
    used = 0
    for r, n in enumerate(lens):
        n = min(n, cap)
        p = -(-n // 64)
        page_table[r, :p] = perm[used : used + p]
        for i, t0 in enumerate(range(0, n, 64)):
            k = min(64, n - t0)
            page = int(perm[used + i])
            cache[page, : k * 64] = torch.randn(k * 64, generator=gen).to(torch.bfloat16)
            scales[page, :k] = torch.rand(k, generator=gen) + 0.5
        used += p
    return cache, page_table


def fp8_page_sum_reference(cache, seq_lens, page_table, max_len):
    values = cache[:, :4096].reshape(-1, 64, 64).double()
    scales = cache[:, 4096:].view(torch.float32).double()
    total = 0.0
    for r, n in enumerate(seq_lens.tolist()):
        t = torch.arange(max(0, min(n, max_len)))
        page = page_table[r, t // 64].long()
        total += values[page, t % 64].sum().item() + scales[page, t % 64].sum().item()
    return total


DOT_TILINGS = [c for c in page_gather.GATHER_TILINGS if c.kind == "dot"]


@pytest.mark.parametrize("cfg", DOT_TILINGS, ids=lambda c: c.label.replace(" ", "-"))
def test_the_whole_page_gather_reads_each_keys_values_and_scale_below_each_length(interp, cfg):
    gen = torch.Generator().manual_seed(11)
    lens = [0, 1, 64, 65, 300, 129, 1000]
    cache, page_table = fp8_pages(gen, 40, lens, 16, 900)
    seq = torch.tensor(lens, dtype=torch.int32)
    out = torch.full((64,), float("nan"))
    tiling = small_tiling(cfg)
    page_gather.page_gather_sum(cache, seq, page_table, 900, out, tiling, num_sms=4, row_dim=64, scales=True)
    got = out[: page_gather.gather_programs(tiling, len(lens), 900, 4)].double().sum().item()
    want = fp8_page_sum_reference(cache, seq, page_table, 900)
    assert abs(got - want) < 1e-3 * max(1.0, abs(want)), (got, want)


def test_the_whole_page_gather_refuses_the_register_gather_and_pages_without_scales():
    reg = next(c for c in page_gather.GATHER_TILINGS if c.kind == "reg")
    fp8 = torch.zeros((2, 4224), dtype=torch.bfloat16)
    seq, table, out = torch.tensor([1], dtype=torch.int32), torch.zeros((1, 1), dtype=torch.int32), torch.zeros(64)
    with pytest.raises(ValueError, match="scales needs a 'dot' gather"):
        page_gather.page_gather_sum(fp8, seq, table, 64, out, reg, num_sms=4, row_dim=64, scales=True)
    bf16 = torch.zeros((2, 64 * 128), dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="scales needs a 'dot' gather"):
        page_gather.page_gather_sum(bf16, seq, table, 64, out, DOT_TILINGS[0], num_sms=4, scales=True)
    with pytest.raises(ValueError, match="with row_dim=32"):  # value bytes would be summed as scales
        page_gather.page_gather_sum(fp8, seq, table, 64, out, DOT_TILINGS[0], num_sms=4, row_dim=32, scales=True)
