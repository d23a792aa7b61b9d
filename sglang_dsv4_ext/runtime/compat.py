"""The one table of every SGLang target the extension hooks, with its expected signature.

Activation checks this table against the installed SGLang with :mod:`inspect` *before*
anything is patched. A missing target or a signature that differs from the one we were
written against refuses activation, naming the target and the difference: we never
half-patch a drifted SGLang. CPU tests assert the table against the installed SGLang, so an
upstream drift fails CI rather than an operator's server.

Signatures are normalised to parameter names, kinds and default values (annotations are
ignored; they change often and do not affect how we call or wrap a target).

One table for every supported release (:data:`SUPPORTED_SGLANG_VERSIONS`): a row's signature is the
newest release's; where another release differs, the row says so (:class:`OnRelease`: its signature
there, or that the target does not exist there, and what that release lacks). :func:`table_for`
picks the rows of the running release; an untested SGLang is judged by the newest release's rows,
so a drift is refused there too.
"""

from __future__ import annotations

import dataclasses
import inspect
import pkgutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

# SGLang releases this table was written and tested against, oldest first (spelled here only:
# pyproject's range and the README are tested against it). Another version refuses to activate
# unless SGLANG_DSV4_EXT_ALLOW_UNTESTED_SGLANG=1, and is then judged by the newest release's rows:
# drifted signatures never patch.
SUPPORTED_SGLANG_VERSIONS = ("0.5.22", "0.5.23")

_MP = "sglang.srt.mem_cache.deepseek_v4_memory_pool"
_POOL = f"{_MP}.DeepSeekV4TokenToKVPool"
_SUB = f"{_MP}.DeepSeekV4IndexerPool"
_CONF = "sglang.srt.model_executor.pool_configurator.DSV4PoolConfigurator"
_ASM = "sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler"
_HOST = "sglang.srt.mem_cache.memory_pool_host"
_CTRL = "sglang.srt.managers.cache_controller.LayerDoneCounter"
_PGR = "sglang.srt.model_executor.runner.prefill_cuda_graph_runner.PrefillCudaGraphRunner"
_IDX = "sglang.srt.layers.attention.dsv4.indexer"
_CMP = "sglang.srt.layers.attention.dsv4.compressor_v2.CompressorBackendMixin"
_HOST_PAGED = f"{_HOST}.DeepSeekV4PagedHostPool"
_HOST_LOGICAL = f"{_HOST}.LogicalHostPool"
_DECODE = "sglang.srt.disaggregation.decode.SchedulerDisaggregationDecodeMixin"

# Features a target serves; doctor reports a target as skipped-by-config when its feature
# is off in the configuration in force (the hook stays installed and passes through, since
# switches are decided per call, never at import).
ALWAYS = "always"  # budget==allocation (fp4 on CUDA included), sizing self-check
BF16 = "bf16"  # SGLANG_DSV4_INDEX_K_DTYPE=bf16
GATE = "gate"  # SGLANG_DSV4_INDEX_K_GATE=auto|strict
INTEGRITY = "integrity"  # SGLANG_DSV4_INDEX_K_INTEGRITY=sample|full


# OnRelease.signature for a release where the target is there with the row's own signature.
SAME_SIGNATURE = "(same)"


@dataclass(frozen=True)
class OnRelease:
    """How a row differs on one supported release from its own signature (the newest release's)."""

    version: str
    lacks: str  # what that release lacks, and what the hook does there instead (doctor says it)
    signature: str | None = SAME_SIGNATURE  # None: the target does not exist on that release


@dataclass(frozen=True)
class Target:
    path: str  # dotted path, as HookRegistry resolves it
    signature: str  # normalised expected signature (the newest release's), see normalised_signature()
    area: str  # the patch module that hooks it (sglang_dsv4_ext.runtime.hooks.<area>)
    feature: str  # ALWAYS | BF16 | GATE | INTEGRITY
    why: str
    releases: tuple[OnRelease, ...] = ()  # the supported releases where it differs

    def on(self, version: str) -> OnRelease | None:
        """How this row differs on release ``version`` (None: not at all)."""
        return next((r for r in self.releases if r.version == version), None)

    def row_for(self, version: str) -> Target | None:
        """This row as release ``version`` has it, or None where the target does not exist there."""
        differs = self.on(version)
        if differs is None or differs.signature == SAME_SIGNATURE:
            return self
        if differs.signature is None:
            return None
        return dataclasses.replace(self, signature=differs.signature)

    @property
    def attribute(self) -> str:
        """The last path component: the function or method name."""
        return self.path.rpartition(".")[2]

    @property
    def module(self) -> str:
        """The module that defines the target: the path up to its first class (capitalised) component."""
        parts = self.path.split(".")[:-1]
        for index, part in enumerate(parts):
            if part[:1].isupper():
                return ".".join(parts[:index])
        return ".".join(parts)

    @property
    def owner_path(self) -> str:
        """The dotted path of the module or class that holds the target."""
        return self.path.rpartition(".")[0]

    def required_args_after_layer_id(self) -> int:
        """Positional parameters without a default that follow ``layer_id`` (the gate probe passes these)."""
        params = [p.strip() for p in self.signature.strip("()").split(",")]
        after = params[params.index("layer_id") + 1 :] if "layer_id" in params else []
        return sum(1 for p in after if "=" not in p and not p.startswith("*"))


