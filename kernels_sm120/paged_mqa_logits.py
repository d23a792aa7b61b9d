"""bf16 paged MQA logits for the DSV4 C4 indexer.

For each query row r and compressed key position t of its page table:

    logits[r, t] = sum_h relu(q[r, h, :] . k[t, :]) * w[r, h]      (fp32)
    k[t, :]      = index_k_cache[page_table[r, t // 64], t % 64, :]   (bf16)

Output contract: write only what a consumer reads
-------------------------------------------------
The output is ``[rows, max_seq_len]`` fp32, but only columns ``t < n_write(r) =
min(seq_lens[r], max_seq_len)`` are written: the logit for ``t < 64 * page_table.shape[1]``,
-inf for the (in SGLang impossible) columns at or past the page table's reach. Columns
``t >= seq_lens[r]`` are NOT written: they keep whatever the buffer held. This is what
every consumer SGLang 0.5.23 feeds these logits to reads:

  * the CUDA top-k transforms (``topk_transform_paged`` = ``topk_v1.cuh``:
    ``radix_topk(input, ..., length = seq_len)``; ``topk_transform_paged_v2`` =
    ``topk_v2.cuh`` / ``topk_impl.cuh``: ``for_each_input(in, seq_len, ...)`` and the
    register path replace lanes past ``seq_len`` with a padding value);
  * the torch fallback ``topk_transform_pytorch_vectorized`` (masks ``t >= seq_lens`` to
    -inf before ``torch.topk``; rows with ``seq_len <= k`` take the sequential path);
  * DeepGEMM's ``fp8_paged_mqa_logits(..., clean_logits=False)``, the CUDA fp8 kernel this
    replaces, leaves those columns unwritten too.

Under a decode CUDA graph SGLang passes ``max_seq_len = 64 * page_table.shape[1]`` (the
whole context, e.g. 262,144 columns for 1M tokens); filling that width with -inf cost +4%
to +32% per call and bought nothing. ``tests/unit/kernels_sm120/test_semantics.py`` runs
SGLang's own ``topk_transform_pytorch_vectorized`` on this kernel's output with the columns
past each row's length poisoned (NaN, +inf, huge values) and left -inf, and checks the
top-k is identical. Callers that need a fully defined row (e.g. a debugging dump) fill
``out`` with -inf before the call. SGLang's SM120 torch fallback
(``fp8_paged_mqa_logits_torch_sm120``) writes -inf there and the non-SM120 one 0.0;
neither value is read. The contract assumes ``seq_lens[r] <= 64 * page_table.shape[1]``,
which SGLang's metadata guarantees (``max_compressed_seq_len = page_table.shape[1] * 64``).

Kernel (v2): the grid is (row group, split). Each row's written span ``[0, n_write)`` is
cut on the device into ``split`` equal parts of whole BLOCK_N tiles, one per program, so
a few long rows (small decode batches) spread over the whole chip without a host sync,
and the grid does not grow with ``max_seq_len``. ``split`` comes from the host: about
``programs_per_sm`` programs per SM in all, but at least ``max_seq_len / max_chunk`` parts
per row (see ``pick_split``). A program
keeps its row's q^T [128, H] and weights, and walks its part BLOCK_N keys at a time:
gather BLOCK_N key rows through the page table (page ids loaded one tile ahead), one
``tl.dot`` [BLOCK_N, 128] x [128, H] (HMMA/mma.sync on SM80/SM120, wgmma on SM90,
tcgen05 on SM100), ReLU, scale by w, sum over heads.

With ``ROWS > 1`` (prefill) a program takes ROWS consecutive query rows. If their page
tables agree over the program's part (the rows of one request in prefill do), each key
tile is loaded once and multiplied by the ROWS rows' q at once ([BLOCK_N, 128] x
[128, ROWS * H]): ROWS times fewer key reads from L2, which bound the one-row kernel in
prefill. Otherwise the rows are done one after the other. Groups run longest-first
(reverse row order: causal prefill rows grow with the row index).
"""

import torch
import triton
import triton.language as tl

from ._triton_helpers import interpreted
from ._validate import (
    INDEX_HEAD_DIM,
    INDEX_PAGE_SIZE,
    as_fp8_index_k_pages,
    as_index_k_pages,
    as_index_vector,
    check_same_device,
    check_tensor,
)


@triton.jit
def _part_bounds(
    n_write: tl.tensor, split: tl.tensor, part: tl.tensor, min_chunk: tl.tensor, BLOCK_N: tl.constexpr
) -> tuple[tl.tensor, tl.tensor]:
    """[start, end) of part ``part`` of ``split`` over [0, n_write), in whole BLOCK_N tiles and
    at least min_chunk keys (short rows use fewer parts; the others have nothing to do)."""
    chunk = tl.maximum(tl.cdiv(tl.cdiv(n_write, split), BLOCK_N) * BLOCK_N, min_chunk)
    start = part * chunk
    end = tl.minimum(start + chunk, n_write)
    return start, end


@triton.jit
def _clamped_lens(
    seq_lens_ptr: tl.tensor, r0: tl.tensor, rows: tl.tensor, max_len: tl.tensor, BLOCK: tl.constexpr
) -> tl.tensor:
    r = r0 + tl.arange(0, BLOCK)
    n = tl.load(seq_lens_ptr + r, mask=r < rows, other=0)
    return tl.minimum(tl.maximum(n, 0), max_len)


@triton.jit
def _batch_chunk(
    seq_lens_ptr: tl.tensor,
    rows: tl.tensor,
    max_len: tl.tensor,
    busy_programs: tl.tensor,
    min_chunk: tl.tensor,
    BLOCK_N: tl.constexpr,
) -> tl.tensor:
    """One part size for the whole batch: its total keys over busy_programs, in whole tiles, at
    least min_chunk (and one tile)."""
    total = tl.sum(_clamped_lens(seq_lens_ptr, 0, rows, max_len, 256), axis=0)
    for r0 in range(256, rows, 256):
        total += tl.sum(_clamped_lens(seq_lens_ptr, r0, rows, max_len, 256), axis=0)
    chunk = tl.maximum(min_chunk, tl.cdiv(tl.cdiv(total, busy_programs), BLOCK_N) * BLOCK_N)
    return tl.maximum(chunk, BLOCK_N)


@triton.jit
def _find_item(
    seq_lens_ptr: tl.tensor, rows: tl.tensor, max_len: tl.tensor, chunk: tl.tensor, item: tl.tensor
) -> tuple[tl.tensor, tl.tensor]:
    """(row, part) of work item ``item``; items are the rows' parts in row order. (-1, -1) past
    the last item."""
    r = tl.arange(0, 256)
    n = _clamped_lens(seq_lens_ptr, 0, rows, max_len, 256)
    parts = tl.cdiv(n, chunk)
    incl = tl.cumsum(parts, 0)
    hit = (incl - parts <= item) & (item < incl)  # exactly one row over all blocks (rows with 0 parts never)
    row = tl.max(tl.where(hit, r, -1), axis=0)
    part = tl.max(tl.where(hit, item - (incl - parts), -1), axis=0)
    base = tl.sum(parts, axis=0)
    for r0 in range(256, rows, 256):
        n = _clamped_lens(seq_lens_ptr, r0, rows, max_len, 256)
        parts = tl.cdiv(n, chunk)
        incl = tl.cumsum(parts, 0) + base
        hit = (incl - parts <= item) & (item < incl)
        row = tl.maximum(row, tl.max(tl.where(hit, r0 + r, -1), axis=0))
        part = tl.maximum(part, tl.max(tl.where(hit, item - (incl - parts), -1), axis=0))
        base += tl.sum(parts, axis=0)
    return row, part


