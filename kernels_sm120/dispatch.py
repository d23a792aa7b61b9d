"""Per-architecture launch configurations and the public entry points.

The architecture is read from the tensors' device at call time
(``torch.cuda.get_device_capability(device)``), never at import, so importing this
module touches no GPU. CPU tensors (Triton's interpreter, used by the CPU tests) get
the portable default.

Every SM120 configuration must fit 101376 B (99 KiB) of shared memory per block and
use mma.sync only; ``python -m kernels_sm120.aot`` compiles each configuration below
for sm_120a / sm_100a / sm_90a and prints the shared memory it needs.
"""

import dataclasses
import functools
from dataclasses import dataclass

import torch

from . import index_k_store, index_q
from . import paged_mqa_logits as logits_mod

SM120_MAX_SHARED_BYTES = 101376


@dataclass(frozen=True)
class StoreConfig:
    """index-K store: rows per tile; the grid is persistent, at most programs_per_sm
    programs per SM, each loading the norm weight once and looping over tiles."""

    block_m: int
    num_warps: int
    num_stages: int = 1
    programs_per_sm: int = 4
    prefetch: bool = True


@dataclass(frozen=True)
class ScatterConfig:
    """index-K scatter of transformed rows: rows per program."""

    block_m: int
    num_warps: int
    num_stages: int = 1


@dataclass(frozen=True)
class QConfig:
    """index-Q: (token, head) rows per tile; persistent grid as for the store."""

    block_m: int
    num_warps: int
    num_stages: int = 1
    programs_per_sm: int = 4
    prefetch: bool = True
    one_token_tiles: bool = True
    streaming: bool = False  # q loads evict-first, q_out stores .cs


@dataclass(frozen=True)
class LogitsConfig:
    """paged MQA logits: keys per tl.dot (block_n: a power of two >= 16, need not be
    whole 64-slot pages), pipeline depth (num_stages), the grid's size in resident
    programs per SM (each row's keys are split on the device into that many parts per
    row group, see ``paged_mqa_logits.pick_split``) and the query rows one program takes
    (rows_per_program: 1, or 2 / 4 to share each key tile between the rows of one
    request in prefill). max_chunk bounds the keys of one part: a row as long as the output
    is wide still gets max_seq_len / max_chunk parts, so one long row in a batch of short
    ones does not run on a few programs; min_chunk (keys) keeps short rows on few programs
    (the other parts of such a row return at once). page_block > 0 (decode tiling): page ids
    are loaded that many at a time into registers and each key tile gathers its own from
    them, so no key load waits on a page-id load inside the pipelined loop. busy_per_sm > 0
    (one row per program): every program sums the batch's lengths and uses one chunk size,
    total keys / (busy_per_sm x SMs), so about that many programs have work whatever the
    lengths (long parts for big batches, many small ones for a few long rows). item_grid (one
    row per program, needs busy_per_sm): one program per such part (busy_per_sm x SMs + rows
    programs) instead of the (rows, split) grid, most of which has no work for many rows."""

    block_n: int
    num_warps: int
    num_stages: int
    programs_per_sm: int = 2
    rows_per_program: int = 1
    max_chunk: int = 16384
    min_chunk: int = 0
    page_block: int = 0
    busy_per_sm: int = 0
    item_grid: bool = False
    fp8_mma: bool = False  # fp8 keys: the product on fp8 tensor cores (else widened to fp16)
    # few rows (one row per program, 64-key tiles): part j of a row takes its pages j, j + split, ...
    # (split = programs_per_sm x SMs / rows), so its first page id is read beside the row's length
    interleaved: bool = False
    # fp8 keys: each tile's key scales loaded one tile ahead (the pipeliner streams only the key tiles)
    scales_ahead: bool = False
    # each tile's logits stored from the product's layout (no layout change through shared memory first; CUDA only)
    direct_store: bool = False
    # one page per tile (interleaved parts; one row per program, page_block 0, 64-key tiles, fp8 keys only with
    # scales ahead): each page id loaded this many tiles ahead (1, 2, or 3 with fp8 keys); at 2 no tile's cp.async
    # (nor, fp8, its scales' load) waits for an id just issued; at 3 each tile's fp8 scales are loaded two tiles
    # ahead too
    ids_ahead: int = 1


