"""bf16 index-K storage in DSV4's indexer pool, and the startup sizing self-check.

Why: stock SGLang stores index-K only as fp8 + fp32 scale (132 B per token per c4 layer)
or fp4 (68 B); a bf16 index-K (256 B, no scale) gives better long-context recall of the
top-512 selection. Every place that sizes, copies or ships index-K must then agree with
what is allocated, byte for byte.

How: an AROUND hook on ``DeepSeekV4TokenToKVPool._make_indexer_pool`` (the factory SGLang
documents as the override point) returns :class:`DeepSeekV4Bf16IndexerPool`
for the c4 indexer when the effective index-K dtype is bf16 (decided at pool creation).
The subclass keeps SGLang's attribute ``index_k_with_scale_buffer`` as a list of one 2-D
uint8 tensor ``[pages, 64*256]`` per c4 layer, so PD (``get_contiguous_buf_infos``,
``_mla_slice_ptrs_for_pp``) and HiCache (``_dsv4_indexer_regions``) derive sizes from the
buffers unchanged. Writers that only know the fp8/fp4 layouts raise on it. An AFTER hook on
``DeepSeekV4TokenToKVPool.__init__`` compares the index-K bytes actually allocated per full
token with what the configurator budgeted and refuses to continue on a mismatch (for
DeepSeek-V4.1 also the ratio-1/2 index-K pools of the kv_source layers, which stay fp4 whatever
the dtype: SGLang builds them with ``force_fp4=True``); it also announces the new pool
(:mod:`sglang_dsv4_ext.runtime.index_k.pool_lifecycle`), so the index-K read gate can link the sub-pools.

Upstream status: no bf16 index-K upstream (https://github.com/sgl-project/sglang/pull/33413 keeps the
indexer quantized).
Retire when: SGLang ships a bf16 DSV4 index-K with matching sizing.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from fractions import Fraction
from typing import TYPE_CHECKING, Any, NoReturn

import torch

from sglang_dsv4_ext.config import ENV_FP4_BUDGET, ENV_INDEX_K_DTYPE, Fp4Budget, IndexKDtype, load_config
from sglang_dsv4_ext.errors import DSV4IndexKLayoutError, IndexKSizingError
from sglang_dsv4_ext.runtime import compat
from sglang_dsv4_ext.runtime.index_k import budget as index_k_budget
from sglang_dsv4_ext.runtime.index_k import pool_lifecycle
from sglang_dsv4_ext.runtime.index_k.dtype import (
    bf16_page_view,
    effective_index_k_dtype,
    index_k_bytes_per_token,
    pool_index_k_dtype,
)
from sglang_dsv4_ext.runtime.record_names import NONE_BUILT

if TYPE_CHECKING:
    from sglang_dsv4_ext.runtime.hooks import Hook, HookContext, ProcessRecord
    from sglang_dsv4_ext.runtime.sglang_types import DSV4TokenToKVPool, GroupCoordinator, IndexerSubPool

logger = logging.getLogger(__name__)


class _Bf16IndexKPoolMethods:
    """What the bf16 c4 indexer pool adds to SGLang's ``DeepSeekV4IndexerPool`` (mixed in first).

    Page row = 64 slots x 128 x 2 B = 16384 B.
    """

    index_k_dtype = IndexKDtype.BF16
    # DeepSeekV4IndexerPool's, read by the methods below (declared for the type checker only).
    page_size: int
    index_head_dim: int
    start_layer: int
    index_k_with_scale_buffer: list[torch.Tensor]

    def get_bytes_per_token(self) -> int:
        return index_k_bytes_per_token(IndexKDtype.BF16, self.index_head_dim)

    # --- bf16 accessors -------------------------------------------------------
    def index_k_bf16_pages(self, layer_id: int) -> torch.Tensor:
        """Layer ``layer_id``'s index-K as bf16 ``[pages, page_size, index_head_dim]`` (a view).

        Item access on the buffer list is gated like every sub-pool read while a HiCache
        load is pending (the gate wraps the list when the pool is announced).
        """
        return bf16_page_view(self.index_k_with_scale_buffer[layer_id], self.page_size, self.index_head_dim)

    def set_index_fused(self, layer_id: int, loc: torch.Tensor, cache_k: torch.Tensor) -> None:
        """Store already normalised/rotated index-K rows ``[N, index_head_dim]`` as bf16 at ``loc``."""
        store_rows_in_bf16_pages(
            self.index_k_with_scale_buffer[layer_id - self.start_layer],
            loc,
            cache_k,
            self.page_size,
            self.index_head_dim,
        )

    # --- fp8 / fp4 layout paths: refuse rather than write 132-B rows ------------
    def _refuse(self, what: str) -> NoReturn:
        raise DSV4IndexKLayoutError(
            f"{what} uses the fp8/fp4 index-K layout, but this pool stores bf16 index-K "
            f"(SGLANG_DSV4_INDEX_K_DTYPE=bf16, {self.get_bytes_per_token()} B per token); "
            f"use set_index_fused / the bf16 indexer path"
        )

    def set_index_k_scale_buffer(
        self, layer_id: int, loc: torch.Tensor, index_k: torch.Tensor, index_k_scale: torch.Tensor
    ) -> NoReturn:
        self._refuse("set_index_k_scale_buffer (fp8 value + scale writer)")

    def set_index_fp4(self, layer_id: int, loc: torch.Tensor, cache_k: torch.Tensor) -> NoReturn:
        self._refuse("set_index_fp4 (fp4 writer)")

    def get_index_k_scale_buffer(
        self,
        layer_id: int,
        seq_len_tensor: torch.Tensor,
        page_indices: torch.Tensor,
        seq_len_sum: int,
        max_seq_len: int,
    ) -> NoReturn:
        self._refuse("get_index_k_scale_buffer (fp8 nonpaged gather)")

    def get_index_k_fp4(self, layer_id: int, slots: torch.Tensor) -> NoReturn:
        self._refuse("get_index_k_fp4 (fp4 reader)")

    def get_index_k_dequant(self, layer_id: int, slots: torch.Tensor | None = None) -> NoReturn:
        self._refuse("get_index_k_dequant (fp4 reader)")


def _bf16_pool_class() -> type:
    """Build the subclass lazily: importing SGLang's pool module costs seconds."""
    global _BF16_POOL_CLASS
    if _BF16_POOL_CLASS is None:
        from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4IndexerPool

        _BF16_POOL_CLASS = type(
            "DeepSeekV4Bf16IndexerPool",
            (_Bf16IndexKPoolMethods, DeepSeekV4IndexerPool),
            {"__doc__": "c4 indexer pool storing index-K as bf16 (sglang-dsv4-ext)."},
        )
    return _BF16_POOL_CLASS