# --- activation itself: SGLang's HookRegistry propagation, scoped while our hooks apply ---
HOOK_REGISTRY_PROPAGATE = Target(
    "sglang.srt.plugins.hook_registry._propagate_patch",
    "(original, wrapped, source_module)",
    "activation",
    ALWAYS,
    "scan only sglang.* modules for aliases of our targets (0.3 s activation budget)",
)
# A target whose hook is signature-agnostic: only its presence is checked.
ANY_SIGNATURE = "(*any)"
# --- activation: where a DeepSeek-V4 model is built, activation completes or refuses (a guard) ---
DSV4_MODEL_INIT = Target(
    "sglang.srt.models.deepseek_v4.DeepseekV4ForCausalLM.__init__",
    ANY_SIGNATURE,
    "activation",
    ALWAYS,
    "guard: complete activation or refuse before a DeepSeek-V4 model is built (also where SGLang's pool classes moved)",
)
# --- sizing: one source of truth for index-K bytes per token (docs/patch-point-map.md, sizing) ---
INDEXER_BYTES_PER_TOKEN = Target(
    f"{_MP}.get_dsv4_indexer_bytes_per_token",
    "(index_head_dim, use_fp4_indexer)",
    "sizing",
    ALWAYS,
    "bytes per index-K token for pool and configurator (bf16: 256, fp4 on CUDA: 68)",
)
CONFIGURATOR_INIT = Target(
    f"{_CONF}.__init__",
    "(self, kvc)",
    "sizing",
    ALWAYS,
    "record what the configurator budgeted, for the startup self-check",
)
# --- pool: bf16 indexer storage and the startup self-check ---
MAKE_INDEXER_POOL = Target(
    f"{_POOL}._make_indexer_pool",
    "(self, size, page_size, dtype, index_head_dim, layer_num, device, enable_memory_saver, "
    "force_fp4=False, global_page_size=None, index_k_page8=False)",
    "pool",
    BF16,
    "return the bf16 indexer pool (one [pages, 64*256] buffer per c4 layer)",
    (
        OnRelease(
            "0.5.22",
            "no index_k_page8 (0.5.23's HIP DeepSeek-V4.1 page-8 index-K); the hook passes on what SGLang gives",
            "(self, size, page_size, dtype, index_head_dim, layer_num, device, enable_memory_saver, "
            "force_fp4=False, global_page_size=None)",
        ),
    ),
)
POOL_INIT = Target(
    f"{_POOL}.__init__",
    "(self, max_num_reqs, swa_size, c4_size, c128_size, c4_state_pool_size, c128_state_pool_size, "
    "page_size, swa_page_size, dtype, c4_state_dtype, c128_state_dtype, qk_nope_head_dim, "
    "qk_rope_head_dim, indexer_head_dim, layer_num, device, enable_memory_saver, compression_ratios, "
    "sliding_window=128, start_layer=None, end_layer=None, enable_hisparse=False, "
    "online_mtp_max_draft_tokens=0, num_req_slots=None, unified_fp8=None, kv_source_layers=(), "
    "full_size=None, is_draft_worker=False, kv_layout=<KVLayout.V4: 'v4'>, compressed_kv_layout=None)",
    "pool",
    ALWAYS,
    "self-check allocation == budget; announce the new pool (the gate links its sub-pools)",
)
# --- PD: the handshake layout string carries the index-K dtype ---
PD_KV_LAYOUT = Target(
    f"{_POOL}.pd_kv_layout",
    "(self)",
    "pd",
    BF16,
    "append the index-K dtype so SGLang's own layout-mismatch check refuses bf16/fp8 pairs",
    (
        OnRelease(
            "0.5.22",
            "no pd_kv_layout and no KV layout check between the PD roles: bf16 index-K with PD "
            "disaggregation is refused where each role builds its KV manager (_init_kv_manager rows); fp8/fp4 "
            "pair as stock",
            None,
        ),
    ),
)
_ONLY_0_5_22_PD = (OnRelease("0.5.23", "0.5.23's pd_kv_layout carries the index-K dtype (the pd_kv_layout row)", None),)
# On 0.5.22 (no pd_kv_layout) each PD role refuses bf16 index-K before it builds its KV manager.
PD_PREFILL_KV_MANAGER = Target(
    "sglang.srt.disaggregation.prefill.PrefillBootstrapQueue._init_kv_manager",
    "(self)",
    "pd",
    BF16,
    "refuse bf16 index-K on a PD prefill server (no channel to tell the decode peer)",
    _ONLY_0_5_22_PD,
)
PD_DECODE_KV_MANAGER = Target(
    "sglang.srt.disaggregation.decode.DecodePreallocQueue._init_kv_manager",
    "(self)",
    "pd",
    BF16,
    "refuse bf16 index-K on a PD decode server (no channel to tell the prefill peer)",
    _ONLY_0_5_22_PD,
)
# --- HiCache: bf16 region page-aligned only; L3 keys carry the dtype ---
HICACHE_INDEXER_REGIONS = Target(
    f"{_ASM}._dsv4_indexer_regions",
    "(kvcache, page_size)",
    "hicache",
    ALWAYS,
    "index-K host regions page_aligned_only for every dtype (token-granular kernel is 584-B "
    "main-KV only; stock registers fp8/fp4 with False)",
)
HICACHE_BUILD_STACK = Target(
    f"{_ASM}.build_deepseek_v4_hicache_stack",
    "(*, params, kvcache, load_cache_event, storage_backend, host_swa_evict_fn=None, "
    "device_swa_evict_fn=None, host_c128_evict_fn=None, prefetch_threshold=256, model_name=None, "
    "storage_backend_extra_config=None, enable_storage_metrics=False, layer_mappings=None)",
    "hicache",
    BF16,
    "scope in which the L3 anchor pool is tagged with the index-K dtype",
)
LOGICAL_HOST_POOL_INIT = Target(
    f"{_HOST}.LogicalHostPool.__init__",
    "(self, size, page_size, layout='layer_first')",
    "hicache",
    BF16,
    "tag storage_format_tag of the DSV4 anchor so L3 keys differ for bf16",
)
EXTERNAL_LINKER_CREATE = Target(
    "sglang.srt.mem_cache.unified_cache.linker_factory.create_unified_cache_linker",
    "(server_args, params, *, backend, config, components, forward_stream=None)",
    "hicache",
    BF16,
    "refuse bf16 index-K with --enable-unified-cache-external-linker (its direct linkers key "
    "pages on the model path alone, bypassing storage_model_name)",
    (
        OnRelease(
            "0.5.22",
            "no unified_cache.linker_factory (mem_cache/registry.py builds the direct linkers): the "
            "refusal hooks the DeepSeek-V4 direct-linker pool group instead",
            None,
        ),
    ),
)
EXTERNAL_LINKER_DSV4_POOL_GROUP = Target(
    "sglang.srt.mem_cache.hybrid_cache.linker_pool_assembler._build_deepseek_v4_device_pool_group",
    "(kvcache, page_size, mtp_draft_device_pools=())",
    "hicache",
    BF16,
    "refuse bf16 index-K with --enable-unified-cache-external-linker (0.5.22: where the direct "
    "linker's DeepSeek-V4 pool group is built)",
    (OnRelease("0.5.23", "refused at create_unified_cache_linker (the linker_factory row)", None),),
)
# --- indexer: the bf16 data path ---
INDEXER_COMPRESSOR_FORWARD = Target(
    f"{_CMP}.forward_indexer_compressor",
    "(self, x, forward_batch, layer_id, compressor)",
    "indexer",
    BF16,
    "bf16 index-K store (norm, RoPE, Hadamard, bf16 scatter) for the c4 indexer",
)
C4_COMPUTE_Q = Target(
    f"{_IDX}.C4Indexer.compute_q",
    "(self, q_lora, positions, weight, q_lora_quant=None)",
    "indexer",
    BF16,
    "bf16 queries (RoPE + Hadamard), weights = weight * weight_scale",
    (
        OnRelease(
            "0.5.22",
            "no q_lora_quant (0.5.23's fp8 q_lora shared with wq_b): the bf16 query uses q_lora",
            "(self, q_lora, positions, weight)",
        ),
    ),
)
C4_FORWARD_INDEXER = Target(
    f"{_IDX}.C4IndexerBackendMixin.forward_c4_indexer",
    "(self, x, q_lora, c4_indexer, forward_batch, alt_streams=None, enable_multi_stream=False, "
    "q_lora_ready=None, skip_compressor=False, q_lora_quant=None)",
    "indexer",
    BF16,
    "paged bf16 logits kernel feeding SGLang's own top-k",
    (
        OnRelease(
            "0.5.22",
            "no q_lora_quant: the bf16 path passes none to SGLang's query preparation",
            "(self, x, q_lora, c4_indexer, forward_batch, alt_streams=None, enable_multi_stream=False, "
            "q_lora_ready=None, skip_compressor=False)",
        ),
    ),
)
C4_CAN_USE_NONPAGED = Target(
    f"{_IDX}.C4IndexerBackendMixin._can_use_nonpaged_indexer",
    "(self, *, c4_indexer, forward_batch, indexer_metadata)",
    "indexer",
    BF16,
    "non-paged (fp8 DeepGEMM) branch off for bf16",
)
# --- gate: no reader sees index-K before its HiCache load landed (docs/patch-point-map.md, R1-R3) ---
POOL_WAIT_LAYER_TRANSFER = Target(
    f"{_POOL}.wait_layer_transfer",
    "(self, layer_id)",
    "gate",
    GATE,
    "record waits; wait one layer ahead during breakable prefill-graph replay (R3)",
)
_LAYER = "(self, layer_id)"
_SCALE_GATHER = "(self, layer_id, seq_len_tensor, page_indices, seq_len_sum, max_seq_len)"
# Top-level readers: probed at activation; SGLang 0.5.23 already waits in each.
TOPLEVEL_INDEX_K_READERS = tuple(
    Target(f"{_POOL}.{name}", signature, "gate", GATE, "probed top-level reader")
    for name, signature in (
        ("get_index_k_with_scale_buffer", _LAYER),
        ("get_index_k_scale_buffer", _SCALE_GATHER),
        ("get_index_k_fp4_payload_buffer", _LAYER),
        ("get_index_k_fp4_scale_buffer", _LAYER),
        ("get_low_ratio_index_k_dequant", "(self, layer_id, slots=None)"),
        ("get_low_ratio_index_k_fp4", "(self, layer_id, slots)"),
    )
)
# Sub-pool readers: never wait in SGLang 0.5.23 (R1).
SUBPOOL_INDEX_K_READERS = tuple(
    Target(f"{_SUB}.{name}", signature, "gate", GATE, "sub-pool reader (R1)")
    for name, signature in (
        ("get_index_k_with_scale_buffer", _LAYER),
        ("get_index_k_scale_buffer", _SCALE_GATHER),
        ("get_index_k_fp4_payload_buffer", _LAYER),
        ("get_index_k_fp4_scale_buffer", _LAYER),
        ("get_index_k_fp4", "(self, layer_id, slots)"),
        ("get_index_k_dequant", "(self, layer_id, slots=None)"),
    )
)
COUNTER_SET_CONSUMER = Target(
    f"{_CTRL}.set_consumer", "(self, index)", "gate", GATE, "a new consumer batch: forget recorded waits"
)
COUNTER_WAIT_UNTIL = Target(
    f"{_CTRL}.wait_until", "(self, threshold)", "gate", GATE, "record which layers were waited for"
)
PREFILL_GRAPH_WAIT_FOR_LAYER_LOADS = Target(
    f"{_PGR}._wait_for_layer_loads",
    "(self)",
    "gate",
    GATE,
    "breakable/piecewise replay: wait for the first layer before replay (R3)",
    (
        OnRelease(
            "0.5.22",
            "no _wait_for_layer_loads: 0.5.22 waits for no HiCache load around a replay; the execute "
            "hook waits first instead",
            None,
        ),
    ),
)
PREFILL_GRAPH_EXECUTE = Target(
    f"{_PGR}.execute",
    "(self, forward_batch, **kwargs)",
    "gate",
    GATE,
    "scope of a prefill-graph replay: pool waits one layer ahead inside it (R3)",
    (
        OnRelease(
            "0.5.22",
            "no wait before a replay: with a load pending the hook waits for every layer (full graph) "
            "or layer 0 (breakable / piecewise) before the replay, for a gated DeepSeek-V4 pool only",
        ),
    ),
)
# --- integrity: per-page index-K checksums, recorded at backup, verified where read ---
INTEGRITY_HOST_POOL_INIT = Target(
    f"{_HOST_PAGED}.__init__",
    "(self, pool_name, device_buffers, item_bytes, num_host_pages, slot_page_size, layout='layer_first', "
    "device='cpu', pin_memory=True, allocator_type='default', page_aligned_only=False)",
    "integrity",
    INTEGRITY,
    "a checksum table for the c4 indexer host mirror",
)
INTEGRITY_HOST_POOL_BACKUP = Target(
    f"{_HOST_PAGED}.backup_from_device_all_layer",
    "(self, device_pool, host_indices, device_indices, io_backend)",
    "integrity",
    INTEGRITY,
    "record the checksum of every index-K page backed up to host",
)
INTEGRITY_HOST_POOL_LOAD = Target(
    f"{_HOST_PAGED}.load_to_device_per_layer",
    "(self, device_pool, host_indices, device_indices, layer_id, io_backend, *, is_draft=False)",
    "integrity",
    INTEGRITY,
    "a loaded layer's pages become pending verification",
)
INTEGRITY_HOST_POOL_FREE = Target(
    f"{_HOST_PAGED}.free", "(self, indices)", "integrity", INTEGRITY, "freed host pages forget their checksum"
)
INTEGRITY_HOST_POOL_CLEAR = Target(
    f"{_HOST_PAGED}.clear", "(self)", "integrity", INTEGRITY, "a cleared host mirror forgets every checksum"
)
# The c4 indexer mirror borrows the page indices of the group's KV anchor (a LogicalHostPool): SGLang
# frees, reallocates and fills those pages through the anchor alone, never through the mirror.
INTEGRITY_HOST_POOL_GROUP_INIT = Target(
    "sglang.srt.mem_cache.pool_host.group.HostPoolGroup.__init__",
    "(self, entries)",
    "integrity",
    INTEGRITY,
    "link the c4 indexer mirror to the anchor pool whose page indices it borrows",
)
INTEGRITY_ANCHOR_ALLOC = Target(
    f"{_HOST_LOGICAL}.alloc",
    "(self, need_size)",
    "integrity",
    INTEGRITY,
    "anchor pages handed to a new owner (backup, L3 prefetch, PD host receive) forget their checksum in the mirror",
)
INTEGRITY_ANCHOR_FREE = Target(
    f"{_HOST_LOGICAL}.free",
    "(self, indices)",
    "integrity",
    INTEGRITY,
    "anchor pages freed forget their checksum in the mirror",
)
INTEGRITY_C4_INDEXER_FORWARD = Target(
    f"{_IDX}.C4Indexer.forward",
    "(self, x, q_lora, forward_batch, attn_backend, enable_multi_stream=False, q_lora_ready=None, "
    "skip_compressor=False, q_lora_quant=None)",
    "integrity",
    INTEGRITY,
    "verify the layer's loaded pages on the reader's stream, right after the read",
    (
        OnRelease(
            "0.5.22",
            "no q_lora_quant (the hook passes on what SGLang gives)",
            "(self, x, q_lora, forward_batch, attn_backend, enable_multi_stream=False, q_lora_ready=None, "
            "skip_compressor=False)",
        ),
    ),
)
INTEGRITY_PD_CHECKSUM_MISMATCH = Target(
    f"{_DECODE}._handle_kv_checksum_mismatch",
    "(self, req, msg)",
    "integrity",
    INTEGRITY,
    "count and export SGLang's own PD KV checksum mismatches (index-K rows included)",
)
# --- evidence: each scheduler answers /server_info with its own activation record (live, never stale) ---
SCHEDULER_INTERNAL_STATE = Target(
    "sglang.srt.managers.scheduler_components.internal_state.SchedulerInternalStateController.get_internal_state",
    "(self, recv_req)",
    "evidence",
    ALWAYS,
    "add this scheduler's activation record to /server_info's internal_states",
)