@triton.jit
def _load_row_q(
    q_ptr: tl.tensor,
    stride_q_row: tl.tensor,
    w_ptr: tl.tensor,
    stride_w_row: tl.tensor,
    row: tl.tensor,
    H: tl.constexpr,
    D: tl.constexpr,
    KEY_FP8: tl.constexpr = 0,
) -> tuple[tl.tensor, tl.tensor]:
    """One row's q [H, D] (fp8 q widened to fp16, exact, where KEY_FP8 == FP8_WIDEN) and head weights [H]."""
    row64 = row.to(tl.int64)
    h = tl.arange(0, H)
    d = tl.arange(0, D)
    q = tl.load(q_ptr + row64 * stride_q_row + h[:, None] * D + d[None, :])
    if KEY_FP8 == 1:
        q = q.to(tl.float16)
    w = tl.load(w_ptr + row64 * stride_w_row + h)
    return q, w


@triton.jit
def fp8_key_values(raw: tl.tensor, KEY_FP8: tl.constexpr) -> tl.tensor:
    """e4m3 bytes as e4m3 (KEY_FP8 == 2: the product on fp8 tensor cores, q left e4m3), or widened
    to fp16 (KEY_FP8 == 1; exact: every e4m3 value, subnormals included, is an fp16 value), the
    product then on fp16 tensor cores."""
    k = raw.to(tl.float8e4nv, bitcast=True)
    if KEY_FP8 == 1:
        k = k.to(tl.float16)
    return k


@triton.jit
def fp8_key_scales(
    k_ptr: tl.tensor,
    stride_page: tl.tensor,
    page: tl.tensor,
    t: tl.tensor,
    valid: tl.tensor,
    D: tl.constexpr,
    PAGE: tl.constexpr,
) -> tl.tensor:
    """The fp32 scale of each key row t [BLOCK_N] of SGLang's fp8 page (64 rows of D e4m3 bytes,
    then 64 fp32 scales); 0 where not ``valid``."""
    at = k_ptr + page * stride_page + PAGE * D + (t % PAGE) * 4
    return tl.load(at.to(tl.pointer_type(tl.float32)), mask=valid, other=0.0)


@triton.jit
def _logits_tile(
    k: tl.tensor,
    q_t: tl.tensor,
    w: tl.tensor,
    out_row: tl.tensor,
    t: tl.tensor,
    valid: tl.tensor,
    end: tl.tensor,
    scale: tl.tensor,
    DIRECT_STORE: tl.constexpr,
) -> None:
    """scale: the keys' fp32 scales [BLOCK_N] (fp8 keys; positive, so relu(c * x) = c * relu(x)) or 1.0."""
    s = tl.dot(k, q_t)  # [BLOCK_N, H] fp32
    s = tl.maximum(s, 0.0) * w[None, :]
    logit = tl.where(valid, tl.sum(s, axis=1) * scale, float("-inf"))
    store_logits(out_row + t, logit, t < end, DIRECT_STORE)


@triton.jit
def store_logits(at: tl.tensor, logit: tl.tensor, mask: tl.tensor, DIRECT_STORE: tl.constexpr) -> None:
    """Store a tile's logits. ``tl.store`` first moves them out of the product's layout (each key's sum is held,
    as copies, by every lane that holds part of its row of the product) into one key per lane, through shared
    memory: a store, a barrier and a load per tile. DIRECT_STORE (CUDA only; Triton's interpreter runs no PTX)
    stores each key's sum from the product's layout with ``st.global``: every lane holding a copy writes the
    same word."""
    if DIRECT_STORE:
        # an elementwise asm block must produce a tensor: $0 is a dummy 0, unused
        tl.inline_asm_elementwise(
            "{ .reg .pred p; setp.ne.b32 p, $3, 0; @p st.global.b32 [$1], $2; mov.b32 $0, 0; }",
            "=r,l,r,r",
            [at.to(tl.int64), logit, mask.to(tl.int32)],
            dtype=tl.int32,
            is_pure=False,
            pack=1,
        )
    else:
        tl.store(at, logit, mask=mask)


