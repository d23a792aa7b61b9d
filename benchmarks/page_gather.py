"""The read-only limit of paged decode logits: gather the same pages through the same page table.

Any kernel that computes ``logits[r, t]`` over a paged index-K must read every key row
``index_k_cache[page_table[r, t // 64], t % 64, :]`` for ``t < seq_lens[r]``. This kernel
reads exactly those rows and only sums them (one fp32 per program, so nothing can be
optimised away), with nothing else in the way: no q, no matrix product, no epilogue, no
output row. Its time is the floor for any paged logits kernel at that shape, launch and
page-table round trip included; ``benchmarks/kernels.py`` times it beside a CUDA-graphed
copy of the same bytes and our logits kernel.

Two kernels, both cutting the batch like the logits kernel's decode grids (the rows' parts of
one batch-wide chunk size, the same helpers), so they differ from it only in what they do with
the keys:
  * ``page_gather_dot_kernel`` ("dot"): the logits kernel's loop with the work taken out: page
    ids 64 at a time into registers, each key tile summed by a 16-row ones matrix (``tl.dot``:
    that is what makes Triton pipeline the loads with cp.async, as in the logits kernel; a
    sixteenth of its tensor work, no q, no epilogue, no output row), on the item grid or the
    (rows, split) grid; over SGLang's fp8 pages it can read each key's fp32 scale too (``scales``),
    so that it reads every byte of the pages that an fp8 logits kernel must read;
  * ``page_gather_sum_kernel`` ("reg"): plain loads, the next tile loaded before the current
    one is summed, programs walking the parts.
Tuned separately (``GATHER_TILINGS``, the fastest per shape counts). Tried and dropped (AOT,
sm_90a): whole-page ``[pages, 64, 128]`` register tiles took 241-255 registers and spilled;
without the register prefetch the loads lost their 16-byte width; loads that feed no dot are
not pipelined by Triton.
Benchmark only: not part of the package's kernels.
"""

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels_sm120.paged_mqa_logits import (
    _batch_chunk,
    _clamped_lens,
    _find_item,
    _part_bounds,
    fp8_block_scales,
    key_tile,
    page_id_block,
    pick_split,
)

PAGE = 64
D = 128


