"""The bf16 index-K data path inside SGLang's DSV4 C4 indexer.

Why: SGLang 0.5.23 has no bf16 indexer store (``static_assert(!(kIsIndexer && kBf16Store))``),
its query path quantizes to fp8/fp4 and folds the q scale into the head weights, and every
logits kernel views the cache as 132-B (or 68-B) rows (docs/patch-point-map.md, "Indexer"). A bf16 index-K
pool needs its own store, query and logits, and must never reach the fp8 kernels.

How: only when the DSV4 pool's c4 indexer is the bf16 pool (fp8 and fp4 stay on SGLang's
own code, unwrapped at call time):
  * ``CompressorBackendMixin.forward_indexer_compressor`` (the class alias of
    ``forward_unified`` that the indexer calls), indexer branch: SGLang's ``compress_forward``
    (same plan and state), then :func:`kernels_sm120.store_index_k_bf16` (RMSNorm, RoPE on
    the last 64, Hadamard, bf16 scatter) into the buffer from the *gated* top-level getter.
    Plan decoding follows SGLang's device-agnostic ``_forward_unified_hip`` (RoPE position
    ``seq_len - 4``, prefill slot ``out_loc[ragged_id]``); rows SGLang's CUDA store skips
    are skipped too (slot -1): decode rows that close no 4-token group, and the invalid
    rows (``seq_len == 0xFFFFFFFF``, ragged id 0) that pad a CUDA-graph prefill plan, which
    would otherwise write into ``out_loc[0]``, a real slot when the batch's first token
    closes a group.
  * ``C4Indexer.compute_q``: :func:`kernels_sm120.index_q_bf16` (RoPE + Hadamard, no
    quantization; weights = weight * weight_scale). The query module has no pool, so it takes
    the decision ``forward_c4_indexer`` made from the backend's pool (a context variable set
    around that call): queries and keys always agree, whatever the environment says later.
  * ``C4IndexerBackendMixin.forward_c4_indexer``: the paged branch with
    :func:`kernels_sm120.paged_mqa_logits_bf16` (fp32 logits) in SGLang's row chunks, fed to
    SGLang's own top-k transforms; the non-paged branch is never taken for bf16
    (``_can_use_nonpaged_indexer`` also answers False). With ``SGLANG_DSV4_INDEX_K_CAPTURE``
    set, the queries, weights and key rows it reads are handed to
    :mod:`sglang_dsv4_ext.runtime.index_k.capture` first (for ``sglang-dsv4 recall``), and the store
    above hands it what it rounded to bf16 (recall's reference).

Upstream status: not upstream.
Retire when: SGLang ships a bf16 DSV4 index-K data path.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from sglang_dsv4_ext.config import Fp4LogitsKernel, Fp8LogitsKernel, load_config
from sglang_dsv4_ext.errors import Bf16IndexKUnsupported
from sglang_dsv4_ext.runtime import compat
from sglang_dsv4_ext.runtime.index_k import capture as index_k_capture
from sglang_dsv4_ext.runtime.index_k import fp8_logits, pool_lifecycle
from sglang_dsv4_ext.runtime.index_k.dtype import stores_bf16_index_k

if TYPE_CHECKING:
    from sglang_dsv4_ext.runtime.hooks import Hook, HookContext
    from sglang_dsv4_ext.runtime.sglang_types import C4Indexer, Compressor, DSV4AttentionBackend, ForwardBatch

logger = logging.getLogger(__name__)


def _kernels() -> ModuleType:
    import kernels_sm120

    return kernels_sm120


def backend_stores_bf16_index_k(backend: DSV4AttentionBackend) -> bool:
    pool = getattr(backend, "token_to_kv_pool", None)
    return stores_bf16_index_k(getattr(pool, "c4_indexer_kv_pool", None))


# True inside forward_c4_indexer on a backend whose pool stores bf16 index-K: compute_q (called
# from SGLang's _forward_prepare_* within it) has no pool of its own and reads this decision.
_pool_stores_bf16: contextvars.ContextVar[bool] = contextvars.ContextVar("dsv4_ext_pool_bf16", default=False)


@contextlib.contextmanager
def index_k_pool_scope(bf16: bool) -> Iterator[None]:
    """The index-K dtype decision of the pool in use, for the query path inside this scope."""
    token = _pool_stores_bf16.set(bf16)
    try:
        yield
    finally:
        _pool_stores_bf16.reset(token)


# --- store: the compressor's indexer branch ----------------------------------------------


def _around_forward_unified(
    original: Callable[..., Any],
    self: DSV4AttentionBackend,
    x: torch.Tensor,
    forward_batch: ForwardBatch,
    layer_id: int,
    compressor: Compressor,
) -> Any:
    # Only the c4 indexer's keys live in the bf16 pool (V4.1's low-ratio pools stay fp4).
    if not compressor.is_in_indexer or compressor.ratio != 4 or not backend_stores_bf16_index_k(self):
        return original(self, x, forward_batch, layer_id, compressor)
    if forward_batch.forward_mode.is_idle():
        return None
    store_compressed_index_k_bf16(self, x, forward_batch, layer_id, compressor)
    return None


def store_compressed_index_k_bf16(
    backend: DSV4AttentionBackend, x: torch.Tensor, forward_batch: ForwardBatch, layer_id: int, compressor: Compressor
) -> None:
    from sglang.srt.layers.attention.dsv4 import compressor_v2
    from sglang.srt.layers.attention.dsv4.compressor_v2 import compress_forward

    ratio = compressor.ratio
    head_dim = compressor.head_dim
    if ratio != 4:
        raise Bf16IndexKUnsupported(f"bf16 index-K store is for the c4 indexer only, got compress ratio {ratio}")
    token_to_kv_pool = backend.token_to_kv_pool
    kv_score_input = compressor.compute_kv_score(x, forward_batch)
    state_pool = compressor.get_state_pool(backend)
    plan = backend._get_paged_compress_metadata(ratio)
    out_loc = backend._get_out_loc(ratio)

    coff = 2 if compressor_v2.is_overlap_compress(ratio) else 1
    kv_score_buffer = state_pool.kv_score_buffer.kv_score.view(-1, ratio, 2 * head_dim * coff)
    kv_compressed = compress_forward(
        kv_score_buffer=kv_score_buffer,
        kv_score_input=kv_score_input,
        ape=compressor.ape.view(-1, head_dim),
        plan=plan,
        compress_ratio=ratio,
        head_dim=head_dim,
        is_online=False,
    )
    if kv_compressed.shape[0] == 0:
        return
    positions = compressor_v2._extract_positions_from_plan(plan, ratio).clamp(min=0)
    plan_raw = plan[1].view(torch.int32)
    seq_lens = plan_raw[:, 0]  # uint32 in the plan; the invalid marker 0xFFFFFFFF reads -1
    if plan.is_decode:
        # A decode row that closes no 4-token group compresses nothing (its out_loc is
        # the dummy slot 0); SGLang's CUDA store returns early for it, so skip it.
        out_loc_rows = out_loc.masked_fill(seq_lens % ratio != 0, -1)
    else:
        # Prefill rows address out_loc by ragged id; CUDA-graph plans are padded with
        # invalid rows (ragged id 0) that SGLang's CUDA store skips.
        out_loc_rows = out_loc[(plan_raw[:, 1] & 0xFFFF).long()].masked_fill(seq_lens == -1, -1)
    # The gated getter: this layer's HiCache load (if any) has landed before we write.
    cache = token_to_kv_pool.get_index_k_with_scale_buffer(layer_id)
    # SGLang's JIT store casts the norm weight to the activation dtype first; match it bit for bit.
    norm_weight = compressor.norm.weight.to(kv_compressed.dtype)
    _kernels().store_index_k_bf16(
        kv_compressed,
        norm_weight,
        compressor.norm.variance_epsilon,
        compressor.freqs_cis,
        positions,
        out_loc_rows,
        cache,
    )
    # SGLANG_DSV4_INDEX_K_CAPTURE: what this store rounded to bf16 is recall's reference (sampled layers only).
    capture = index_k_capture.capture_for(token_to_kv_pool)
    if capture is not None:
        capture.note_stored(
            layer_id,
            forward_batch,
            kv_compressed,
            norm_weight,
            compressor.norm.variance_epsilon,
            compressor.freqs_cis,
            positions,
            out_loc_rows,
        )


# --- query ----------------------------------------------------------------------------------


def _around_compute_q(
    original: Callable[..., tuple[torch.Tensor, torch.Tensor]],
    self: C4Indexer,
    q_lora: torch.Tensor,
    positions: torch.Tensor,
    weight: torch.Tensor,
    *release_args: Any,
    **release_kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    # SGLang 0.5.23 passes q_lora_quant (positionally, from _forward_prepare_normal); 0.5.22 has none.
    if self.use_fp4_indexer or not _pool_stores_bf16.get():
        return original(self, q_lora, positions, weight, *release_args, **release_kwargs)
    q_lora_quant = release_args[0] if release_args else release_kwargs.get("q_lora_quant")
    q, _ = self.wq_b(q_lora if q_lora_quant is None else q_lora_quant)
    q = q.view(-1, self.n_local_heads, self.head_dim)
    q_out, weights = _kernels().index_q_bf16(
        q, weight, self.weight_scale, self.freqs_cis, positions, num_heads=self.n_local_heads
    )
    return q_out, weights.unsqueeze(-1)


# --- logits + SGLang's top-k -----------------------------------------------------------------


def _around_can_use_nonpaged(
    original: Callable[..., bool],
    self: DSV4AttentionBackend,
    *,
    c4_indexer: C4Indexer,
    forward_batch: ForwardBatch,
    indexer_metadata: Any,
) -> bool:
    if backend_stores_bf16_index_k(self):
        return False  # the non-paged path gathers fp8 rows for DeepGEMM
    return original(self, c4_indexer=c4_indexer, forward_batch=forward_batch, indexer_metadata=indexer_metadata)


def _around_forward_c4_indexer(
    original: Callable[..., None],
    self: DSV4AttentionBackend,
    x: torch.Tensor,
    q_lora: torch.Tensor,
    c4_indexer: C4Indexer,
    forward_batch: ForwardBatch,
    alt_streams: list[torch.cuda.Stream] | None = None,
    enable_multi_stream: bool = False,
    q_lora_ready: torch.cuda.Event | None = None,
    skip_compressor: bool = False,
    **release_kwargs: Any,
) -> None:
    # release_kwargs: 0.5.23's q_lora_quant (SGLang passes it by name); 0.5.22 has no such parameter.
    bf16 = not c4_indexer.use_fp4_indexer and backend_stores_bf16_index_k(self)
    fp4 = c4_indexer.use_fp4_indexer
    with index_k_pool_scope(bf16), fp8_logits_routed(not bf16 and not fp4), fp4_logits_routed(fp4):
        return (forward_c4_indexer_bf16 if bf16 else original)(
            self,
            x,
            q_lora,
            c4_indexer,
            forward_batch,
            alt_streams=alt_streams,
            enable_multi_stream=enable_multi_stream,
            q_lora_ready=q_lora_ready,
            skip_compressor=skip_compressor,
            **release_kwargs,
        )


_TRUE_TEXTS = ("1", "true", "yes", "y", "on")  # what SGLang's EnvBool reads as true


def _fp8_logits_owners() -> list[tuple[object, str]]:
    """(module, attribute) of each SGLang fp8 logits function forward_c4_indexer may take in this process:
    fp8_paged_mqa_logits_torch_sm120 always, tilelang_fp8_paged_mqa_logits where SGLang's switch makes
    SGLang import its module (compat.SM120_TORCH_FP8_LOGITS, compat.TILELANG_FP8_LOGITS)."""
    import importlib
    import os
    import sys

    owners: list[tuple[object, str]] = []
    for path in (compat.SM120_TORCH_FP8_LOGITS, compat.TILELANG_FP8_LOGITS):
        module_name, _, attribute = path.rpartition(".")
        module = sys.modules.get(module_name)
        if module is None and path == compat.TILELANG_FP8_LOGITS:
            if (os.environ.get(compat.TILELANG_INDEXER_SWITCH) or "").strip().lower() not in _TRUE_TEXTS:
                continue
        owners.append((module or importlib.import_module(module_name), attribute))
    return owners


@contextlib.contextmanager
def _routed(
    owners: list[tuple[object, str]], make_router: Callable[[str, Callable[..., Any]], Callable[..., Any]]
) -> Iterator[None]:
    """Each (module, attribute) of ``owners`` a router over SGLang's own function for the body, then put back."""
    originals = [getattr(module, attribute) for module, attribute in owners]
    for (module, attribute), original in zip(owners, originals):
        setattr(module, attribute, make_router(attribute, getattr(original, "__wrapped__", original)))
    try:
        yield
    finally:
        for (module, attribute), original in zip(owners, originals):
            setattr(module, attribute, original)