@dataclass(frozen=True)
class ArchConfigs:
    name: str
    store: StoreConfig
    scatter: ScatterConfig
    q: QConfig
    logits: LogitsConfig  # fewer than prefill_min_rows query rows (decode)
    logits_prefill: LogitsConfig  # prefill_min_rows or more (prefill: rows of one request share pages)
    prefill_min_rows: int = 512
    # decode with at most few_rows_max rows (a few long rows: no empty programs in a (rows, split)
    # grid, smaller tiles spread them further); None: ``logits`` for every decode batch
    logits_few_rows: LogitsConfig | None = None
    few_rows_max: int = 8
    # fp8 keys (SGLang's stock pool, 132 B per key): decode tilings of their own where set, else
    # the bf16 ones (prefill always shares the bf16 tiling)
    logits_fp8: LogitsConfig | None = None
    logits_fp8_few_rows: LogitsConfig | None = None
    logits_fp8_prefill: LogitsConfig | None = None
    # one query row (a single decode request: no shorter row beside it can leave programs idle), per key
    # type; None: the few-row tiling
    logits_one_row: LogitsConfig | None = None
    logits_fp8_one_row: LogitsConfig | None = None

    def logits_for(self, rows: int, key_fp8: bool = False) -> LogitsConfig:
        """The tiling the launcher uses for ``rows`` query rows (``key_fp8``: over fp8 keys)."""
        if rows >= self.prefill_min_rows:
            return (self.logits_fp8_prefill if key_fp8 else None) or self.logits_prefill
        one = (self.logits_fp8_one_row if key_fp8 else self.logits_one_row) if rows == 1 else None
        if one is not None:
            return one
        few = rows <= self.few_rows_max  # each key type's few-row tiling where it has one
        if key_fp8:
            fp8 = (self.logits_fp8_few_rows if few else None) or self.logits_fp8
            if fp8 is not None:
                return fp8
        return self.logits_few_rows if few and self.logits_few_rows is not None else self.logits