@triton.jit
def _page_rows_tile(k_ptr, stride_page, pt_row, n0, end, D: tl.constexpr, PAGE: tl.constexpr, BLOCK_N: tl.constexpr):
    """Keys [n0, n0 + BLOCK_N) of one row (zero past ``end``), bf16 [BLOCK_N, D]."""
    d = tl.arange(0, D)
    t = n0 + tl.arange(0, BLOCK_N)
    page = tl.load(pt_row + t // PAGE, mask=t < end, other=0).to(tl.int64)
    return tl.load(
        k_ptr + page[:, None] * stride_page + (t % PAGE)[:, None] * D + d[None, :], mask=(t < end)[:, None], other=0.0
    )


@triton.jit
def _count_items(seq_lens_ptr, rows, max_len, chunk):
    """Work items of the batch: each row's written span cut into parts of ``chunk`` keys."""
    n_items = tl.sum(tl.cdiv(_clamped_lens(seq_lens_ptr, 0, rows, max_len, 256), chunk), axis=0)
    for r0 in range(256, rows, 256):
        n_items += tl.sum(tl.cdiv(_clamped_lens(seq_lens_ptr, r0, rows, max_len, 256), chunk), axis=0)
    return n_items


@triton.jit
def page_gather_sum_kernel(
    k_ptr,
    stride_page,
    seq_lens_ptr,
    page_table_ptr,
    stride_pt_row,
    out_ptr,
    rows,
    max_len,
    min_chunk,
    busy_programs,
    D: tl.constexpr,
    PAGE: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
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


@triton.jit
def _gather_part_dot(
    acc,
    scale_acc,
    k_ptr,
    stride_page,
    pt_row,
    start,
    end,
    D: tl.constexpr,
    PAGE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PAGE_BLOCK: tl.constexpr,
    SCALES: tl.constexpr,
):
    """acc [16, D] += the sum of key rows [start, end) (a 16-row ones matrix times each tile): the
    loads feed a tl.dot, so Triton's pipeliner gives them the logits kernel's cp.async stages; page
    ids PAGE_BLOCK at a time into registers, as in the logits kernel's _one_row.

    SCALES (SGLang's fp8 pages, D = 64 bf16 per key row): each key's fp32 scale is read too and
    summed into ``scale_acc`` [BLOCK_N], one tile ahead as the logits kernel's scales_ahead loads
    them (Triton pipelines only the loads that feed the dot)."""
    offs_n = tl.arange(0, BLOCK_N)
    ones = tl.full([16, BLOCK_N], 1.0, tl.float32).to(tl.bfloat16)
    n_pages = tl.cdiv(end, PAGE)
    p_first = start // PAGE
    # the pages as bytes, for the logits kernel's own scale reader (rows of 2 * D bytes, then the scales)
    k_bytes = k_ptr.to(tl.pointer_type(tl.uint8))
    for pb_i in range(0, tl.cdiv(n_pages - p_first, PAGE_BLOCK)):
        pb, ids, lo, blk_end = page_id_block(pt_row, p_first, pb_i, n_pages, start, end, PAGE, PAGE_BLOCK)
        if SCALES:
            t = lo + offs_n
            scale_next = fp8_block_scales(k_bytes, 2 * stride_page, ids, pb, t, t < blk_end, 2 * D, PAGE, PAGE_BLOCK)
        for i in range(0, tl.cdiv(blk_end - lo, BLOCK_N)):
            t = lo + i * BLOCK_N + offs_n
            k = key_tile(k_ptr, stride_page, ids, pb, t, t < end, D, PAGE, PAGE_BLOCK)
            if SCALES:
                scale_acc += scale_next
                t_next = t + BLOCK_N
                scale_next = fp8_block_scales(
                    k_bytes, 2 * stride_page, ids, pb, t_next, t_next < blk_end, 2 * D, PAGE, PAGE_BLOCK
                )
            acc = tl.dot(ones, k, acc)
    return acc, scale_acc


@triton.jit
def page_gather_dot_kernel(
    k_ptr,
    stride_page,
    seq_lens_ptr,
    page_table_ptr,
    stride_pt_row,
    out_ptr,
    rows,
    max_len,
    split,
    min_chunk,
    busy_programs,
    D: tl.constexpr,
    PAGE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PAGE_BLOCK: tl.constexpr,
    ITEM_GRID: tl.constexpr,
    SCALES: tl.constexpr,
):
    """The pipelined gather, on either of the logits kernel's decode grids: the item grid (program i:
    the batch's i-th part) or (rows, split) (program (row, part))."""
    chunk = _batch_chunk(seq_lens_ptr, rows, max_len, busy_programs, min_chunk, BLOCK_N)
    if ITEM_GRID:
        pid = tl.program_id(0)
        row, part = _find_item(seq_lens_ptr, rows, max_len, chunk, pid)
        n_write = tl.minimum(tl.maximum(tl.load(seq_lens_ptr + tl.maximum(row, 0)), 0), max_len)
        start = tl.maximum(part, 0) * chunk  # past the last item (-1, -1): the empty span [0, 0)
        end = tl.where(row >= 0, tl.minimum(start + chunk, n_write), 0)
    else:
        pid = tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)
        row = tl.program_id(0)
        n_write = tl.minimum(tl.maximum(tl.load(seq_lens_ptr + row), 0), max_len)
        start, end = _part_bounds(n_write, split, tl.program_id(1), chunk, BLOCK_N)
    acc = tl.zeros([16, D], dtype=tl.float32)
    scale_acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    pt_row = page_table_ptr + tl.maximum(row, 0).to(tl.int64) * stride_pt_row
    if start < end:
        acc, scale_acc = _gather_part_dot(
            acc, scale_acc, k_ptr, stride_page, pt_row, start, end, D, PAGE, BLOCK_N, PAGE_BLOCK, SCALES
        )
    tl.store(out_ptr + pid, tl.sum(tl.sum(acc, axis=1), axis=0) / 16 + tl.sum(scale_acc, axis=0))


@dataclass(frozen=True)
class GatherConfig:
    """kind "dot": the pipelined gather (``page_gather_dot_kernel``) on the item grid (``item_grid``)
    or the (rows, split) grid; kind "reg": the register-prefetch gather (``page_gather_sum_kernel``),
    ``programs_per_sm`` x SMs programs walking the parts (0: one program per part)."""

    kind: str
    block_n: int
    num_warps: int
    busy_per_sm: int
    num_stages: int = 1
    programs_per_sm: int = 0
    item_grid: bool = True
    min_chunk: int = 256
    page_block: int = 64  # "dot": page ids loaded this many at a time (the pipeline drains at each block)

    @property
    def label(self) -> str:
        grid = ("items" if self.item_grid else "rows-x-split") if self.kind == "dot" else f"{self.programs_per_sm}/SM"
        blocks = f" pb{self.page_block}" if self.kind == "dot" and self.page_block != 64 else ""
        tiling = f"bn{self.block_n} w{self.num_warps} s{self.num_stages}"
        return f"{self.kind} {tiling} {grid} busy{self.busy_per_sm}{blocks}"


# Swept per shape by benchmarks/kernels.py; the fastest is the limit reported. Register gather:
# registers per thread (AOT, triton 3.8, sm_90a) bn64 w4 128, bn128 w8 127, bn128 w4 213, so
# programs_per_sm is what fits one SM's 64K registers. In the H200 call of 2026-12-01 the register
# gather fell to 71% of the copy above ~500 MB (one tile ahead is too little in flight once TLB
# misses lengthen each load); the pipelined one keeps the logits kernel's cp.async depth.
GATHER_TILINGS: tuple[GatherConfig, ...] = (
    GatherConfig("dot", 128, 4, 2, num_stages=3),
    GatherConfig("dot", 128, 4, 4, num_stages=4),
    GatherConfig("dot", 64, 4, 2, num_stages=4),
    GatherConfig("dot", 128, 4, 4, num_stages=3, item_grid=False),
    GatherConfig("dot", 128, 4, 2, num_stages=3, item_grid=False),
    GatherConfig("reg", 128, 8, 2, programs_per_sm=2),
    GatherConfig("reg", 128, 4, 2, programs_per_sm=2),
    GatherConfig("reg", 64, 4, 4, programs_per_sm=4),
    # page ids 256 at a time, as the logits kernel's candidates with fewer pipeline drains
    GatherConfig("dot", 128, 4, 2, num_stages=3, page_block=256),
    GatherConfig("dot", 64, 4, 4, num_stages=3, page_block=256),
)


def gather_programs(cfg: GatherConfig, rows: int, max_seq_len: int, num_sms: int) -> int:
    """How many partial sums a call writes (``out`` must hold them)."""
    if cfg.kind == "reg":
        return cfg.programs_per_sm * num_sms or cfg.busy_per_sm * num_sms + rows
    if cfg.item_grid:
        return cfg.busy_per_sm * num_sms + rows
    return rows * _split(cfg, rows, max_seq_len, num_sms)


def _split(cfg: GatherConfig, rows: int, max_seq_len: int, num_sms: int) -> int:
    return pick_split(rows, max_seq_len, cfg.block_n, 2 * num_sms, 8192)  # the logits kernel's v2.3 rule


def page_gather_sum(
    index_k_pages: torch.Tensor,
    seq_lens: torch.Tensor,
    page_table: torch.Tensor,
    max_seq_len: int,
    out: torch.Tensor,
    cfg: GatherConfig,
    num_sms: int,
    row_dim: int = D,
    scales: bool = False,
) -> torch.Tensor:
    """Sum of every key row a paged logits call over (seq_lens, page_table) must read.

    index_k_pages: bf16 [num_pages, >= 64 * row_dim] (contiguous pages; rows of ``row_dim`` bf16 at the
    page's start); seq_lens [R] int32; page_table [R, W] int32; out: fp32 with room for
    ``gather_programs`` partial sums (sum them for the total). SGLang's fp8 pages (8448 B) viewed as
    bf16 [num_pages, 4224] with ``row_dim=64``: each key's 128 e4m3 bytes, and with ``scales`` (kind
    "dot" only) its fp32 scale too, every byte of the page a logits kernel must read.
    """
    fp8_pages = index_k_pages.dtype == torch.bfloat16 and row_dim == 64 and index_k_pages.shape[1] == 4224
    if scales and (cfg.kind != "dot" or not fp8_pages or index_k_pages.stride(0) % 2):
        raise ValueError(
            f"scales needs a 'dot' gather over SGLang's fp8 pages viewed as bf16 [pages, 4224] with row_dim=64, got "
            f"{cfg.label} over {index_k_pages.dtype} {list(index_k_pages.shape)} with row_dim={row_dim}"
        )
    rows = seq_lens.shape[0]
    programs = gather_programs(cfg, rows, max_seq_len, num_sms)
    if out.numel() < programs:
        raise ValueError(f"out must hold {programs} partial sums, got {out.numel()}")
    min_chunk = triton.cdiv(cfg.min_chunk, cfg.block_n) * cfg.block_n
    busy = cfg.busy_per_sm * num_sms
    if cfg.kind == "reg":
        page_gather_sum_kernel[(programs,)](
            index_k_pages,
            index_k_pages.stride(0),
            seq_lens,
            page_table,
            page_table.stride(0),
            out,
            rows,
            max_seq_len,
            min_chunk,
            busy,
            D=row_dim,
            PAGE=PAGE,
            BLOCK_N=cfg.block_n,
            num_warps=cfg.num_warps,
            num_stages=1,
        )
        return out
    split = 1 if cfg.item_grid else _split(cfg, rows, max_seq_len, num_sms)
    grid = (programs, 1) if cfg.item_grid else (rows, split)
    page_gather_dot_kernel[grid](
        index_k_pages,
        index_k_pages.stride(0),
        seq_lens,
        page_table,
        page_table.stride(0),
        out,
        rows,
        max_seq_len,
        split,
        min_chunk,
        busy,
        D=row_dim,
        PAGE=PAGE,
        BLOCK_N=cfg.block_n,
        PAGE_BLOCK=cfg.page_block,
        ITEM_GRID=cfg.item_grid,
        SCALES=scales,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    return out