# Rows whose fix exists only in runtime form: the source patch series (patches/) does not carry
# them yet, so `patches status` cannot vouch for them (tests/integration/test_series_patches.py).
WITHOUT_SOURCE_PATCH = (
    EXTERNAL_LINKER_CREATE,
    EXTERNAL_LINKER_DSV4_POOL_GROUP,
    PD_PREFILL_KV_MANAGER,
    PD_DECODE_KV_MANAGER,  # 0.5.22's runtime refusal; its series carries the dtype instead
    INTEGRITY_HOST_POOL_INIT,
    INTEGRITY_HOST_POOL_BACKUP,
    INTEGRITY_HOST_POOL_LOAD,
    INTEGRITY_HOST_POOL_FREE,
    INTEGRITY_HOST_POOL_CLEAR,
    INTEGRITY_HOST_POOL_GROUP_INIT,
    INTEGRITY_ANCHOR_ALLOC,
    INTEGRITY_ANCHOR_FREE,
    INTEGRITY_C4_INDEXER_FORWARD,
    INTEGRITY_PD_CHECKSUM_MISMATCH,
    SCHEDULER_INTERNAL_STATE,
)

TARGETS: list[Target] = [
    HOOK_REGISTRY_PROPAGATE,
    DSV4_MODEL_INIT,
    INDEXER_BYTES_PER_TOKEN,
    CONFIGURATOR_INIT,
    MAKE_INDEXER_POOL,
    POOL_INIT,
    PD_KV_LAYOUT,
    PD_PREFILL_KV_MANAGER,
    PD_DECODE_KV_MANAGER,
    HICACHE_INDEXER_REGIONS,
    HICACHE_BUILD_STACK,
    LOGICAL_HOST_POOL_INIT,
    EXTERNAL_LINKER_CREATE,
    EXTERNAL_LINKER_DSV4_POOL_GROUP,
    INDEXER_COMPRESSOR_FORWARD,
    C4_COMPUTE_Q,
    C4_FORWARD_INDEXER,
    C4_CAN_USE_NONPAGED,
    POOL_WAIT_LAYER_TRANSFER,
    *TOPLEVEL_INDEX_K_READERS,
    *SUBPOOL_INDEX_K_READERS,
    COUNTER_SET_CONSUMER,
    COUNTER_WAIT_UNTIL,
    PREFILL_GRAPH_WAIT_FOR_LAYER_LOADS,
    PREFILL_GRAPH_EXECUTE,
    INTEGRITY_HOST_POOL_INIT,
    INTEGRITY_HOST_POOL_BACKUP,
    INTEGRITY_HOST_POOL_LOAD,
    INTEGRITY_HOST_POOL_FREE,
    INTEGRITY_HOST_POOL_CLEAR,
    INTEGRITY_HOST_POOL_GROUP_INIT,
    INTEGRITY_ANCHOR_ALLOC,
    INTEGRITY_ANCHOR_FREE,
    INTEGRITY_C4_INDEXER_FORWARD,
    INTEGRITY_PD_CHECKSUM_MISMATCH,
    SCHEDULER_INTERNAL_STATE,
]