@contextlib.contextmanager
def fp8_logits_routed(fp8_pool: bool) -> Iterator[None]:
    """During one forward_c4_indexer call over the fp8 pool with SGLANG_DSV4_FP8_LOGITS=triton: SGLang's
    fp8 logits functions are routers (runtime/index_k/fp8_logits.py) that run ours where ours takes the call."""
    if not fp8_pool or load_config().fp8_logits != Fp8LogitsKernel.TRITON:
        yield
        return
    with _routed(_fp8_logits_owners(), fp8_logits.router):
        yield


def _raises_on_fp4() -> bool:
    """Whether SGLang's forward_c4_indexer raises on the fp4 indexer here: CUDA (HIP has its own aiter path)
    with SGLang's TileLang switch on, as SM120's defaults set it (compat.TILELANG_INDEXER_SWITCH). Read through
    SGLang's indexer module: the names forward_c4_indexer itself reads."""
    from sglang.srt.layers.attention.dsv4 import indexer as sg_indexer

    return not sg_indexer.is_hip() and bool(getattr(sg_indexer.envs, compat.TILELANG_INDEXER_SWITCH).get())


@contextlib.contextmanager
def fp4_logits_routed(fp4_pool: bool) -> Iterator[None]:
    """During one forward_c4_indexer call over the fp4 pool with SGLANG_DSV4_FP4_LOGITS=triton, where SGLang
    would raise (its TileLang switch on): the switch off for the call and DeepGEMM's fp4 logits a router
    (runtime/index_k/fp8_logits.py) that runs kernels_sm120's fp4 kernel where it takes the call."""
    if not fp4_pool or load_config().fp4_logits != Fp4LogitsKernel.TRITON or not _raises_on_fp4():
        yield
        return
    import importlib

    from sglang.srt.layers.attention.dsv4 import indexer as sg_indexer

    module_name, _, attribute = compat.DEEPGEMM_FP4_LOGITS.rpartition(".")
    owners: list[tuple[object, str]] = [(importlib.import_module(module_name), attribute)]
    with (
        _routed(owners, lambda _name, original: fp8_logits.fp4_router(original)),
        getattr(sg_indexer.envs, compat.TILELANG_INDEXER_SWITCH).override(False),
    ):
        yield