_BF16_POOL_CLASS: type | None = None


def store_rows_in_bf16_pages(
    page_rows: torch.Tensor, loc: torch.Tensor, rows: torch.Tensor, page_size: int, index_head_dim: int
) -> None:
    """Write ``rows`` (``[N, head_dim]``) as bf16 at compressed slots ``loc`` (slot s -> page s//P, offset s%P).

    The pool's side of the store: checks the shapes, then on CUDA calls the kernel
    ``kernels_sm120.dispatch.scatter_index_k_bf16(rows, loc, cache)`` (its own argument order), elsewhere torch.

    Negative slots are padding and are skipped. On CUDA this launches the Triton scatter
    from :mod:`kernels_sm120`; elsewhere it is the same copy in torch (bit-identical: a
    bf16 cast and a row scatter).
    """
    if rows.dim() != 2 or rows.shape[1] != index_head_dim:
        raise ValueError(f"index-K rows must be [N, {index_head_dim}], got {tuple(rows.shape)}")
    if loc.numel() != rows.shape[0]:
        raise ValueError(f"{loc.numel()} slots for {rows.shape[0]} index-K rows")
    if page_rows.is_cuda:
        from kernels_sm120 import dispatch

        dispatch.scatter_index_k_bf16(rows.to(torch.bfloat16), loc, page_rows)
        return
    flat = page_rows.view(torch.bfloat16).view(-1, index_head_dim)
    loc = loc.to(torch.long)
    keep = loc >= 0
    flat.index_copy_(0, loc[keep], rows[keep].to(torch.bfloat16))


def _around_make_indexer_pool(
    process: ProcessRecord,
    original: Callable[..., IndexerSubPool],
    self: DSV4TokenToKVPool,
    size: int,
    page_size: int,
    dtype: torch.dtype,
    index_head_dim: int,
    layer_num: int,
    device: str | torch.device,
    enable_memory_saver: bool,
    force_fp4: bool = False,
    global_page_size: int | None = None,
    **release_kwargs: Any,
) -> IndexerSubPool:
    # Low-ratio (V4.1) pools are always fp4; only the c4 indexer can be bf16. release_kwargs: what only
    # some releases pass (0.5.23's index_k_page8, for a low-ratio pool), handed on as given.
    if force_fp4 or effective_index_k_dtype(False) != IndexKDtype.BF16:
        pool = original(
            self,
            size,
            page_size,
            dtype,
            index_head_dim,
            layer_num,
            device,
            enable_memory_saver,
            force_fp4=force_fp4,
            global_page_size=global_page_size,
            **release_kwargs,
        )
        if force_fp4:
            return pool  # a low-ratio pool: not the c4 indexer the evidence reports
    else:
        pool = _bf16_pool_class()(
            size,
            page_size,
            dtype,
            index_head_dim,
            layer_num,
            device,
            enable_memory_saver,
            use_fp4_indexer=False,
            global_page_size=global_page_size,
        )
    _note_c4_indexer_pool_built(process, pool)
    return pool