# Shared memory per block (bytes) for the logits kernel is about
# 16 KiB (q^T) + num_stages * block_n * 256 (key tiles); see NOTES.md for the AOT numbers.
# store / q (v4, butterfly Hadamard): 16-row tiles, 2 warps, next tile prefetched; 128 (store)
# / 115 (q) registers per thread (AOT, triton 3.6; same on sm_120a), so 8 such 64-thread programs
# fill an SM's 64K registers: 8 per SM = one persistent wave. Measured on the H200 (NOTES.md).
_PERSISTENT_STORE = StoreConfig(block_m=16, num_warps=2, programs_per_sm=8)
_PERSISTENT_Q = QConfig(block_m=16, num_warps=2, programs_per_sm=8)
_SCATTER = ScatterConfig(block_m=32, num_warps=4)
# index-Q on Hopper-class parts: no prefetch (73 registers), 12 programs per SM: 1.5-2% over the
# prefetching tiling at 34 MB and 1.1 GB in two H200 calls (NOTES.md, the decode tilings).
_HOPPER_CLASS_Q = QConfig(block_m=16, num_warps=2, programs_per_sm=12, prefetch=False)
# H100/H200: 228 KiB shared memory per SM, wgmma. Decode logits (v3, NOTES.md): the item grid, one
# program per part of the batch's total keys / (2 x SMs), at least 256 keys, 128-key tiles, 3 stages
# (2 x 32 KiB key tiles in flight + q = 113 KiB, two programs per SM), page ids 64 at a time. Up to 8
# rows: the (rows, split) grid (no program without work there) with 64-key tiles, 4 stages. Prefill:
# four rows per program share each key tile (64-key tiles, q^T of 4 rows = 64 KiB). All picked by
# the sweeps in benchmarks/kernels.py (NOTES.md, logits v2 and v3).
_HOPPER_CLASS_LOGITS = LogitsConfig(
    block_n=128,
    num_warps=4,
    num_stages=3,
    programs_per_sm=2,
    max_chunk=8192,
    min_chunk=256,
    page_block=64,
    busy_per_sm=2,
    item_grid=True,
)
# One to eight rows, bf16 keys: interleaved parts (part j takes the row's pages j, j + split, ...: its first page id is
# read beside the row's length), 2 stages, 4 programs per SM, each page id two tiles ahead. The H200 calls of NOTES.md
# ("One run of every kernel"; ids one tile ahead then): 2 x 8K 6.42 -> 5.48 us, 4 x 8K 8.04 -> 6.65, 8 x 8K 10.39 ->
# 8.94 (TileLang fp8 8.46), 8 x 32K 23.0 -> 22.0, 8 x 64K 41.0 -> 40.0 against the (rows, split) grid with 64-key parts;
# a long row beside short ones loses some (its parts are fixed on the host at 1 / rows of the programs): 1 x 64K + 7 x
# 2K 23.0 -> 25.4 us (TileLang fp8 34.4), 1 x 64K + 3 x 2K 16.7 -> 17.1. Ids two tiles ahead, one H100 sweep (NOTES.md,
# "Page ids two tiles ahead"): 1.3-2.4% faster at all six of its shapes (one and eight rows); one row too, where it is
# also 0.8-2.7% faster than the one-row tiling until then (4 stages, 2 programs per SM, chosen on the H200: 1 x 2K 4.08
# -> 4.04 us, 1 x 8K 4.93 -> 4.89, 1 x 64K 10.90 -> 10.61). Not timed on the H200 or on sm100.
_HOPPER_CLASS_FEW_ROWS = LogitsConfig(64, 4, 2, programs_per_sm=4, interleaved=True, ids_ahead=2)
_HOPPER_CLASS_ONE_ROW = _HOPPER_CLASS_FEW_ROWS
# fp8 keys (SGLang's stock pool): the product on fp8 tensor cores (wgmma QGMMA on sm90, mma.sync QMMA on
# sm_120a). Widened to fp16, the kernel ran no faster over fp8 keys than over bf16 keys (the H200 call
# of NOTES.md, "fp8 logits"): the fp16 product, not the bytes, was its limit. Decode: the item grid
# with 64-key tiles, four busy programs per SM, 128-key parts, three stages and each tile's key scales
# loaded one tile ahead (they were a plain load in the tile's own iteration, so every tile waited one
# memory round trip after its product): 6-9% faster than the same tiling without from 34 MB to 1.1 GB in
# two H200 calls (NOTES.md, "scales ahead"); six busy programs per SM and 128-key tiles were slower.
# Each tile is one page whose id is one scalar load, one tile ahead (page_block 0): the page-id blocks
# gave each tile its ids through shared memory, six barriers per tile in the sm_90a SASS against two now
# (ten against four on sm_120a). One H100 call (NOTES.md, "One page per tile"): 128 x 64K 423 -> 403 us,
# 64 x 64K 216 -> 207, 128 x 16K 112 -> 109, 64 x 2K 12.5 -> 12.3; four stages, three or six busy
# programs per SM were slower. Mixed-length batches, two runs on the same kind of card: 13-15% faster (64 rows
# of 1K..64K 107 -> 93 us).
_HOPPER_CLASS_FP8 = LogitsConfig(
    block_n=64,
    num_warps=4,
    num_stages=3,
    min_chunk=128,
    busy_per_sm=4,
    item_grid=True,
    fp8_mma=True,
    scales_ahead=True,
)
# One row, fp8 keys: interleaved parts, 3 stages, 4 programs per SM: 1 x 2K 4.88 -> 4.20 us, 1 x 8K 5.10 ->
# 4.40, 1 x 64K 8.6 -> 7.2 (the grid with scales ahead: 4.6, 4.8, 8.2). Two stages or two programs per SM:
# 0.1 us faster at 1 x 2K, 7-17% slower at 1 x 64K (NOTES.md, "interleaved parts"). With the parts past the
# row's pages returning after the length and each tile's scales loaded beside its key tile (NOTES.md, "The
# one-row chain"), at the decode graph's width: 1 x 2K 4.26 -> 3.78 us (TileLang 3.82), 1 x 8K 4.46 -> 4.13
# (TileLang 3.98), 1 x 64K 7.29 -> 6.83 (TileLang 8.47).
_HOPPER_CLASS_FP8_ONE_ROW = LogitsConfig(64, 4, 3, programs_per_sm=4, interleaved=True, fp8_mma=True)
# Two to eight rows, fp8 keys: the one-row tiling (interleaved parts). Against the (rows, split) grid with 64-key parts
# and the scales ahead, its tiling until then, in one H100 call (NOTES.md, "fp8 few rows interleaved"): 2 x 8K 5.70 ->
# 4.74 us, 4 x 8K 6.73 -> 5.90, 4 x 32K 11.95 -> 10.88, 8 x 8K 9.07 -> 7.82 (TileLang fp8 9.00 in the last run), a
# long row beside one or three short ones 9.86 -> 8.80 / 13.22 -> 11.77; beside seven 15.97 -> 17.02 (TileLang
# 33.77): the long row's parts are fixed on the host at 1 / rows of the programs.
_HOPPER_CLASS_FP8_FEW_ROWS = _HOPPER_CLASS_FP8_ONE_ROW
_HOPPER_CLASS_PREFILL = LogitsConfig(block_n=64, num_warps=4, num_stages=3, programs_per_sm=1, rows_per_program=4)