@triton.jit
def _one_row_tiles(
    q_t: tl.tensor,
    w: tl.tensor,
    k_ptr: tl.tensor,
    stride_page: tl.tensor,
    pt_row: tl.tensor,
    out_row: tl.tensor,
    start: tl.tensor,
    end: tl.tensor,
    compute_end: tl.tensor,
    D: tl.constexpr,
    PAGE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    KEY_FP8: tl.constexpr,
    DIRECT_STORE: tl.constexpr,
) -> None:
    """The v1 loop: page ids loaded one tile ahead and carried (with the id load in the same
    iteration as the key load, Triton's pipeliner treats the key load as indirect and keeps a
    single key buffer; carried, it still issues each cp.async right after its id load)."""
    offs_n = tl.arange(0, BLOCK_N)
    d = tl.arange(0, D)
    t = start + offs_n
    page = tl.load(pt_row + t // PAGE, mask=t < compute_end, other=0).to(tl.int64)
    for i in range(0, tl.cdiv(compute_end - start, BLOCK_N)):  # from 0: see _one_row
        t = start + i * BLOCK_N + offs_n
        valid = t < compute_end
        k = tl.load(
            k_ptr + page[:, None] * stride_page + (t % PAGE)[:, None] * D + d[None, :], mask=valid[:, None], other=0
        )
        scale = 1.0
        if KEY_FP8:
            k = fp8_key_values(k, KEY_FP8)
            scale = fp8_key_scales(k_ptr, stride_page, page, t, valid, D, PAGE)
        t_next = t + BLOCK_N
        page = tl.load(pt_row + t_next // PAGE, mask=t_next < compute_end, other=0).to(tl.int64)
        _logits_tile(k, q_t, w, out_row, t, valid, end, scale, DIRECT_STORE)


@triton.jit
def _page_id(pt_row: tl.tensor, p: tl.tensor, n_keys: tl.tensor, PAGE: tl.constexpr) -> tl.tensor:
    """The id of the row's page ``p`` (0 for a page past the row's keys: loaded ahead, never used)."""
    return tl.load(pt_row + p, mask=p * PAGE < n_keys, other=0).to(tl.int64)


@triton.jit
def _page_keys(
    k_ptr: tl.tensor, stride_page: tl.tensor, page: tl.tensor, valid: tl.tensor, D: tl.constexpr, PAGE: tl.constexpr
) -> tl.tensor:
    """One whole page's keys [PAGE, D] (rows past ``valid`` read as 0; fp8 pages: their value bytes)."""
    offs = tl.arange(0, PAGE)
    d = tl.arange(0, D)
    return tl.load(k_ptr + page * stride_page + offs[:, None] * D + d[None, :], mask=valid[:, None], other=0)


@triton.jit
def _page_tiles(
    q_t: tl.tensor,
    w: tl.tensor,
    k_ptr: tl.tensor,
    stride_page: tl.tensor,
    pt_row: tl.tensor,
    out_row: tl.tensor,
    first: tl.tensor,
    stride: tl.tensor,
    n_tiles: tl.tensor,
    page: tl.tensor,
    n_keys: tl.tensor,
    end: tl.tensor,
    D: tl.constexpr,
    PAGE: tl.constexpr,
    KEY_FP8: tl.constexpr,
    DIRECT_STORE: tl.constexpr,
    IDS_AHEAD: tl.constexpr,
) -> None:
    """One whole page per tile: the row's pages first, first + stride, ... (n_tiles of them; ``page`` is the first
    one's id), keys below n_keys, written up to ``end``. Each next page's id is one scalar load and (fp8 keys) its
    scales are loaded right after it, both one tile ahead and carried: loaded in the tile's own iteration,
    the scales were issued after its product (AOT sm_90a: the scale LDG after the HGMMA wait), one more round
    trip per tile. Scalar ids need no ``tl.gather`` (which Triton lowers through shared memory: four of the six
    barriers per tile of ``_one_row``'s page-id blocks, AOT sm_90a, against two here).

    IDS_AHEAD == 2: each id is loaded two tiles ahead. One tile ahead, the pipeliner issues the id's load right
    before the cp.async it addresses, so each tile waits a round trip there; two ahead, that id is back, and each
    tile's scales are loaded from an id already back too (NOTES.md, "Page ids two tiles ahead"). IDS_AHEAD == 3
    (fp8 keys): ids three tiles ahead and each tile's scales two ahead (NOTES.md, "Ids three tiles ahead")."""
    offs = tl.arange(0, PAGE)
    t = first * PAGE + offs
    scale = 1.0
    if KEY_FP8:
        scale = fp8_key_scales(k_ptr, stride_page, page, t, t < n_keys, D, PAGE)
    if IDS_AHEAD == 1:
        for i in range(0, n_tiles):  # from 0: see _one_row
            p = first + i * stride
            t = p * PAGE + offs
            valid = t < n_keys
            k = _page_keys(k_ptr, stride_page, page, valid, D, PAGE)
            p_next = p + stride
            t_next = p_next * PAGE + offs
            page = _page_id(pt_row, p_next, n_keys, PAGE)
            if KEY_FP8:
                scale_next = fp8_key_scales(k_ptr, stride_page, page, t_next, t_next < n_keys, D, PAGE)
                _logits_tile(fp8_key_values(k, KEY_FP8), q_t, w, out_row, t, valid, end, scale, DIRECT_STORE)
                scale = scale_next
            else:
                _logits_tile(k, q_t, w, out_row, t, valid, end, 1.0, DIRECT_STORE)
    elif IDS_AHEAD == 3:
        tl.static_assert(KEY_FP8 > 0, "IDS_AHEAD 3 loads fp8 scales two tiles ahead: fp8 keys only")
        # fp8 keys (the launcher refuses others): ids three tiles ahead, scales two ahead. Both are handed on as new
        # values each tile (the id's max, the scale's + 0.0: scales are never -0.0), as at IDS_AHEAD == 2.
        p1 = first + stride
        p2 = first + 2 * stride
        page1 = _page_id(pt_row, p1, n_keys, PAGE)
        page2 = _page_id(pt_row, p2, n_keys, PAGE)
        t1 = p1 * PAGE + offs
        scale1 = fp8_key_scales(k_ptr, stride_page, page1, t1, t1 < n_keys, D, PAGE)
        for i in range(0, n_tiles):  # from 0: see _one_row
            p = first + i * stride
            t = p * PAGE + offs
            valid = t < n_keys
            k = _page_keys(k_ptr, stride_page, page, valid, D, PAGE)
            t2 = (p + 2 * stride) * PAGE + offs
            scale2 = fp8_key_scales(k_ptr, stride_page, page2, t2, t2 < n_keys, D, PAGE)
            p3 = p + 3 * stride
            page3 = _page_id(pt_row, p3, n_keys, PAGE)
            _logits_tile(fp8_key_values(k, KEY_FP8), q_t, w, out_row, t, valid, end, scale, DIRECT_STORE)
            scale = scale1 + 0.0
            scale1 = scale2
            page = tl.maximum(page1, 0)
            page1 = tl.maximum(page2, 0)
            page2 = page3
    else:
        tl.static_assert(IDS_AHEAD == 2, "IDS_AHEAD: 1, 2 or 3 (3: fp8 keys only)")
        p_next = first + stride
        page_next = _page_id(pt_row, p_next, n_keys, PAGE)
        for i in range(0, n_tiles):  # from 0: see _one_row
            p = first + i * stride
            t = p * PAGE + offs
            valid = t < n_keys
            k = _page_keys(k_ptr, stride_page, page, valid, D, PAGE)
            p_after = p + 2 * stride
            if KEY_FP8:
                t_next = (p + stride) * PAGE + offs
                scale_next = fp8_key_scales(k_ptr, stride_page, page_next, t_next, t_next < n_keys, D, PAGE)
                page_after = _page_id(pt_row, p_after, n_keys, PAGE)
                _logits_tile(fp8_key_values(k, KEY_FP8), q_t, w, out_row, t, valid, end, scale, DIRECT_STORE)
                scale = scale_next
            else:
                page_after = _page_id(pt_row, p_after, n_keys, PAGE)
                _logits_tile(k, q_t, w, out_row, t, valid, end, 1.0, DIRECT_STORE)
            # An id carried on unchanged would be a loop-carried distance of two, and Triton's pipeliner leaves
            # such a loop unpipelined (no cp.async): the max (ids are >= 0) makes it a new value.
            page = tl.maximum(page_next, 0)
            page_next = page_after


@triton.jit
def page_id_block(
    pt_row: tl.tensor,
    p_first: tl.tensor,
    pb_i: tl.tensor,
    n_pages: tl.tensor,
    start: tl.tensor,
    end: tl.tensor,
    PAGE: tl.constexpr,
    PAGE_BLOCK: tl.constexpr,
) -> tuple[tl.tensor, tl.tensor, tl.tensor, tl.tensor]:
    """Block ``pb_i`` of a row's page ids for keys [start, end): its first page, the ids
    [PAGE_BLOCK] (0 past the row's pages) and the keys [lo, blk_end) it covers."""
    pb = p_first + pb_i * PAGE_BLOCK
    slots = pb + tl.arange(0, PAGE_BLOCK)
    ids = tl.load(pt_row + slots, mask=slots < n_pages, other=0)
    return pb, ids, tl.maximum(pb * PAGE, start), tl.minimum((pb + PAGE_BLOCK) * PAGE, end)


@triton.jit
def key_tile(
    k_ptr: tl.tensor,
    stride_page: tl.tensor,
    ids: tl.tensor,
    pb: tl.tensor,
    t: tl.tensor,
    valid: tl.tensor,
    D: tl.constexpr,
    PAGE: tl.constexpr,
    PAGE_BLOCK: tl.constexpr,
) -> tl.tensor:
    """Key rows t [BLOCK_N] (zero where not ``valid``), their pages gathered from the block's ids."""
    page = tl.gather(ids, tl.minimum(t // PAGE - pb, PAGE_BLOCK - 1), 0).to(tl.int64)
    d = tl.arange(0, D)
    return tl.load(
        k_ptr + page[:, None] * stride_page + (t % PAGE)[:, None] * D + d[None, :], mask=valid[:, None], other=0.0
    )


@triton.jit
def key_tile_bytes(
    k_ptr: tl.tensor,
    stride_page: tl.tensor,
    ids: tl.tensor,
    pb: tl.tensor,
    t: tl.tensor,
    valid: tl.tensor,
    D: tl.constexpr,
    PAGE: tl.constexpr,
    PAGE_BLOCK: tl.constexpr,
) -> tl.tensor:
    """fp8 key rows t [BLOCK_N] as stored (uint8 [BLOCK_N, D], zero where not ``valid``)."""
    page = tl.gather(ids, tl.minimum(t // PAGE - pb, PAGE_BLOCK - 1), 0).to(tl.int64)
    d = tl.arange(0, D)
    return tl.load(
        k_ptr + page[:, None] * stride_page + (t % PAGE)[:, None] * D + d[None, :], mask=valid[:, None], other=0
    )


@triton.jit
def fp8_block_scales(
    k_ptr: tl.tensor,
    stride_page: tl.tensor,
    ids: tl.tensor,
    pb: tl.tensor,
    t: tl.tensor,
    valid: tl.tensor,
    D: tl.constexpr,
    PAGE: tl.constexpr,
    PAGE_BLOCK: tl.constexpr,
) -> tl.tensor:
    """The fp32 scales [BLOCK_N] of fp8 key rows t, pages gathered from the block's ids (0 where not ``valid``)."""
    page = tl.gather(ids, tl.minimum(t // PAGE - pb, PAGE_BLOCK - 1), 0).to(tl.int64)
    return fp8_key_scales(k_ptr, stride_page, page, t, valid, D, PAGE)


@triton.jit
def fp8_key_tile(
    k_ptr: tl.tensor,
    stride_page: tl.tensor,
    ids: tl.tensor,
    pb: tl.tensor,
    t: tl.tensor,
    valid: tl.tensor,
    D: tl.constexpr,
    PAGE: tl.constexpr,
    PAGE_BLOCK: tl.constexpr,
    KEY_FP8: tl.constexpr,
) -> tuple[tl.tensor, tl.tensor]:
    """fp8 key rows t [BLOCK_N] as fp16 [BLOCK_N, D] and their scales [BLOCK_N] (zero where not ``valid``)."""
    page = tl.gather(ids, tl.minimum(t // PAGE - pb, PAGE_BLOCK - 1), 0).to(tl.int64)
    d = tl.arange(0, D)
    raw = tl.load(
        k_ptr + page[:, None] * stride_page + (t % PAGE)[:, None] * D + d[None, :], mask=valid[:, None], other=0
    )
    return fp8_key_values(raw, KEY_FP8), fp8_key_scales(k_ptr, stride_page, page, t, valid, D, PAGE)


@triton.jit
def _one_row(
    q: tl.tensor,
    w: tl.tensor,
    k_ptr: tl.tensor,
    stride_page: tl.tensor,
    page_table_ptr: tl.tensor,
    stride_pt_row: tl.tensor,
    out_ptr: tl.tensor,
    stride_out_row: tl.tensor,
    row: tl.tensor,
    start: tl.tensor,
    end: tl.tensor,
    n_keys: tl.tensor,
    H: tl.constexpr,
    D: tl.constexpr,
    PAGE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PAGE_BLOCK: tl.constexpr,
    KEY_FP8: tl.constexpr,
    SCALES_AHEAD: tl.constexpr,
    DIRECT_STORE: tl.constexpr,
    IDS_AHEAD: tl.constexpr,
) -> None:
    """Logits of one row (q [H, D], w [H]) over [start, end): keys below n_keys, -inf from n_keys on.

    SCALES_AHEAD (fp8 keys): each tile's key scales are loaded one tile ahead and carried. Triton's
    pipeliner streams only the loads that feed the dot (the key tiles, cp.async); a scale load in the
    tile's own iteration made every tile wait one memory round trip after its product."""
    row64 = row.to(tl.int64)
    out_row = out_ptr + row64 * stride_out_row
    offs_n = tl.arange(0, BLOCK_N)
    compute_end = tl.minimum(end, n_keys)
    fill_start = start
    if start < compute_end:
        q_t = tl.trans(q)  # [D, H]
        pt_row = page_table_ptr + row64 * stride_pt_row
        if PAGE_BLOCK == 0 and BLOCK_N == PAGE and (SCALES_AHEAD or not KEY_FP8):
            # one page per tile (``start`` on a page boundary: BLOCK_N == PAGE, parts in whole tiles); fp8 keys only
            # with their scales ahead (loaded with the page's id), bf16 keys whenever their tiles are whole pages
            p_first = start // PAGE
            page = tl.load(pt_row + p_first).to(tl.int64)  # start < compute_end: the row's own page
            n_tiles = tl.cdiv(compute_end - start, PAGE)
            _page_tiles(
                q_t,
                w,
                k_ptr,
                stride_page,
                pt_row,
                out_row,
                p_first,
                1,
                n_tiles,
                page,
                compute_end,
                end,
                D,
                PAGE,
                KEY_FP8,
                DIRECT_STORE,
                IDS_AHEAD,
            )
        elif PAGE_BLOCK == 0:
            _one_row_tiles(
                q_t,
                w,
                k_ptr,
                stride_page,
                pt_row,
                out_row,
                start,
                end,
                compute_end,
                D,
                PAGE,
                BLOCK_N,
                KEY_FP8,
                DIRECT_STORE,
            )
        else:
            # Page ids PAGE_BLOCK at a time into registers; each tile gathers its ids from
            # them, so no key load waits on a page-id load inside the pipelined loop. The loops
            # count from 0: with a lower bound derived from the item grid's search (a reduction),
            # Triton's pipeliner pipelined nothing (AOT sm_90a: no cp.async, one key buffer).
            n_pages = tl.cdiv(compute_end, PAGE)
            p_first = start // PAGE
            for pb_i in range(0, tl.cdiv(n_pages - p_first, PAGE_BLOCK)):
                pb, ids, lo, blk_end = page_id_block(
                    pt_row, p_first, pb_i, n_pages, start, compute_end, PAGE, PAGE_BLOCK
                )
                if not (KEY_FP8 and SCALES_AHEAD):
                    for i in range(0, tl.cdiv(blk_end - lo, BLOCK_N)):
                        t = lo + i * BLOCK_N + offs_n
                        valid = t < compute_end
                        if KEY_FP8:
                            k, scale = fp8_key_tile(k_ptr, stride_page, ids, pb, t, valid, D, PAGE, PAGE_BLOCK, KEY_FP8)
                        else:
                            k = key_tile(k_ptr, stride_page, ids, pb, t, valid, D, PAGE, PAGE_BLOCK)
                            scale = 1.0
                        _logits_tile(k, q_t, w, out_row, t, valid, end, scale, DIRECT_STORE)
                else:
                    t = lo + offs_n
                    scale_next = fp8_block_scales(k_ptr, stride_page, ids, pb, t, t < compute_end, D, PAGE, PAGE_BLOCK)
                    for i in range(0, tl.cdiv(blk_end - lo, BLOCK_N)):
                        t = lo + i * BLOCK_N + offs_n
                        valid = t < compute_end
                        raw = key_tile_bytes(k_ptr, stride_page, ids, pb, t, valid, D, PAGE, PAGE_BLOCK)
                        scale = scale_next
                        t_next = t + BLOCK_N
                        scale_next = fp8_block_scales(
                            k_ptr, stride_page, ids, pb, t_next, t_next < blk_end, D, PAGE, PAGE_BLOCK
                        )
                        _logits_tile(fp8_key_values(raw, KEY_FP8), q_t, w, out_row, t, valid, end, scale, DIRECT_STORE)
        fill_start = start + tl.cdiv(compute_end - start, BLOCK_N) * BLOCK_N
    # Only when seq_len exceeds the page table's reach (never in SGLang): -inf up to end.
    for n0 in range(fill_start, end, BLOCK_N):
        t = n0 + offs_n
        tl.store(out_row + t, tl.full([BLOCK_N], float("-inf"), tl.float32), mask=t < end)


@triton.jit
def _rows_share_pages(
    page_table_ptr: tl.tensor,
    stride_pt_row: tl.tensor,
    row0: tl.tensor,
    start: tl.tensor,
    ends: tl.tensor,
    rows_r: tl.tensor,
    ROWS: tl.constexpr,
    PAGE: tl.constexpr,
    PBLK: tl.constexpr,
) -> tl.tensor:
    """1 if every row's page ids over its part [start, ends[i]) equal row0's, else 0."""
    i = tl.arange(0, ROWS)
    p_lo = start // PAGE
    p_hi = tl.cdiv(tl.max(ends, axis=0), PAGE)
    mismatch = 0
    for p0 in range(p_lo, p_hi, PBLK):
        p = p0 + tl.arange(0, PBLK)
        need = (p[None, :] * PAGE < ends[:, None]) & (i[:, None] < rows_r)
        ids = tl.load(
            page_table_ptr + (row0 + i).to(tl.int64)[:, None] * stride_pt_row + p[None, :], mask=need, other=0
        )
        ids0 = tl.load(page_table_ptr + row0.to(tl.int64) * stride_pt_row + p, mask=p < p_hi, other=0)
        mismatch += tl.sum((need & (ids != ids0[None, :])).to(tl.int32))
    return mismatch == 0


@triton.jit
def _shared_rows(
    q_ptr: tl.tensor,
    stride_q_row: tl.tensor,
    k_ptr: tl.tensor,
    stride_page: tl.tensor,
    w_ptr: tl.tensor,
    stride_w_row: tl.tensor,
    page_table_ptr: tl.tensor,
    stride_pt_row: tl.tensor,
    out_ptr: tl.tensor,
    stride_out_row: tl.tensor,
    row0: tl.tensor,
    rows_r: tl.tensor,
    start: tl.tensor,
    ends: tl.tensor,
    n_keys: tl.tensor,
    H: tl.constexpr,
    D: tl.constexpr,
    PAGE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    KEY_FP8: tl.constexpr = 0,
) -> None:
    """ROWS rows with the same pages over [start, max(ends)): one key load per tile for all rows."""
    RH: tl.constexpr = ROWS * H
    offs_n = tl.arange(0, BLOCK_N)
    i = tl.arange(0, ROWS)
    live = i < rows_r
    rows64 = (row0 + i).to(tl.int64)
    end_max = tl.max(ends, axis=0)
    n_keys_max = tl.max(tl.where(live, n_keys, 0), axis=0)
    compute_end = tl.minimum(end_max, n_keys_max)
    out_rows = out_ptr + rows64 * stride_out_row  # [ROWS]
    fill_start = start
    if start < compute_end:
        c = tl.arange(0, RH)  # row-major (row, head)
        d = tl.arange(0, D)
        crow = (row0 + c // H).to(tl.int64)
        clive = (c // H) < rows_r
        q = tl.load(
            q_ptr + crow[:, None] * stride_q_row + (c % H)[:, None] * D + d[None, :], mask=clive[:, None], other=0.0
        )
        if KEY_FP8 == 1:
            q = q.to(tl.float16)
        q_t = tl.trans(q)  # [D, ROWS * H]
        w = tl.load(w_ptr + crow * stride_w_row + c % H, mask=clive, other=0.0)
        pt_row = page_table_ptr + row0.to(tl.int64) * stride_pt_row
        t = start + offs_n
        page = tl.load(pt_row + t // PAGE, mask=t < compute_end, other=0).to(tl.int64)
        for n0 in range(start, compute_end, BLOCK_N):
            t = n0 + offs_n
            k = tl.load(
                k_ptr + page[:, None] * stride_page + (t % PAGE)[:, None] * D + d[None, :],
                mask=(t < compute_end)[:, None],
                other=0,
            )
            scale = 1.0
            if KEY_FP8:
                k = fp8_key_values(k, KEY_FP8)
                scale = fp8_key_scales(k_ptr, stride_page, page, t, t < compute_end, D, PAGE)[:, None]
            t_next = t + BLOCK_N
            page = tl.load(pt_row + t_next // PAGE, mask=t_next < compute_end, other=0).to(tl.int64)
            s = tl.dot(k, q_t)  # [BLOCK_N, ROWS * H] fp32
            s = tl.maximum(s, 0.0) * w[None, :]
            logit = tl.sum(tl.reshape(s, [BLOCK_N, ROWS, H]), axis=2) * scale  # [BLOCK_N, ROWS]
            logit = tl.where(t[:, None] < n_keys[None, :], logit, float("-inf"))
            tl.store(out_rows[None, :] + t[:, None], logit, mask=t[:, None] < ends[None, :])
        fill_start = start + tl.cdiv(compute_end - start, BLOCK_N) * BLOCK_N
    for n0 in range(fill_start, end_max, BLOCK_N):
        t = n0 + offs_n
        tl.store(
            out_rows[None, :] + t[:, None],
            tl.full([BLOCK_N, ROWS], float("-inf"), tl.float32),
            mask=t[:, None] < ends[None, :],
        )


@triton.jit
def _item_program(
    q_ptr: tl.tensor,
    stride_q_row: tl.tensor,
    k_ptr: tl.tensor,
    stride_page: tl.tensor,
    w_ptr: tl.tensor,
    stride_w_row: tl.tensor,
    seq_lens_ptr: tl.tensor,
    page_table_ptr: tl.tensor,
    stride_pt_row: tl.tensor,
    reach: tl.tensor,
    out_ptr: tl.tensor,
    stride_out_row: tl.tensor,
    rows: tl.tensor,
    max_len: tl.tensor,
    min_chunk: tl.tensor,
    busy_programs: tl.tensor,
    H: tl.constexpr,
    D: tl.constexpr,
    PAGE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PAGE_BLOCK: tl.constexpr,
    KEY_FP8: tl.constexpr,
    SCALES_AHEAD: tl.constexpr,
    DIRECT_STORE: tl.constexpr,
    IDS_AHEAD: tl.constexpr,
) -> None:
    """Decode, item grid: program i takes the batch's i-th work item (the rows' parts of one
    batch-wide chunk size, in row order); programs past the last item return at once. The grid
    (busy programs + rows, see the launcher) bounds the items, so at most ``rows`` programs are
    launched without work, whatever max_seq_len. (A persistent loop over items was tried: with
    the key loop nested in it, Triton's pipeliner pipelined nothing, AOT sm_90a: no cp.async.)"""
    chunk = _batch_chunk(seq_lens_ptr, rows, max_len, busy_programs, min_chunk, BLOCK_N)
    row, part = _find_item(seq_lens_ptr, rows, max_len, chunk, tl.program_id(0))
    if row >= 0:
        n_write = tl.minimum(tl.maximum(tl.load(seq_lens_ptr + row), 0), max_len)
        start = part * chunk
        end = tl.minimum(start + chunk, n_write)
        q, w = _load_row_q(q_ptr, stride_q_row, w_ptr, stride_w_row, row, H, D, KEY_FP8)
        _one_row(
            q,
            w,
            k_ptr,
            stride_page,
            page_table_ptr,
            stride_pt_row,
            out_ptr,
            stride_out_row,
            row,
            start,
            end,
            tl.minimum(n_write, reach),
            H,
            D,
            PAGE,
            BLOCK_N,
            PAGE_BLOCK,
            KEY_FP8,
            SCALES_AHEAD,
            DIRECT_STORE,
            IDS_AHEAD,
        )


@triton.jit
def _interleaved_part(
    q_ptr: tl.tensor,
    stride_q_row: tl.tensor,
    k_ptr: tl.tensor,
    stride_page: tl.tensor,
    w_ptr: tl.tensor,
    stride_w_row: tl.tensor,
    seq_lens_ptr: tl.tensor,
    page_table_ptr: tl.tensor,
    stride_pt_row: tl.tensor,
    pt_width: tl.tensor,
    out_ptr: tl.tensor,
    stride_out_row: tl.tensor,
    max_len: tl.tensor,
    split: tl.tensor,
    row: tl.tensor,
    part: tl.tensor,
    H: tl.constexpr,
    D: tl.constexpr,
    PAGE: tl.constexpr,
    KEY_FP8: tl.constexpr,
    DIRECT_STORE: tl.constexpr,
    IDS_AHEAD: tl.constexpr,
) -> None:
    """One row (few rows), interleaved parts: program (row, part) takes the row's pages part, part + split,
    part + 2 split, ... (one PAGE-key tile each). Which page comes first does not depend on the row's
    length, so its id, q and the weights are loaded beside the length: the first key load waits for one
    round trip (length and id together), not for the length and then the ids. Page ids are read one
    tile ahead and carried (the pipeliner then keeps its key buffers, see ``_one_row_tiles``). A first
    id read past the row's pages is never used: every key load is masked by the length. The loop is
    ``_page_tiles`` (fp8 keys: scales one tile ahead too; ids further ahead with IDS_AHEAD 2 or 3)."""
    row64 = row.to(tl.int64)
    pt_row = page_table_ptr + row64 * stride_pt_row
    n_raw = tl.load(seq_lens_ptr + row)
    page = tl.load(pt_row + part, mask=part < pt_width, other=0).to(tl.int64)
    n_write = tl.minimum(tl.maximum(n_raw, 0), max_len)
    # A program past the row's pages returns after the length: under the decode graph the grid covers the
    # captured width (528 parts at 262,144 columns), so at 1 x 2K 496 of them have no page. Each one loading
    # q and the weights (8 KiB fp8, 16 KiB bf16) read 4-8 MB from L2 for nothing. A working program's q
    # load now waits for the length, as its key load does (which also waits for the page id issued beside
    # the length): the chain to its first product stays one round trip long.
    if part * PAGE < n_write:
        q, w = _load_row_q(q_ptr, stride_q_row, w_ptr, stride_w_row, row, H, D, KEY_FP8)
        n_keys = tl.minimum(n_write, pt_width * PAGE)  # past the table's reach: -inf (never in SGLang)
        q_t = tl.trans(q)  # [D, H]
        out_row = out_ptr + row64 * stride_out_row
        # this program's pages below cdiv(n_write, PAGE) (at least one here)
        n_tiles = tl.cdiv(tl.cdiv(n_write, PAGE) - part, split)
        _page_tiles(
            q_t,
            w,
            k_ptr,
            stride_page,
            pt_row,
            out_row,
            part,
            split,
            n_tiles,
            page,
            n_keys,
            n_write,
            D,
            PAGE,
            KEY_FP8,
            DIRECT_STORE,
            IDS_AHEAD,
        )


@triton.jit
def _grid_one_row(
    q_ptr: tl.tensor,
    stride_q_row: tl.tensor,
    k_ptr: tl.tensor,
    stride_page: tl.tensor,
    w_ptr: tl.tensor,
    stride_w_row: tl.tensor,
    seq_lens_ptr: tl.tensor,
    page_table_ptr: tl.tensor,
    stride_pt_row: tl.tensor,
    reach: tl.tensor,
    out_ptr: tl.tensor,
    stride_out_row: tl.tensor,
    rows: tl.tensor,
    max_len: tl.tensor,
    split: tl.tensor,
    min_chunk: tl.tensor,
    busy_programs: tl.tensor,
    group: tl.tensor,
    part: tl.tensor,
    H: tl.constexpr,
    D: tl.constexpr,
    PAGE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PAGE_BLOCK: tl.constexpr,
    BALANCE: tl.constexpr,
    KEY_FP8: tl.constexpr,
    SCALES_AHEAD: tl.constexpr,
    DIRECT_STORE: tl.constexpr,
    IDS_AHEAD: tl.constexpr,
) -> None:
    """Program (row ``group``, ``part``) of the (rows, split) grid."""
    n_write = tl.minimum(tl.maximum(tl.load(seq_lens_ptr + group), 0), max_len)
    if BALANCE:
        # One chunk size for the whole batch: its total keys over busy_programs, so the
        # programs with work are about busy_programs whatever the lengths (the grid is
        # fixed under a CUDA graph; a row still gets at most ``split`` parts).
        min_chunk = _batch_chunk(seq_lens_ptr, rows, max_len, busy_programs, min_chunk, BLOCK_N)
    start, end = _part_bounds(n_write, split, part, min_chunk, BLOCK_N)
    if start < end:
        q, w = _load_row_q(q_ptr, stride_q_row, w_ptr, stride_w_row, group, H, D, KEY_FP8)
        _one_row(
            q,
            w,
            k_ptr,
            stride_page,
            page_table_ptr,
            stride_pt_row,
            out_ptr,
            stride_out_row,
            group,
            start,
            end,
            tl.minimum(n_write, reach),
            H,
            D,
            PAGE,
            BLOCK_N,
            PAGE_BLOCK,
            KEY_FP8,
            SCALES_AHEAD,
            DIRECT_STORE,
            IDS_AHEAD,
        )


@triton.jit
def _grid_row_group(
    q_ptr: tl.tensor,
    stride_q_row: tl.tensor,
    k_ptr: tl.tensor,
    stride_page: tl.tensor,
    w_ptr: tl.tensor,
    stride_w_row: tl.tensor,
    seq_lens_ptr: tl.tensor,
    page_table_ptr: tl.tensor,
    stride_pt_row: tl.tensor,
    reach: tl.tensor,
    out_ptr: tl.tensor,
    stride_out_row: tl.tensor,
    rows: tl.tensor,
    max_len: tl.tensor,
    split: tl.tensor,
    min_chunk: tl.tensor,
    group: tl.tensor,
    part: tl.tensor,
    H: tl.constexpr,
    D: tl.constexpr,
    PAGE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    PAGE_BLOCK: tl.constexpr,
    KEY_FP8: tl.constexpr,
) -> None:
    """Program (row group ``group`` of ROWS rows, ``part``): shared key tiles when the rows'
    page tables agree over the part, else one row after the other."""
    row0 = group * ROWS
    rows_r = rows - row0  # rows of this group that exist (may exceed ROWS)
    i = tl.arange(0, ROWS)
    n_write = tl.load(seq_lens_ptr + row0 + i, mask=i < rows_r, other=0)
    n_write = tl.minimum(tl.maximum(n_write, 0), max_len)
    start, end_max = _part_bounds(tl.max(n_write, axis=0), split, part, min_chunk, BLOCK_N)
    if start < end_max:
        ends = tl.minimum(n_write, end_max)  # each row's end inside this part
        n_keys = tl.minimum(n_write, reach)
        if _rows_share_pages(
            page_table_ptr, stride_pt_row, row0, start, tl.minimum(ends, reach), rows_r, ROWS, PAGE, 64
        ):
            _shared_rows(
                q_ptr,
                stride_q_row,
                k_ptr,
                stride_page,
                w_ptr,
                stride_w_row,
                page_table_ptr,
                stride_pt_row,
                out_ptr,
                stride_out_row,
                row0,
                rows_r,
                start,
                ends,
                n_keys,
                H,
                D,
                PAGE,
                BLOCK_N,
                ROWS,
                KEY_FP8,
            )
        else:
            for j in tl.static_range(ROWS):
                if j < rows_r:
                    nw = tl.minimum(tl.maximum(tl.load(seq_lens_ptr + row0 + j), 0), max_len)
                    q, w = _load_row_q(q_ptr, stride_q_row, w_ptr, stride_w_row, row0 + j, H, D, KEY_FP8)
                    _one_row(
                        q,
                        w,
                        k_ptr,
                        stride_page,
                        page_table_ptr,
                        stride_pt_row,
                        out_ptr,
                        stride_out_row,
                        row0 + j,
                        start,
                        tl.minimum(nw, end_max),
                        tl.minimum(nw, reach),
                        H,
                        D,
                        PAGE,
                        BLOCK_N,
                        PAGE_BLOCK,
                        KEY_FP8,
                        False,  # SCALES_AHEAD: one row per program only
                        False,  # DIRECT_STORE: decode only
                        1,  # IDS_AHEAD: prefill's fallback keeps each id one tile ahead (not tuned)
                    )


@triton.jit
def paged_mqa_logits_kernel(
    q_ptr: tl.tensor,
    stride_q_row: tl.tensor,
    k_ptr: tl.tensor,
    stride_page: tl.tensor,
    w_ptr: tl.tensor,
    stride_w_row: tl.tensor,
    seq_lens_ptr: tl.tensor,
    page_table_ptr: tl.tensor,
    stride_pt_row: tl.tensor,
    pt_width: tl.tensor,
    out_ptr: tl.tensor,
    stride_out_row: tl.tensor,
    rows: tl.tensor,
    max_len: tl.tensor,
    split: tl.tensor,
    min_chunk: tl.tensor,
    busy_programs: tl.tensor,
    H: tl.constexpr,
    D: tl.constexpr,
    PAGE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr = 1,
    PAGE_BLOCK: tl.constexpr = 0,
    BALANCE: tl.constexpr = False,
    ITEM_GRID: tl.constexpr = False,
    KEY_FP8: tl.constexpr = 0,
    INTERLEAVED: tl.constexpr = False,
    SCALES_AHEAD: tl.constexpr = False,
    DIRECT_STORE: tl.constexpr = False,
    IDS_AHEAD: tl.constexpr = 1,
) -> None:
    reach = pt_width * PAGE
    if INTERLEAVED:
        _interleaved_part(
            q_ptr,
            stride_q_row,
            k_ptr,
            stride_page,
            w_ptr,
            stride_w_row,
            seq_lens_ptr,
            page_table_ptr,
            stride_pt_row,
            pt_width,
            out_ptr,
            stride_out_row,
            max_len,
            split,
            tl.program_id(0),
            tl.program_id(1),
            H,
            D,
            PAGE,
            KEY_FP8,
            DIRECT_STORE,
            IDS_AHEAD,
        )
    elif ITEM_GRID:
        _item_program(
            q_ptr,
            stride_q_row,
            k_ptr,
            stride_page,
            w_ptr,
            stride_w_row,
            seq_lens_ptr,
            page_table_ptr,
            stride_pt_row,
            reach,
            out_ptr,
            stride_out_row,
            rows,
            max_len,
            min_chunk,
            busy_programs,
            H,
            D,
            PAGE,
            BLOCK_N,
            PAGE_BLOCK,
            KEY_FP8,
            SCALES_AHEAD,
            DIRECT_STORE,
            IDS_AHEAD,
        )
    elif ROWS == 1:
        _grid_one_row(
            q_ptr,
            stride_q_row,
            k_ptr,
            stride_page,
            w_ptr,
            stride_w_row,
            seq_lens_ptr,
            page_table_ptr,
            stride_pt_row,
            reach,
            out_ptr,
            stride_out_row,
            rows,
            max_len,
            split,
            min_chunk,
            busy_programs,
            tl.num_programs(0) - 1 - tl.program_id(0),
            tl.program_id(1),
            H,
            D,
            PAGE,
            BLOCK_N,
            PAGE_BLOCK,
            BALANCE,
            KEY_FP8,
            SCALES_AHEAD,
            DIRECT_STORE,
            IDS_AHEAD,
        )
    else:
        # longest-first in causal prefill: groups in reverse row order
        _grid_row_group(
            q_ptr,
            stride_q_row,
            k_ptr,
            stride_page,
            w_ptr,
            stride_w_row,
            seq_lens_ptr,
            page_table_ptr,
            stride_pt_row,
            reach,
            out_ptr,
            stride_out_row,
            rows,
            max_len,
            split,
            min_chunk,
            tl.num_programs(0) - 1 - tl.program_id(0),
            tl.program_id(1),
            H,
            D,
            PAGE,
            BLOCK_N,
            ROWS,
            PAGE_BLOCK,
            KEY_FP8,
        )


# KEY_FP8: 0 bf16 keys; FP8_WIDEN fp8 keys and q widened to fp16 for the product; FP8_MMA fp8 product.
FP8_WIDEN = 1
FP8_MMA = 2

AOT_SIGNATURES = {
    "paged_mqa_logits_kernel": {
        "q_ptr": "*bf16:16",
        "stride_q_row": "i32:16",
        "k_ptr": "*bf16:16",
        "stride_page": "i32:16",
        "w_ptr": "*fp32:16",
        "stride_w_row": "i32:16",
        "seq_lens_ptr": "*i32:16",
        "page_table_ptr": "*i32:16",
        "stride_pt_row": "i32",
        "pt_width": "i32",
        "out_ptr": "*fp32:16",
        "stride_out_row": "i32",
        "rows": "i32",
        "max_len": "i32",
        "split": "i32",
        "min_chunk": "i32",
        "busy_programs": "i32",
    },
}
# over SGLang's fp8 pool: uint8 pages (8448 B each, so the page stride is no multiple of 16 elements
# of a 16-byte-aligned type but is of bytes), e4m3 q
AOT_SIGNATURES["paged_mqa_logits_kernel[fp8]"] = dict(
    AOT_SIGNATURES["paged_mqa_logits_kernel"], q_ptr="*fp8e4nv:16", k_ptr="*u8:16"
)


def pick_split(groups: int, max_len: int, block_n: int, target_programs: int, max_chunk: int) -> int:
    """Parts per row group: as many as keep the grid within ``target_programs`` (whole
    waves of resident programs, so equal parts of equal rows finish together), but at
    least ``max_len / max_chunk`` (a long row among short ones is still spread out), and
    no more than the widest row has tiles. The grid depends on host values only (not on
    the lengths on the device), so it is the same for every replay of a CUDA graph."""
    want = max(target_programs // max(groups, 1), triton.cdiv(max_len, max_chunk))
    return max(1, min(want, triton.cdiv(max_len, block_n)))  # type: ignore[no-any-return]  # triton: untyped


def _checked_q(q: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """q as [R, H, 128] of ``dtype`` with contiguous heads."""
    check_tensor("q", q, dtypes=(dtype,), ndim=(3, 4))
    if q.dim() == 4:
        if q.shape[1] != 1:
            raise ValueError(f"q must be [R, H, 128] or [R, 1, H, 128] (next_n folded into rows), got {tuple(q.shape)}")
        q = q[:, 0]
    rows, num_heads, head_dim = q.shape
    if head_dim != INDEX_HEAD_DIM:
        raise ValueError(f"q head dim must be {INDEX_HEAD_DIM}, got {tuple(q.shape)}")
    if num_heads < 16 or num_heads & (num_heads - 1):
        raise ValueError(f"q heads must be a power of two >= 16 (tensor-core tile), got {num_heads}")
    if q.stride(1) != head_dim:
        raise ValueError(f"q heads must be contiguous, got strides {tuple(q.stride())}")
    return q


def _checked_weights(weights: torch.Tensor, rows: int, num_heads: int) -> torch.Tensor:
    """weights as [R, H] fp32 with unit head stride."""
    check_tensor("weights", weights, dtypes=(torch.float32,), ndim=(2, 3), last_dim_contiguous=False)
    if weights.dim() == 3:
        if weights.shape[2] != 1:
            raise ValueError(f"weights must be [R, H] or [R, H, 1], got {tuple(weights.shape)}")
        weights = weights[:, :, 0]
    if tuple(weights.shape) != (rows, num_heads):
        raise ValueError(f"weights must be [{rows}, {num_heads}] fp32, got {tuple(weights.shape)}")
    if weights.stride(1) != 1:
        raise ValueError(f"weights must have unit head stride, got strides {tuple(weights.stride())}")
    return weights


def _checked_args(
    q: torch.Tensor,
    index_k_cache: torch.Tensor,
    weights: torch.Tensor,
    seq_lens: torch.Tensor,
    page_table: torch.Tensor,
    max_seq_len: int,
    out: torch.Tensor | None,
    rows_per_program: int,
    key_fp8: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Validate the launcher's arguments; returns them in the kernel's layout."""
    q = _checked_q(q, torch.float8_e4m3fn if key_fp8 else torch.bfloat16)
    rows, num_heads, head_dim = q.shape
    as_pages = as_fp8_index_k_pages if key_fp8 else as_index_k_pages
    pages = as_pages("index_k_cache", index_k_cache, page_size=INDEX_PAGE_SIZE)
    weights = _checked_weights(weights, rows, num_heads)
    seq_lens = as_index_vector("seq_lens", seq_lens, rows)
    if seq_lens.dtype != torch.int32:
        seq_lens = seq_lens.to(torch.int32)
    check_tensor("page_table", page_table, dtypes=(torch.int32, torch.int64), ndim=(2,))
    if page_table.shape[0] != rows:
        raise ValueError(f"page_table must have {rows} rows (one per query row), got {tuple(page_table.shape)}")
    if not isinstance(max_seq_len, int) or max_seq_len < 0:
        raise ValueError(f"max_seq_len must be a non-negative python int, got {max_seq_len!r}")
    if rows_per_program not in (1, 2, 4):
        raise ValueError(f"rows_per_program must be 1, 2 or 4, got {rows_per_program!r}")
    if out is None:
        out = torch.empty((rows, max_seq_len), dtype=torch.float32, device=q.device)
    else:
        check_tensor("out", out, dtypes=(torch.float32,), ndim=(2,))
        if tuple(out.shape) != (rows, max_seq_len):
            raise ValueError(f"out must be [{rows}, {max_seq_len}] fp32, got {tuple(out.shape)}")
    check_same_device(q=q, index_k_cache=pages, weights=weights, seq_lens=seq_lens, page_table=page_table, out=out)
    return q, pages, weights, seq_lens, out


def paged_mqa_logits(
    q: torch.Tensor,
    index_k_cache: torch.Tensor,
    weights: torch.Tensor,
    seq_lens: torch.Tensor,
    page_table: torch.Tensor,
    max_seq_len: int,
    *,
    out: torch.Tensor | None = None,
    block_n: int,
    target_programs: int,
    max_chunk: int = 16384,
    min_chunk: int = 0,
    page_block: int = 0,
    busy_programs: int = 0,
    rows_per_program: int = 1,
    item_grid: bool = False,
    num_warps: int,
    num_stages: int,
    key_fp8: bool = False,
    fp8_mma: bool = False,
    interleaved: bool = False,
    scales_ahead: bool = False,
    direct_store: bool = False,
    ids_ahead: int = 1,
) -> torch.Tensor:
    """Launcher; see the module docstring (columns past each row's length are not written).

    ``key_fp8``: SGLang's fp8 index-K pool as stored (uint8 [num_pages, 64, 1, 132]: per page 64
    rows of 128 e4m3 values, then 64 fp32 scales) and fp8 e4m3 q, the arguments SGLang's
    ``fp8_paged_mqa_logits_torch_sm120`` / ``tilelang_fp8_paged_mqa_logits`` take; logits
    ``sum_h relu(q_h . k) * w_h * scale(k)``. Both are widened to fp16 in registers (exact) for
    the product, or (``fp8_mma``) multiplied on fp8 tensor cores as stored (fp32 accumulation; on
    Hopper its wgmma keeps fewer accumulator bits, see NOTES.md).

    q: [R, H, 128] or [R, 1, H, 128] bf16 (SGLang passes ``q_indexer.unsqueeze(1)``), each
    row's H*128 values contiguous. index_k_cache: the layer's bf16 index-K pages (see
    ``_validate.as_index_k_pages``; page size 64). weights: [R, H] or [R, H, 1] fp32, unit
    head stride. seq_lens: [R] or [R, 1] int32/int64 (compressed lengths). page_table:
    [R, W] int32/int64 page ids, unit column stride; entries at or beyond a row's
    ceil(n_write/64) are never read. max_seq_len: python int, the output width.
    Returns fp32 [R, max_seq_len] (or fills ``out`` of that shape, unit column stride).
    ``item_grid`` (one row per program only): one program per part of one batch-wide chunk size
    (total keys / ``busy_programs``, at least ``min_chunk``), ``busy_programs + rows`` programs,
    instead of the (rows, split) grid.
    ``interleaved`` (one row per program, 64-key tiles, few rows): program (row, part) of the (rows,
    split) grid, split = ``target_programs / rows``, takes the row's pages part, part + split, ... (see
    ``_interleaved_part``); max_chunk, min_chunk, page_block and busy_programs do not apply.
    ``scales_ahead`` (fp8 keys, not interleaved): each tile's key scales are loaded one tile ahead (see
    ``_one_row``); with page_block 0 (64-key tiles), each tile's page id too, one scalar load
    (``_page_tiles``).
    ``direct_store``: each tile's logits are stored from the product's layout (``store_logits``; bit for bit
    what ``tl.store`` writes, ``tests/gpu/test_logits_direct_store_gpu.py``, passed on an H100). Under Triton's
    interpreter (it runs no PTX) and in prefill's row groups, ``tl.store``.
    ``ids_ahead`` (1, 2, or 3 with fp8 keys; one-page tiles: interleaved parts, or one row per program with
    page_block 0 and 64-key tiles, fp8 keys only with ``scales_ahead``): how many tiles ahead each page id is
    loaded (``_page_tiles``); at 3 each tile's scales two ahead too. Other tilings (prefill's row groups included)
    ignore it.
    """
    q, pages, weights, seq_lens, out = _checked_args(
        q, index_k_cache, weights, seq_lens, page_table, max_seq_len, out, rows_per_program, key_fp8
    )
    rows, num_heads, head_dim = q.shape
    if rows == 0 or max_seq_len == 0:
        return out
    if page_block and (page_block & (page_block - 1) or page_block * INDEX_PAGE_SIZE % block_n):
        raise ValueError(f"page_block must be a power of two covering whole {block_n}-key tiles, got {page_block}")
    if item_grid and (rows_per_program != 1 or busy_programs < 1):
        raise ValueError(
            f"the item grid takes one row per program and needs busy_programs >= 1, got "
            f"rows_per_program={rows_per_program}, busy_programs={busy_programs}"
        )
    if interleaved and (rows_per_program != 1 or item_grid or block_n != INDEX_PAGE_SIZE):
        raise ValueError(
            f"interleaved parts take one row per program on the (rows, split) grid and {INDEX_PAGE_SIZE}-key "
            f"tiles, got rows_per_program={rows_per_program}, item_grid={item_grid}, block_n={block_n}"
        )
    if scales_ahead and (
        not key_fp8 or interleaved or rows_per_program != 1 or (not page_block and block_n != INDEX_PAGE_SIZE)
    ):
        raise ValueError(
            f"scales_ahead takes fp8 keys, one row per program, not interleaved, and page ids in blocks "
            f"(page_block > 0) or {INDEX_PAGE_SIZE}-key tiles, got key_fp8={key_fp8}, interleaved={interleaved}, "
            f"page_block={page_block}, block_n={block_n}, rows_per_program={rows_per_program}"
        )
    if ids_ahead not in (1, 2, 3) or (ids_ahead == 3 and not key_fp8):
        raise ValueError(f"ids_ahead must be 1 or 2 (tiles), or 3 with fp8 keys, got {ids_ahead} (key_fp8={key_fp8})")
    min_chunk = triton.cdiv(max(min_chunk, 0), block_n) * block_n  # parts start on tile boundaries
    groups = triton.cdiv(rows, rows_per_program)
    if interleaved:  # every part one page at a time: at most as many parts as the output has pages
        split = max(1, min(target_programs // rows, triton.cdiv(max_seq_len, INDEX_PAGE_SIZE)))
    else:
        split = pick_split(groups, max_seq_len, block_n, target_programs, max_chunk)
    # item grid: the parts number at most busy_programs + rows (each row's last part may be short)
    grid = (busy_programs + rows, 1) if item_grid else (groups, split)
    paged_mqa_logits_kernel[grid](
        q,
        q.stride(0),
        pages,
        pages.stride(0),
        weights,
        weights.stride(0),
        seq_lens,
        page_table,
        page_table.stride(0),
        page_table.shape[1],
        out,
        out.stride(0),
        rows,
        max_seq_len,
        split,
        min_chunk,
        max(busy_programs, 1),
        H=num_heads,
        D=head_dim,
        PAGE=INDEX_PAGE_SIZE,
        BLOCK_N=block_n,
        ROWS=rows_per_program,
        PAGE_BLOCK=page_block,
        BALANCE=busy_programs > 0 and rows_per_program == 1,
        ITEM_GRID=item_grid,
        KEY_FP8=(FP8_MMA if fp8_mma else FP8_WIDEN) if key_fp8 else 0,
        INTERLEAVED=interleaved,
        SCALES_AHEAD=scales_ahead,
        # the interpreter runs no PTX: tl.store there
        DIRECT_STORE=direct_store and not interpreted(paged_mqa_logits_kernel),
        IDS_AHEAD=ids_ahead,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return out
