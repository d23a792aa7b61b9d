"""The read-only limit of paged decode logits: gather the same pages through the same page table.

Any kernel that computes ``logits[r, t]`` over a paged index-K must read every key row
``index_k_cache[page_table[r, t // 64], t % 64, :]`` for ``t < seq_lens[r]``. This kernel
reads exactly those rows and only sums them (one fp32 per program, so nothing can be
optimised away), with nothing else in the way: no q, no matrix product, no epilogue, no
output row. Its time is the floor for any paged logits kernel at that shape, launch and
page-table round trip included; ``benchmarks/kernels.py`` times it beside a CUDA-graphed
copy of the same bytes and our logits kernel.

It cuts the batch like the logits kernel's decode item grid (the rows' parts of one
batch-wide chunk size, the same helpers), so the two differ only in what they do with the
keys; its programs walk the parts (item i on program i % grid), one each when
``programs_per_sm`` is 0 (grid = busy programs + rows, the logits kernel's item grid).
Tuned separately (``GATHER_TILINGS``, the fastest per shape counts): tile size, warps,
programs and busy programs per SM; the next tile is always loaded before the current one
is summed. Tried and dropped (AOT, sm_90a): whole-page ``[pages, 64, 128]`` tiles took
241-255 registers and spilled; without the register prefetch the loads lost their 16-byte
width.
Benchmark only: not part of the package's kernels.
"""

from dataclasses import dataclass
from typing import Tuple

import torch
import triton
import triton.language as tl

from kernels_sm120.paged_mqa_logits import _batch_chunk, _clamped_lens, _find_item

PAGE = 64
D = 128


@triton.jit
def _page_rows_tile(k_ptr, stride_page, pt_row, n0, end, D: tl.constexpr, PAGE: tl.constexpr,
                    BLOCK_N: tl.constexpr):
    """Keys [n0, n0 + BLOCK_N) of one row (zero past ``end``), bf16 [BLOCK_N, D]."""
    d = tl.arange(0, D)
    t = n0 + tl.arange(0, BLOCK_N)
    page = tl.load(pt_row + t // PAGE, mask=t < end, other=0).to(tl.int64)
    return tl.load(k_ptr + page[:, None] * stride_page + (t % PAGE)[:, None] * D + d[None, :],
                   mask=(t < end)[:, None], other=0.0)


@triton.jit
def _count_items(seq_lens_ptr, rows, max_len, chunk):
    """Work items of the batch: each row's written span cut into parts of ``chunk`` keys."""
    n_items = tl.sum(tl.cdiv(_clamped_lens(seq_lens_ptr, 0, rows, max_len, 256), chunk), axis=0)
    for r0 in range(256, rows, 256):
        n_items += tl.sum(tl.cdiv(_clamped_lens(seq_lens_ptr, r0, rows, max_len, 256), chunk), axis=0)
    return n_items


@triton.jit
def page_gather_sum_kernel(k_ptr, stride_page, seq_lens_ptr, page_table_ptr, stride_pt_row, out_ptr, rows, max_len,
                           min_chunk, busy_programs, D: tl.constexpr, PAGE: tl.constexpr, BLOCK_N: tl.constexpr):
    chunk = _batch_chunk(seq_lens_ptr, rows, max_len, busy_programs, min_chunk, BLOCK_N)
    n_items = _count_items(seq_lens_ptr, rows, max_len, chunk)
    # Each tile is summed over its 128 columns (inside a thread, then a few lane shuffles) into
    # one fp32 per key row: a [BLOCK_N, D] fp32 accumulator would take 128 registers per thread.
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for item in range(tl.program_id(0), n_items, tl.num_programs(0)):
        row, part = _find_item(seq_lens_ptr, rows, max_len, chunk, item)
        n_write = tl.minimum(tl.maximum(tl.load(seq_lens_ptr + row), 0), max_len)
        start = part * chunk
        end = tl.minimum(start + chunk, n_write)
        pt_row = page_table_ptr + row.to(tl.int64) * stride_pt_row
        # The next tile's loads are issued before this tile is summed (loop-carried, they also keep
        # the loads' 16-byte layout: summed straight away, Triton gives the load the reduction's
        # layout, one element per load; its pipeliner does not pipeline loads that feed no dot).
        k = _page_rows_tile(k_ptr, stride_page, pt_row, start, end, D, PAGE, BLOCK_N)
        for n0 in range(start, end, BLOCK_N):
            cur = k
            k = _page_rows_tile(k_ptr, stride_page, pt_row, n0 + BLOCK_N, end, D, PAGE, BLOCK_N)
            acc += tl.sum(cur.to(tl.float32), axis=1)
    tl.store(out_ptr + tl.program_id(0), tl.sum(acc, axis=0))


@dataclass(frozen=True)
class GatherConfig:
    block_n: int
    num_warps: int
    programs_per_sm: int
    busy_per_sm: int
    min_chunk: int = 256

    @property
    def label(self) -> str:
        return f"bn{self.block_n} w{self.num_warps} {self.programs_per_sm}/SM busy{self.busy_per_sm}"


# Swept per shape by benchmarks/kernels.py; the fastest is the limit reported. Registers per
# thread (AOT, triton 3.8, sm_90a): bn64 w4 128, bn64 w2 194, bn128 w8 127, bn128 w4 213, so
# programs_per_sm is what fits one SM's 64K registers (one resident wave).
GATHER_TILINGS: Tuple[GatherConfig, ...] = (
    GatherConfig(64, 4, 4, 4),
    GatherConfig(64, 4, 4, 2),
    GatherConfig(64, 2, 5, 5),
    GatherConfig(128, 8, 2, 2),
    GatherConfig(128, 4, 2, 2),
    GatherConfig(128, 8, 2, 1),
)


def page_gather_sum(index_k_pages: torch.Tensor, seq_lens: torch.Tensor, page_table: torch.Tensor, max_seq_len: int,
                    out: torch.Tensor, cfg: GatherConfig, num_sms: int) -> torch.Tensor:
    """Sum of every key row a paged logits call over (seq_lens, page_table) must read.

    index_k_pages: bf16 [num_pages, 64 * 128] (contiguous pages); seq_lens [R] int32; page_table
    [R, W] int32; out: fp32 [>= programs] (one partial sum per program; sum it for the total).
    """
    programs = cfg.programs_per_sm * num_sms or cfg.busy_per_sm * num_sms + seq_lens.shape[0]
    if out.numel() < programs:
        raise ValueError(f"out must hold {programs} partial sums, got {out.numel()}")
    page_gather_sum_kernel[(programs,)](
        index_k_pages, index_k_pages.stride(0), seq_lens, page_table, page_table.stride(0), out, seq_lens.shape[0],
        max_seq_len, triton.cdiv(cfg.min_chunk, cfg.block_n) * cfg.block_n, cfg.busy_per_sm * num_sms,
        D=D, PAGE=PAGE, BLOCK_N=cfg.block_n, num_warps=cfg.num_warps, num_stages=1,
    )
    return out