# --- called: SGLang names our hooks call (or subclass, or read members of) without wrapping them ---
# A drift here would surface mid-forward as a TypeError or AttributeError; activation checks these rows
# with the wrapped ones and refuses on a drift, naming the row (tests/unit/hooks/test_called_names.py keeps
# the list complete: a hook that calls or imports an SGLang name missing here fails it). Paths are spelled as
# the hook reaches them: a name SGLang's module imports from elsewhere is spelled through that module.
_CMP_MODULE = _CMP.rpartition(".")[0]
_TOPK = "(scores, seq_lens, page_tables, out_page_indices, page_size, out_raw_indices=None)"
_FP8_LOGITS = "(q_fp8, kvcache_fp8, weight, seq_lens, page_table, deep_gemm_metadata, max_seq_len, clean_logits=True)"
# SGLang's TileLang fp8 logits (what forward_c4_indexer imports under SGLANG_OPT_USE_TILELANG_INDEXER, SM120's
# default), routed like the torch row above. Not a CALLED row: checking it would import TileLang in every
# process, also where SGLang never calls it; the router takes its signature (_FP8_LOGITS, the same in 0.5.22
# and 0.5.23) and is installed only where SGLang's switch makes SGLang import the module itself.
TILELANG_FP8_LOGITS = "sglang.kernels.ops.attention.dsa.tilelang_kernel.tilelang_fp8_paged_mqa_logits"
SM120_TORCH_FP8_LOGITS = f"{_IDX}.fp8_paged_mqa_logits_torch_sm120"
TILELANG_INDEXER_SWITCH = "SGLANG_OPT_USE_TILELANG_INDEXER"  # SGLang's environment switch for the TileLang row
# DeepGEMM's fp4 logits (what forward_c4_indexer imports for the fp4 indexer once the TileLang switch is off).
# SGLANG_DSV4_FP4_LOGITS=triton stands a router in for it where SGLang would raise instead (the switch on, SM120's
# default), and turns the switch off for that call. Not a CALLED row, like TILELANG_FP8_LOGITS: checking it would
# load DeepGEMM's CUDA library in every process; the router takes the signature of sgl-deep-gemm 0.2.3's wrapper
# (q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, clean_logits=False,
# logits_dtype=torch.float, indices=None), of which forward_c4_indexer passes the first eight.
DEEPGEMM_FP4_LOGITS = "deep_gemm.fp8_fp4_paged_mqa_logits"
_PARALLEL = "sglang.srt.distributed.parallel_state"
MODEL_PARALLEL_INITIALIZED = Target(
    f"{_PARALLEL}.model_parallel_is_initialized", "()", "pool", ALWAYS, "whether a TP group exists to count ranks in"
)
TP_GROUP = Target(f"{_PARALLEL}.get_tp_group", "()", "pool", ALWAYS, "the TP group whose ranks the record counts")
CALLED: list[Target] = [
    # indexer: the bf16 store follows SGLang's own compressor plan
    # (runtime/hooks/indexer.py, store_compressed_index_k_bf16)
    Target(
        f"{_CMP_MODULE}.compress_forward",
        "(kv_score_buffer, kv_score_input, ape, plan, *, head_dim, compress_ratio, out=None, is_online=False)",
        "indexer",
        BF16,
        "SGLang's compression of the c4 indexer's keys, before our bf16 store",
    ),
    Target(f"{_CMP_MODULE}.is_overlap_compress", "(compress_ratio)", "indexer", BF16, "state-buffer width"),
    Target(
        f"{_CMP_MODULE}._extract_positions_from_plan",
        "(plan, compress_ratio)",
        "indexer",
        BF16,
        "RoPE positions of the compressed rows",
    ),
    Target(f"{_CMP}._get_paged_compress_metadata", "(self, compress_ratio)", "indexer", BF16, "the compress plan"),
    Target(f"{_CMP}._get_out_loc", "(self, compress_ratio)", "indexer", BF16, "the compressed rows' slots"),
    Target(
        f"{_IDX}.Compressor.compute_kv_score",
        "(self, x, forward_batch)",
        "indexer",
        BF16,
        "the compressor's key/score projection",
    ),
    Target(f"{_IDX}.Compressor.get_state_pool", "(self, attn_backend)", "indexer", BF16, "the compressor's state pool"),
    # indexer: the bf16 forward_c4_indexer runs SGLang's own query preparation and top-k, chosen as SGLang does
    Target(
        f"{_IDX}.C4IndexerBackendMixin._forward_prepare_multi_stream",
        "(self, x, q_lora, c4_indexer, positions, forward_batch, alt_streams=None, q_lora_ready=None)",
        "indexer",
        BF16,
        "queries and weights (our compute_q hook makes them bf16), multi-stream",
    ),
    Target(
        f"{_IDX}.C4IndexerBackendMixin._forward_prepare_normal",
        "(self, x, q_lora, c4_indexer, positions, forward_batch, skip_compressor=False, q_lora_quant=None)",
        "indexer",
        BF16,
        "queries and weights (our compute_q hook makes them bf16)",
        (
            OnRelease(
                "0.5.22",
                "no q_lora_quant: the bf16 path passes none to it",
                "(self, x, q_lora, c4_indexer, positions, forward_batch, skip_compressor=False)",
            ),
        ),
    ),
    Target(f"{_IDX}.get_global_indexer_capturer", "()", "indexer", BF16, "refuse bf16 with the top-k capturer"),
    Target(f"{_IDX}.iter_row_chunks", "(*, num_rows, rows_per_chunk)", "indexer", BF16, "SGLang's logits row chunks"),
    # indexer: SGLANG_DSV4_FP4_LOGITS=triton reads and, for one call, overrides the switch forward_c4_indexer tests
    # before it raises on the fp4 indexer (DEEPGEMM_FP4_LOGITS)
    Target(f"{_IDX}.envs", ANY_SIGNATURE, "indexer", ALWAYS, "SGLang's environment fields (its TileLang switch)"),
    Target(f"{_IDX}.is_hip", "()", "indexer", ALWAYS, "HIP has its own fp4 logits (aiter): never routed"),
    Target(f"{_IDX}.DSATopKBackend.is_torch", "(self)", "indexer", BF16, "top-k branch selection"),
    Target(f"{_IDX}.DSATopKBackend.is_flashinfer", "(self)", "indexer", BF16, "top-k branch selection"),
    Target(f"{_IDX}.DSATopKBackend.should_use_topk_v2", "(self)", "indexer", BF16, "top-k branch selection"),
    Target(f"{_IDX}.topk_transform_pytorch_vectorized", _TOPK, "indexer", BF16, "top-k, torch backend"),
    # The backend's flashinfer_topk_transform is an instance attribute bound to one of these two.
    Target(f"{_IDX}.topk_transform_flashinfer_fused", _TOPK, "indexer", BF16, "top-k, flashinfer (fused)"),
    Target(f"{_IDX}.topk_transform_flashinfer_unfused", _TOPK, "indexer", BF16, "top-k, flashinfer"),
    Target(
        f"{_IDX}.plan_topk_v2",
        "(seq_lens, static_threshold=-1, *, out=None)",
        "indexer",
        BF16,
        "top-k v2 plan of a row chunk",
        (OnRelease("0.5.22", "no out= (the hook passes none)", "(seq_lens, static_threshold=-1)"),),
    ),
    Target(
        f"{_IDX}.topk_transform_paged_v2",
        "(scores, seq_lens, page_tables, out_page_indices, page_size, metadata, out_raw_indices=None)",
        "indexer",
        BF16,
        "top-k v2",
    ),
    Target(f"{_IDX}.topk_transform_paged", _TOPK, "indexer", BF16, "top-k, SGLang's kernel"),
    # indexer: SGLANG_DSV4_FP8_LOGITS=triton hands forward_c4_indexer a router in place of SGLang's SM120 fp8
    # logits for the call; the router calls SGLang's own function for whatever ours does not take
    Target(
        SM120_TORCH_FP8_LOGITS,
        _FP8_LOGITS,
        "indexer",
        ALWAYS,
        "SGLang's SM120 torch fp8 logits, routed to kernels_sm120.paged_mqa_logits_fp8",
    ),
    # pool: the bf16 c4 indexer pool subclasses SGLang's and is built with its constructor
    Target(
        f"{_SUB}.__init__",
        "(self, size, page_size, dtype, index_head_dim, layer_num, device, enable_memory_saver, start_layer=None, "
        "end_layer=None, use_fp4_indexer=None, global_page_size=None)",
        "pool",
        BF16,
        "construct the bf16 c4 indexer pool (DeepSeekV4Bf16IndexerPool)",
    ),
    Target(f"{_SUB}.contiguous_page_row_buffers", "(self)", "pool", ALWAYS, "index-K bytes allocated (self-check)"),
    # pool: where the pool is built, each rank of SGLang's TP group says it is active (the record counts them)
    MODEL_PARALLEL_INITIALIZED,
    TP_GROUP,
    # integrity: host page rows of token indices; the pool names that identify the c4 indexer mirror and its anchor
    Target(f"{_HOST_PAGED}._to_page_indices", "(self, indices)", "integrity", INTEGRITY, "host/device page rows"),
    Target(
        "sglang.srt.mem_cache.hicache_storage.PoolName.DEEPSEEK_V4_C4_INDEXER",
        ANY_SIGNATURE,
        "integrity",
        INTEGRITY,
        "which host pool is the c4 indexer mirror",
    ),
    Target(
        "sglang.srt.mem_cache.hicache_storage.PoolName.KV",
        ANY_SIGNATURE,
        "integrity",
        INTEGRITY,
        "the anchor the mirror borrows page indices from",
    ),
]