def _match_rows(tensor: torch.Tensor, rows: int, value: int) -> torch.Tensor:
    if tensor.shape[0] == rows:
        return tensor
    if tensor.shape[0] > rows:
        return tensor[:rows]
    pad = (0, 0) * (tensor.dim() - 1) + (0, rows - tensor.shape[0])
    return F.pad(tensor, pad, value=value)


def _refuse_unsupported(backend: DSV4AttentionBackend) -> None:
    from sglang.srt.layers.attention.dsv4 import indexer as sg_indexer

    if backend.hisparse_coordinator is not None:
        raise Bf16IndexKUnsupported("bf16 index-K with HiSparse is not supported; use fp8 index-K")
    if sg_indexer.get_global_indexer_capturer() is not None:
        raise Bf16IndexKUnsupported("bf16 index-K with the indexer top-k capturer is not supported")


def _same_rows(
    x: torch.Tensor, q_lora: torch.Tensor, q_lora_quant: torch.Tensor | None, positions: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Trim x, q_lora and positions to the rows all three have (CUDA-graph padding differs)."""
    num_queries = min(x.shape[0], q_lora.shape[0], positions.shape[0])
    if q_lora.shape[0] != num_queries:
        q_lora, q_lora_quant = q_lora[:num_queries], None
    return x[:num_queries], q_lora, q_lora_quant, positions[:num_queries]


def _bf16_queries(
    backend: DSV4AttentionBackend,
    x: torch.Tensor,
    q_lora: torch.Tensor,
    c4_indexer: C4Indexer,
    forward_batch: ForwardBatch,
    positions: torch.Tensor,
    *,
    alt_streams: list[torch.cuda.Stream] | None,
    enable_multi_stream: bool,
    q_lora_ready: torch.cuda.Event | None,
    skip_compressor: bool,
    q_lora_quant: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """SGLang's own query preparation (our compute_q hook makes it bf16); checked before use.

    ``q_lora_quant`` is passed on only where SGLang has it (0.5.23): 0.5.22's ``_forward_prepare_normal``
    takes no such parameter (and is then never given one: ``forward_c4_indexer`` had none to pass).
    """
    release_kwargs = {} if q_lora_quant is None else {"q_lora_quant": q_lora_quant}
    if enable_multi_stream:
        q_indexer, weights = backend._forward_prepare_multi_stream(
            x=x,
            q_lora=q_lora,
            c4_indexer=c4_indexer,
            positions=positions,
            forward_batch=forward_batch,
            alt_streams=alt_streams,
            q_lora_ready=q_lora_ready,
        )
    else:
        assert q_lora_ready is None
        q_indexer, weights = backend._forward_prepare_normal(
            x=x,
            q_lora=q_lora,
            c4_indexer=c4_indexer,
            positions=positions,
            forward_batch=forward_batch,
            skip_compressor=skip_compressor,
            **release_kwargs,
        )
    if q_indexer.dtype != torch.bfloat16 or q_indexer.dim() != 3:
        raise Bf16IndexKUnsupported(
            f"bf16 index-K needs bf16 queries [N, H, D] from compute_q, got {q_indexer.dtype} "
            f"{tuple(q_indexer.shape)}; is the compute_q hook installed?"
        )
    return q_indexer, weights


def forward_c4_indexer_bf16(
    backend: DSV4AttentionBackend,
    x: torch.Tensor,
    q_lora: torch.Tensor,
    c4_indexer: C4Indexer,
    forward_batch: ForwardBatch,
    *,
    alt_streams: list[torch.cuda.Stream] | None = None,
    enable_multi_stream: bool = False,
    q_lora_ready: torch.cuda.Event | None = None,
    skip_compressor: bool = False,
    q_lora_quant: torch.Tensor | None = None,
) -> None:
    """SGLang's ``forward_c4_indexer`` for a bf16 index-K pool (paged branch only)."""
    from sglang.srt.layers.attention.dsv4 import indexer as sg_indexer

    if forward_batch.forward_mode.is_idle():
        return
    token_to_kv_pool = backend.token_to_kv_pool
    metadata = backend.forward_metadata
    indexer_metadata = metadata.indexer_metadata
    core_metadata = metadata.core_metadata
    _refuse_unsupported(backend)
    x, q_lora, q_lora_quant, positions = _same_rows(x, q_lora, q_lora_quant, core_metadata.positions)
    q_indexer, weights = _bf16_queries(
        backend,
        x,
        q_lora,
        c4_indexer,
        forward_batch,
        positions,
        alt_streams=alt_streams,
        enable_multi_stream=enable_multi_stream,
        q_lora_ready=q_lora_ready,
        skip_compressor=skip_compressor,
        q_lora_quant=q_lora_quant,
    )
    weights = weights.squeeze(2).float()
    query_rows = q_indexer.shape[0]
    chunked = isinstance(indexer_metadata.deep_gemm_metadata, list)
    c4_seq_lens = _match_rows(indexer_metadata.compressed_seq_lens, query_rows, 1)
    page_table = _match_rows(indexer_metadata.page_table, query_rows, 0)
    c4_sparse_page_indices = _match_rows(core_metadata.c4_sparse_page_indices, query_rows, -1)
    if backend.debug_use_external_c4_sparse_indices:
        return
    # SGLang's paged branch asserts the same (after the same return): its chunk schedules and top-k plans are per
    # row chunk of the metadata's rows, so other rows would be paired with another chunk's plan. Checked before
    # the index-K capture sees the call.
    built_for = indexer_metadata.compressed_seq_lens.shape[0]
    if chunked and built_for != query_rows:
        raise RuntimeError(
            f"DeepSeek-V4 bf16 index-K: SGLang's row-chunk schedules were built for {built_for} rows, "
            f"got {query_rows} query rows"
        )
    raw_indices = core_metadata.c4_sparse_raw_indices

    # The gated getter: waits for this layer's HiCache load before the logits read it.
    cache = token_to_kv_pool.get_index_k_with_scale_buffer(layer_id=c4_indexer.layer_id)
    # SGLANG_DSV4_INDEX_K_CAPTURE: the rows this call reads, for `sglang-dsv4 recall` (decided per pool).
    capture = index_k_capture.capture_for(token_to_kv_pool)
    if capture is not None:
        capture.record(c4_indexer, forward_batch, q_indexer, weights, c4_seq_lens, page_table, cache)
    logits_fn = _kernels().paged_mqa_logits_bf16
    all_rows = slice(0, query_rows)

    def run_rows(rows: slice, topk_plan: torch.Tensor | None) -> None:
        logits = logits_fn(
            q_indexer[rows],
            cache,
            weights[rows],
            c4_seq_lens[rows],
            page_table[rows],
            indexer_metadata.max_compressed_seq_len,
        )
        _run_topk_transform(
            backend,
            indexer_metadata,
            logits,
            rows,
            all_rows,
            c4_seq_lens,
            page_table,
            c4_sparse_page_indices,
            raw_indices,
            topk_plan,
        )

    if chunked:
        topk_plans = indexer_metadata.topk_metadata_chunks
        for chunk_idx, rows in enumerate(
            sg_indexer.iter_row_chunks(num_rows=query_rows, rows_per_chunk=indexer_metadata.rows_per_chunk)
        ):
            run_rows(rows, topk_plans[chunk_idx] if topk_plans is not None else None)
    else:
        run_rows(all_rows, None)


def _run_topk_transform(
    backend: DSV4AttentionBackend,
    indexer_metadata: Any,
    logits: torch.Tensor,
    rows: slice,
    all_rows: slice,
    c4_seq_lens: torch.Tensor,
    page_table: torch.Tensor,
    c4_sparse_page_indices: torch.Tensor,
    raw_indices: torch.Tensor | None,
    topk_plan: torch.Tensor | None,
) -> None:
    """SGLang's own top-k transforms on fp32 logits, chosen exactly as ``forward_c4_indexer`` does."""
    from sglang.srt.layers.attention.dsv4 import indexer as sg_indexer

    row_raw = raw_indices[rows] if raw_indices is not None else None
    args = (
        logits,
        c4_seq_lens[rows],
        page_table[rows],
        c4_sparse_page_indices[rows],
        indexer_metadata.compressed_page_size,
    )
    topk_backend = backend.dsa_topk_backend
    if topk_backend.is_torch():
        sg_indexer.topk_transform_pytorch_vectorized(*args, row_raw)
    elif topk_backend.is_flashinfer():
        # SGLang binds it to topk_transform_flashinfer_fused or topk_transform_flashinfer_unfused (compat.CALLED).
        backend.flashinfer_topk_transform(*args, row_raw)
    elif topk_backend.should_use_topk_v2():
        if topk_plan is None:
            topk_plan = (
                indexer_metadata.topk_metadata if rows == all_rows else sg_indexer.plan_topk_v2(c4_seq_lens[rows])
            )
        sg_indexer.topk_transform_paged_v2(*args, topk_plan, row_raw)
    else:
        sg_indexer.topk_transform_paged(*args, row_raw)


def hooks(ctx: HookContext) -> list[Hook]:
    from sglang_dsv4_ext.runtime.hooks import Hook

    # Capture is decided when a pool is built: a bad setting stops start-up, not a forward pass.
    pool_lifecycle.subscribe_pool_created("index-K capture", index_k_capture.capture_for)

    return [
        # The class body binds forward_indexer_compressor = forward_unified; HookRegistry does
        # not propagate into class attributes, so the indexer alias is the target.
        Hook(compat.INDEXER_COMPRESSOR_FORWARD, _around_forward_unified, "around"),
        Hook(compat.C4_COMPUTE_Q, _around_compute_q, "around"),
        Hook(compat.C4_FORWARD_INDEXER, _around_forward_c4_indexer, "around"),
        Hook(compat.C4_CAN_USE_NONPAGED, _around_can_use_nonpaged, "around"),
    ]