CONFIGS: dict[str, ArchConfigs] = {
    "sm90": ArchConfigs(
        name="sm90",
        store=_PERSISTENT_STORE,
        scatter=_SCATTER,
        q=_HOPPER_CLASS_Q,
        logits=_HOPPER_CLASS_LOGITS,
        logits_prefill=_HOPPER_CLASS_PREFILL,
        logits_few_rows=_HOPPER_CLASS_FEW_ROWS,
        logits_fp8=_HOPPER_CLASS_FP8,
        logits_fp8_few_rows=_HOPPER_CLASS_FP8_FEW_ROWS,
        logits_fp8_prefill=dataclasses.replace(_HOPPER_CLASS_PREFILL, fp8_mma=True),
        logits_one_row=_HOPPER_CLASS_ONE_ROW,
        logits_fp8_one_row=_HOPPER_CLASS_FP8_ONE_ROW,
    ),
    # B200/GB200 (sm_100a): 228 KiB per SM like Hopper; Triton lowers tl.dot to tcgen05.
    # Not measured here: same tiling as sm90.
    "sm100": ArchConfigs(
        name="sm100",
        store=_PERSISTENT_STORE,
        scatter=_SCATTER,
        q=_HOPPER_CLASS_Q,
        logits=_HOPPER_CLASS_LOGITS,
        logits_prefill=_HOPPER_CLASS_PREFILL,
        logits_few_rows=_HOPPER_CLASS_FEW_ROWS,
        logits_fp8=_HOPPER_CLASS_FP8,
        logits_fp8_few_rows=_HOPPER_CLASS_FP8_FEW_ROWS,
        logits_fp8_prefill=dataclasses.replace(_HOPPER_CLASS_PREFILL, fp8_mma=True),
        logits_one_row=_HOPPER_CLASS_ONE_ROW,
        logits_fp8_one_row=_HOPPER_CLASS_FP8_ONE_ROW,
    ),
    # RTX PRO 6000 / RTX 50xx (sm_120a): 99 KiB per block, ~100 KiB per SM, mma.sync only.
    # Logits: 3 stages of 16 KiB key tiles with q (48.5 KiB) fit twice per SM; ~1.8 TB/s over
    # 188 SMs needs ~10 KiB in flight per SM, well covered. Prefill: two rows per program (q^T
    # 32 KiB). Store / q: the H200's tiling (1 KiB shared memory per program on sm_120a).
    # Executed on the H200 by the GPU tests and the benchmark (forced), not on an SM120 card.
    "sm120": ArchConfigs(
        name="sm120",
        store=_PERSISTENT_STORE,
        scatter=_SCATTER,
        q=_PERSISTENT_Q,
        logits=LogitsConfig(
            block_n=64,
            num_warps=4,
            num_stages=3,
            programs_per_sm=2,
            max_chunk=8192,
            min_chunk=256,
            page_block=64,
            busy_per_sm=4,
        ),
        logits_prefill=LogitsConfig(block_n=64, num_warps=4, num_stages=3, programs_per_sm=1, rows_per_program=2),
        # fp8 keys on mma.sync e4m3 (QMMA.16832): the H200's fp8 tilings (8 KiB key tiles; AOT sm_120a
        # in NOTES.md), not measured on an SM120 card
        logits_fp8=_HOPPER_CLASS_FP8,
        logits_fp8_few_rows=_HOPPER_CLASS_FP8_FEW_ROWS,
        # one row, bf16 keys: the H200's interleaved parts with 3 stages (q + 2 key tiles = 48.5 KiB: two
        # programs per SM, as the decode tiling; 4 stages need 64.5 KiB, one)
        logits_one_row=LogitsConfig(64, 4, 3, programs_per_sm=2, interleaved=True),
        logits_fp8_one_row=_HOPPER_CLASS_FP8_ONE_ROW,
        logits_fp8_prefill=LogitsConfig(
            block_n=64, num_warps=4, num_stages=3, programs_per_sm=1, rows_per_program=2, fp8_mma=True
        ),
    ),
    # Anything else (sm80/sm86/sm89, sm110, the CPU interpreter): small, safe tiles.
    "default": ArchConfigs(
        name="default",
        store=StoreConfig(block_m=16, num_warps=4),
        scatter=ScatterConfig(block_m=16, num_warps=4),
        q=QConfig(block_m=16, num_warps=4),
        logits=LogitsConfig(block_n=64, num_warps=4, num_stages=2, page_block=16),
        logits_prefill=LogitsConfig(block_n=64, num_warps=4, num_stages=2, programs_per_sm=1, rows_per_program=2),
    ),
}