def _note_c4_indexer_pool_built(process: ProcessRecord, pool: IndexerSubPool) -> None:
    """The evidence reports the dtype of the pool built, said once more where it is not what was asked."""
    built, requested = pool_index_k_dtype(pool), load_config().index_k_dtype
    if built != requested:
        logger.warning(
            "sglang-dsv4-ext: %s=%s was requested, but SGLang built a %s c4 indexer pool "
            "(--enable-deepseek-v4-fp4-indexer decides it): the record and the gauge report index_k_dtype=%s",
            ENV_INDEX_K_DTYPE,
            requested,
            built,
            built,
        )
    process.note_index_k_pool_built(built)


# --- startup self-check ------------------------------------------------------------------


def index_k_allocated_bytes_per_full_token(kv_pool: DSV4TokenToKVPool) -> Fraction:
    """Index-K bytes the c4 indexer pool allocated per full token (page rounding accounted).

    One page row holds the index-K of one full page (``global_page_size`` full tokens), so
    the per-token figure is the page-row width over the full page size, summed over layers.
    """
    index_pool = getattr(kv_pool, "index_pools", {}).get(4)
    if index_pool is None:
        return Fraction(0)
    row_bytes = sum(buf.shape[1] * buf.element_size() for buf in index_pool.contiguous_page_row_buffers())
    return Fraction(row_bytes, index_pool.global_page_size)


def check_index_k_budget(kv_pool: DSV4TokenToKVPool, *, is_draft_worker: bool = False) -> str | None:
    """Raise :class:`IndexKSizingError` if allocation != budget; return a short report."""
    budget = index_k_budget.last_budget()
    allocated = index_k_allocated_bytes_per_full_token(kv_pool)
    if budget is None:
        logger.info("index-K sizing self-check skipped: no DSV4 pool configurator ran in this process")
        return None
    index_pool = getattr(kv_pool, "index_pools", {}).get(4)
    layers = len(index_pool.contiguous_page_row_buffers()) if index_pool is not None else 0
    if is_draft_worker:
        # A draft worker's pool is budgeted through the target's (T+1)/T inflation;
        # compare what one layer allocates with what one layer was budgeted.
        if layers == 0:
            return "draft worker without a c4 index-K pool"
        allocated_per_layer = allocated / layers
        budgeted_per_layer = Fraction(budget.indexer_bytes_per_token, 4)
        if allocated_per_layer < budgeted_per_layer and _stock_fp4_estimate_in_force(kv_pool):
            return f"draft: stock fp4 estimate kept ({ENV_FP4_BUDGET}=stock)"
        if allocated_per_layer != budgeted_per_layer:
            raise IndexKSizingError(
                f"index-K allocation does not match the pool configurator's budget (draft worker): "
                f"allocated {float(allocated_per_layer):.2f} B per full token per layer, budgeted "
                f"{float(budgeted_per_layer):.2f} B"
            )
        return f"draft: {float(allocated_per_layer):.2f} B per full token per layer"
    budgeted = budget.bytes_per_full_token
    low_ratio = _check_low_ratio_index_k(kv_pool, budget)
    if allocated < budgeted and _stock_fp4_estimate_in_force(kv_pool):
        return (
            f"{float(allocated):.2f} B per full token ({layers} c4 layers) < budget {float(budgeted):.2f} B: "
            f"SGLang's stock fp4 estimate kept ({ENV_FP4_BUDGET}=stock)" + low_ratio
        )
    if allocated != budgeted:
        gap = allocated - budgeted
        raise IndexKSizingError(
            "index-K allocation does not match the pool configurator's budget: allocated "
            f"{float(allocated):.2f} B per full token ({layers} c4 layers), budgeted {float(budgeted):.2f} B "
            f"({budget.c4_index_layers} layers x {budget.indexer_bytes_per_token} B / 4); gap "
            f"{float(gap):+.2f} B per full token. The configurator and the pool disagree on index-K bytes "
            f"per token; refusing to start rather than over-commit GPU memory"
        )
    return f"{float(allocated):.2f} B per full token ({layers} c4 layers) == budget" + low_ratio