# Where a DeepSeek-V4 server builds its model and pools: activation's guard completes or refuses there.
DSV4_BUILD_POINTS = (DSV4_MODEL_INIT, CONFIGURATOR_INIT, POOL_INIT)


def installed_sglang_version() -> str | None:
    """The installed SGLang's version (None: not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sglang")
    except PackageNotFoundError:
        return None


def rows_release(version: str | None) -> str:
    """The supported release whose rows judge SGLang ``version``: itself, else the newest (an untested SGLang)."""
    return version if version in SUPPORTED_SGLANG_VERSIONS else SUPPORTED_SGLANG_VERSIONS[-1]


def table_for(version: str | None, targets: Iterable[Target] | None = None) -> list[Target]:
    """The rows of ``targets`` (default :data:`TARGETS`) as the release judging ``version`` has them."""
    release = rows_release(version)
    rows = (t.row_for(release) for t in (TARGETS if targets is None else targets))
    return [row for row in rows if row is not None]


def installed_table() -> list[Target]:
    """The rows of the installed SGLang's release (:func:`table_for`)."""
    return table_for(installed_sglang_version())


def _format_default(value: object) -> str:
    return repr(value)


def normalised_signature(fn: Callable[..., Any]) -> str:
    """Parameter names, kinds and defaults of ``fn`` as one string, annotations dropped."""
    sig = inspect.signature(fn)
    out: list[str] = []
    star_seen = False
    for p in sig.parameters.values():
        if p.kind is p.VAR_POSITIONAL:
            out.append("*" + p.name)
            star_seen = True
            continue
        if p.kind is p.VAR_KEYWORD:
            out.append("**" + p.name)
            continue
        if p.kind is p.KEYWORD_ONLY and not star_seen:
            out.append("*")
            star_seen = True
        text = p.name
        if p.default is not p.empty:
            text += "=" + _format_default(p.default)
        out.append(text)
    return "(" + ", ".join(out) + ")"