def arch_key(capability: tuple[int, int] | None) -> str:
    """(major, minor) -> a CONFIGS key. None (no CUDA device) -> "default"."""
    if capability is None:
        return "default"
    major, _minor = capability
    if major == 9:
        return "sm90"
    if major == 10:
        return "sm100"
    if major == 12:
        return "sm120"
    return "default"


@functools.cache
def _cuda_props(index: int) -> tuple[tuple[int, int], int]:
    props = torch.cuda.get_device_properties(index)
    return (props.major, props.minor), props.multi_processor_count


def configs_for(device: torch.device) -> ArchConfigs:
    """The configuration set for tensors on ``device`` (read at call time)."""
    if device.type != "cuda":
        return CONFIGS["default"]
    index = device.index if device.index is not None else torch.cuda.current_device()
    return CONFIGS[arch_key(_cuda_props(index)[0])]


def num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 4  # the interpreter: any small number gives short chunks
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _cuda_props(index)[1]


def store_index_k_bf16(
    kv: torch.Tensor,
    norm_weight: torch.Tensor,
    norm_eps: float,
    freqs_cis: torch.Tensor,
    positions: torch.Tensor,
    out_loc: torch.Tensor,
    index_k_cache: torch.Tensor,
    *,
    page_size: int = 64,
    config: StoreConfig | None = None,
) -> None:
    """Fused RMSNorm + RoPE + Hadamard + bf16 scatter into one layer's index-K cache.
    Shapes: see ``kernels_sm120`` (package docstring)."""
    cfg = config or configs_for(kv.device).store
    index_k_store.store_index_k_norm_rope_hadamard(
        kv,
        norm_weight,
        norm_eps,
        freqs_cis,
        positions,
        out_loc,
        index_k_cache,
        page_size=page_size,
        block_m=cfg.block_m,
        max_programs=cfg.programs_per_sm * num_sms(kv.device),
        prefetch=cfg.prefetch,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )


def scatter_index_k_bf16(
    rows_bf16: torch.Tensor,
    out_loc: torch.Tensor,
    index_k_cache: torch.Tensor,
    *,
    page_size: int = 64,
    config: ScatterConfig | None = None,
) -> None:
    """Scatter already-transformed bf16 rows into one layer's index-K cache."""
    cfg = config or configs_for(rows_bf16.device).scatter
    index_k_store.scatter_index_k_rows(
        rows_bf16,
        out_loc,
        index_k_cache,
        page_size=page_size,
        block_m=cfg.block_m,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )


def index_q_bf16(
    q: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: float,
    freqs_cis: torch.Tensor,
    positions: torch.Tensor,
    *,
    num_heads: int = 64,
    q_out: torch.Tensor | None = None,
    weights_out: torch.Tensor | None = None,
    config: QConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """bf16 indexer q (RoPE + Hadamard) and fp32 head weights (weight * weight_scale)."""
    cfg = config or configs_for(q.device).q
    return index_q.index_q_rope_hadamard(
        q,
        weight,
        weight_scale,
        freqs_cis,
        positions,
        num_heads=num_heads,
        q_out=q_out,
        weights_out=weights_out,
        block_m=cfg.block_m,
        max_programs=cfg.programs_per_sm * num_sms(q.device),
        prefetch=cfg.prefetch,
        one_token_tiles=cfg.one_token_tiles,
        streaming=cfg.streaming,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )


def paged_mqa_logits_bf16(
    q: torch.Tensor,
    index_k_cache: torch.Tensor,
    weights: torch.Tensor,
    seq_lens: torch.Tensor,
    page_table: torch.Tensor,
    max_seq_len: int,
    *,
    out: torch.Tensor | None = None,
    config: LogitsConfig | None = None,
) -> torch.Tensor:
    """fp32 [rows, max_seq_len] logits over bf16 paged index-K. Writes columns below
    min(seq_lens[r], max_seq_len) only (what SGLang's top-k transforms read; see
    ``paged_mqa_logits``). ``config`` None: the device's tiling for the row count
    (``ArchConfigs.logits_for``: prefill, few-row decode or decode)."""
    return _logits(q, index_k_cache, weights, seq_lens, page_table, max_seq_len, out, config, key_fp8=False)


def paged_mqa_logits_fp8(
    q_fp8: torch.Tensor,
    kvcache_fp8: torch.Tensor,
    weights: torch.Tensor,
    seq_lens: torch.Tensor,
    page_table: torch.Tensor,
    max_seq_len: int,
    *,
    out: torch.Tensor | None = None,
    config: LogitsConfig | None = None,
) -> torch.Tensor:
    """fp32 [rows, max_seq_len] logits over SGLang's fp8 index-K pool as stored (uint8
    [num_pages, 64, 1, 132]) with fp8 e4m3 q [R, 1, H, 128]: the arguments and the numbers of
    SGLang's ``fp8_paged_mqa_logits_torch_sm120`` (``sum_h relu(q_h . k) * w_h`` times the key's
    scale). Same output contract as ``paged_mqa_logits_bf16``."""
    return _logits(q_fp8, kvcache_fp8, weights, seq_lens, page_table, max_seq_len, out, config, key_fp8=True)


def _logits(
    q: torch.Tensor,
    index_k_cache: torch.Tensor,
    weights: torch.Tensor,
    seq_lens: torch.Tensor,
    page_table: torch.Tensor,
    max_seq_len: int,
    out: torch.Tensor | None,
    config: LogitsConfig | None,
    *,
    key_fp8: bool,
) -> torch.Tensor:
    if config is None:
        config = configs_for(q.device).logits_for(q.shape[0], key_fp8)
    return logits_mod.paged_mqa_logits(
        q,
        index_k_cache,
        weights,
        seq_lens,
        page_table,
        max_seq_len,
        out=out,
        block_n=config.block_n,
        target_programs=config.programs_per_sm * num_sms(q.device),
        max_chunk=config.max_chunk,
        min_chunk=config.min_chunk,
        page_block=config.page_block,
        busy_programs=config.busy_per_sm * num_sms(q.device),
        rows_per_program=config.rows_per_program,
        item_grid=config.item_grid,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
        key_fp8=key_fp8,
        fp8_mma=key_fp8 and config.fp8_mma,
        interleaved=config.interleaved,
        scales_ahead=key_fp8 and config.scales_ahead,
        direct_store=config.direct_store,
        ids_ahead=config.ids_ahead,
    )