def _check_low_ratio_index_k(kv_pool: DSV4TokenToKVPool, budget: index_k_budget.IndexKBudget) -> str:
    """DeepSeek-V4.1's ratio-1/2 index-K pools: fp4 per slot and one layer per kv_source, as budgeted.

    SGLang builds them with ``force_fp4=True`` and budgets ``low_ratio_index_bytes`` (68 B) per slot;
    whatever the index-K dtype, a wider row (bf16 leaking into them) would over-commit GPU memory.
    """
    pools = {ratio: pool for ratio, pool in getattr(kv_pool, "index_pools", {}).items() if ratio in (1, 2)}
    budgeted = dict(budget.low_ratio_index_layers)
    if not pools and not budgeted:
        return ""
    found: dict[int, tuple[int, Fraction]] = {}
    for ratio, pool in pools.items():
        row_bytes = sum(buf.shape[1] * buf.element_size() for buf in pool.contiguous_page_row_buffers())
        found[ratio] = (pool.layer_num, Fraction(row_bytes, pool.page_size * max(pool.layer_num, 1)))
    expected = {ratio: (layers, Fraction(budget.low_ratio_index_bytes)) for ratio, layers in budgeted.items()}
    if found != expected:
        raise IndexKSizingError(
            f"ratio-1/2 index-K allocation does not match the pool configurator's budget: allocated "
            f"{_describe_low_ratio(found)}; budgeted {_describe_low_ratio(expected)}. SGLang sizes these pools as "
            f"fp4 whatever the index-K dtype; refusing to start rather than over-commit GPU memory"
        )
    return f"; ratio-1/2 fp4 index-K {_describe_low_ratio(found)} == budget"


def _describe_low_ratio(sizes: dict[int, tuple[int, Fraction]]) -> str:
    return ", ".join(f"r{r}: {n} x {float(b):g} B per slot" for r, (n, b) in sorted(sizes.items())) or "none"


def _stock_fp4_estimate_in_force(kv_pool: DSV4TokenToKVPool) -> bool:
    index_pool = getattr(kv_pool, "index_pools", {}).get(4)
    return bool(getattr(index_pool, "use_fp4_indexer", False)) and load_config().fp4_budget == Fp4Budget.STOCK


_POOL_INIT_SIGNATURE: inspect.Signature | None = None


def _bound_init_arguments(
    original: Callable[..., None], args: tuple[object, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    global _POOL_INIT_SIGNATURE
    if _POOL_INIT_SIGNATURE is None:
        _POOL_INIT_SIGNATURE = inspect.signature(original)
    bound = _POOL_INIT_SIGNATURE.bind(*args, **kwargs)
    bound.apply_defaults()
    return bound.arguments


def _around_pool_init(
    process: ProcessRecord, original: Callable[..., None], self: DSV4TokenToKVPool, *args: object, **kwargs: Any
) -> None:
    original(self, *args, **kwargs)
    pool_lifecycle.announce_pool_created(self)  # the index-K read gate links the sub-pools here
    _note_bf16_without_c4_layers(self)
    _take_part_in_rank_census(process)
    arguments = _bound_init_arguments(original, (self, *args), kwargs)
    report = check_index_k_budget(self, is_draft_worker=bool(arguments.get("is_draft_worker")))
    if report:
        logger.info("index-K sizing self-check: %s", report)


def _note_bf16_without_c4_layers(kv_pool: DSV4TokenToKVPool) -> None:
    """bf16 asked for a model without c4 layers (DeepSeek-V4.1): nothing changes, and the log says so."""
    if load_config().index_k_dtype != IndexKDtype.BF16 or 4 in getattr(kv_pool, "index_pools", {}):
        return
    logger.warning(
        "sglang-dsv4-ext: %s=bf16 changes nothing for this model: it has no c4 layers, and SGLang builds its "
        "ratio-1/2 index-K (DeepSeek-V4.1) as fp4 whatever the dtype; the record reports index_k_dtype=%s",
        ENV_INDEX_K_DTYPE,
        NONE_BUILT,
    )


def _take_part_in_rank_census(process: ProcessRecord) -> None:
    """Every rank builds its pool at this point of its start: an active one says so (runtime/rank_census.py)."""
    from sglang_dsv4_ext.runtime import rank_census

    if process.build_checked():
        rank_census.take_part(_sglang_tp_group(), process.built_index_k_dtype())


def _sglang_tp_group() -> GroupCoordinator | None:
    """SGLang's ``get_tp_group()``, or None where ``model_parallel_is_initialized()`` says it made no groups."""
    if not compat.resolve(compat.MODEL_PARALLEL_INITIALIZED.path)[2]():
        return None
    tp_group: GroupCoordinator = compat.resolve(compat.TP_GROUP.path)[2]()
    return tp_group


def hooks(ctx: HookContext) -> list[Hook]:
    from sglang_dsv4_ext.runtime.hooks import Hook

    return [
        Hook(compat.MAKE_INDEXER_POOL, functools.partial(_around_make_indexer_pool, ctx.process), "around"),
        Hook(compat.POOL_INIT, functools.partial(_around_pool_init, ctx.process), "around"),
    ]