def resolve(path: str) -> tuple[Any, str, Any]:
    """Return ``(owner, attribute_name, current_value)`` for a dotted target path."""
    owner_path, _, attr = path.rpartition(".")
    owner = pkgutil.resolve_name(owner_path)
    return owner, attr, getattr(owner, attr)


def unwrap_to_original(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Follow ``__wrapped__`` (HookRegistry and functools keep it) to the original function."""
    seen: set[int] = set()
    while hasattr(fn, "__wrapped__") and id(fn) not in seen:
        seen.add(id(fn))
        fn = fn.__wrapped__
    return fn


@dataclass(frozen=True)
class Drift:
    target: str
    expected: str
    actual: str | None  # None: the target is missing
    detail: str

    def describe(self) -> str:
        if self.actual is None:
            return f"{self.target}: missing ({self.detail})"
        return (
            f"{self.target}: signature drifted: expected {self.expected}, found {self.actual} "
            f"({parameter_difference(self.expected, self.actual)})"
        )


def _parameters(signature: str) -> list[str]:
    return [p.strip() for p in signature.strip()[1:-1].split(",") if p.strip()]


def parameter_difference(expected: str, actual: str) -> str:
    """What one signature has that the other has not, in words: "found lacks q_lora_quant=None"."""
    wanted, found = _parameters(expected), _parameters(actual)
    lacking = [p for p in wanted if p not in found]
    extra = [p for p in found if p not in wanted]
    words = ([f"found lacks {', '.join(lacking)}"] if lacking else []) + (
        [f"found adds {', '.join(extra)}"] if extra else []
    )
    return "; ".join(words) or "same parameters in another order"


def check_targets(targets: Iterable[Target] | None = None) -> list[Drift]:
    """Compare every target with the installed SGLang; return the drifts (empty: all match).

    The comparison is made on the original function (through ``__wrapped__``), so a target
    that is already hooked, by us or by another plugin, is still judged by what SGLang ships.
    By default the rows of the installed release are checked (:func:`table_for`).
    """
    drifts: list[Drift] = []
    for target in table_for(installed_sglang_version()) if targets is None else targets:
        try:
            _, _, current = resolve(target.path)
        except (ImportError, AttributeError, ValueError) as exc:
            drifts.append(Drift(target.path, target.signature, None, f"{type(exc).__name__}: {exc}"))
            continue
        if target.signature == ANY_SIGNATURE:
            continue  # a signature-agnostic guard: being there is enough
        try:
            actual = normalised_signature(unwrap_to_original(current))
        except (TypeError, ValueError) as exc:
            drifts.append(Drift(target.path, target.signature, None, f"not inspectable: {exc}"))
            continue
        if actual != target.signature:
            drifts.append(Drift(target.path, target.signature, actual, "signature differs"))
    return drifts


def target_modules(targets: Iterable[Target]) -> list[str]:
    """The SGLang modules holding ``targets``, in table order, each once."""
    return list(dict.fromkeys(t.module for t in targets))


def owner_of(target: Target) -> Any:
    """The module or class that holds ``target`` (imports it)."""
    return pkgutil.resolve_name(target.owner_path)
