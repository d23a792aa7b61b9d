"""Protocol types for the SGLang objects the hooks touch: what a hook may rely on, in one place.

SGLang's classes carry few annotations and importing them costs seconds, so the hooks name these
structural types instead (imported under ``TYPE_CHECKING`` only: nothing here runs in a server).
Each Protocol lists the members our hooks use, no more; :data:`IMPLEMENTED_BY` names the SGLang class
each describes, and ``tests/unit/hooks/test_sglang_types.py`` checks every listed member against it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch


class LayerDoneCounter(Protocol):
    """``sglang.srt.managers.cache_controller.LayerDoneCounter``: HiCache's per-layer load events."""

    num_layers: int
    consumer_index: int

    def wait_until(self, threshold: int) -> None: ...

    def set_consumer(self, index: int) -> None: ...


class IndexerSubPool(Protocol):
    """``DeepSeekV4IndexerPool``: one ratio's index-K storage inside the DSV4 pool."""

    page_size: int  # compressed slots per index-K page
    global_page_size: int  # full tokens per page (SGLang's token page)
    index_head_dim: int
    layer_num: int
    use_fp4_indexer: bool
    index_k_with_scale_buffer: list[torch.Tensor]

    def contiguous_page_row_buffers(self) -> list[torch.Tensor]: ...


class DSV4TokenToKVPool(Protocol):
    """``DeepSeekV4TokenToKVPool``: the DSV4 KV pool whose index-K the hooks store, gate and check."""

    start_layer: int
    layer_transfer_counter: LayerDoneCounter | None
    index_pools: dict[int, IndexerSubPool]
    c4_indexer_kv_pool: IndexerSubPool | None  # None for a model without c4 layers (DeepSeek-V4.1)
    layer_mapping: Sequence[Any]
    compression_ratios: Sequence[int]  # per layer of the model

    def wait_layer_transfer(self, layer_id: int) -> None: ...

    def get_index_k_with_scale_buffer(self, layer_id: int) -> torch.Tensor: ...


class PagedHostPool(Protocol):
    """``DeepSeekV4PagedHostPool``: HiCache's host mirror of a device sub-pool (integrity checksums)."""

    slot_page_size: int

    def _to_page_indices(self, indices: torch.Tensor) -> torch.Tensor: ...


class TopKBackend(Protocol):
    """``DSATopKBackend``: which of SGLang's top-k transforms runs (the bf16 indexer chooses as SGLang does)."""

    def is_torch(self) -> bool: ...

    def is_flashinfer(self) -> bool: ...

    def should_use_topk_v2(self) -> bool: ...


class PoolEntry(Protocol):
    """``sglang.srt.mem_cache.pool_host.group.PoolEntry``: one host pool of a HiCache host pool group."""

    name: Any  # SGLang's PoolName
    host_pool: Any


class HostPoolGroup(Protocol):
    """``sglang.srt.mem_cache.pool_host.group.HostPoolGroup``: the host pools one HiCache stack keeps together."""

    entries: list[PoolEntry]
    anchor_entry: PoolEntry  # the pool whose page indices the others borrow


class Req(Protocol):
    """``sglang.srt.managers.schedule_batch.Req``: one request."""

    rid: str


class GroupCoordinator(Protocol):
    """``sglang.srt.distributed.parallel_state.GroupCoordinator``: one of SGLang's process groups (its ranks)."""

    ranks: list[int]


class PoolConfigurator(Protocol):
    """``DSV4PoolConfigurator``: what it budgeted for index-K (the pool's startup self-check compares with it)."""

    indexer_bytes_per_token: int
    stage_owner_layers: dict[int, list[int]]  # compress ratio -> this stage's layers owning its storage


class HostPoolAnchor(Protocol):
    """``LogicalHostPool``: one HiCache host pool; its ``storage_format_tag`` goes into the L3 keys."""

    storage_format_tag: str | None


class ForwardMode(Protocol):
    """``sglang.srt.model_executor.forward_batch_info.ForwardMode``: what kind of step a batch is."""

    def is_idle(self) -> bool: ...


class ForwardBatch(Protocol):
    """``sglang.srt.model_executor.forward_batch_info.ForwardBatch``: the batch a forward pass runs."""

    forward_mode: ForwardMode


class RMSNorm(Protocol):
    """``sglang.srt.layers.layernorm.RMSNorm``: the compressor's key norm (the bf16 store applies it)."""

    weight: torch.Tensor
    variance_epsilon: float


class Compressor(Protocol):
    """``sglang.srt.layers.attention.dsv4.compressor.Compressor``: compresses a layer's keys (the c4 indexer's too)."""

    is_in_indexer: bool
    ratio: int
    head_dim: int
    ape: torch.Tensor
    norm: RMSNorm
    freqs_cis: torch.Tensor

    def compute_kv_score(self, x: torch.Tensor, forward_batch: ForwardBatch) -> torch.Tensor: ...

    def get_state_pool(self, attn_backend: DSV4AttentionBackend) -> Any: ...


class C4Indexer(Protocol):
    """``sglang.srt.layers.attention.dsv4.indexer.C4Indexer``: the c4 indexer's query side of one layer."""

    layer_id: int
    use_fp4_indexer: bool
    n_local_heads: int
    head_dim: int
    weight_scale: float
    freqs_cis: torch.Tensor
    wq_b: Callable[[torch.Tensor], tuple[torch.Tensor, Any]]  # ReplicatedLinear: (output, bias)


class DSV4AttentionBackend(Protocol):
    """SGLang's DSV4 attention backend (``CompressorBackendMixin`` + ``C4IndexerBackendMixin``)."""

    token_to_kv_pool: DSV4TokenToKVPool
    forward_metadata: Any
    hisparse_coordinator: Any
    dsa_topk_backend: TopKBackend
    debug_use_external_c4_sparse_indices: bool
    flashinfer_topk_transform: Callable[..., None]  # bound in __init__ to SGLang's fused or unfused transform
    # Its parameters differ by release (0.5.22 has no q_lora_quant): compat.py's row checks them per release.
    _forward_prepare_normal: Callable[..., tuple[torch.Tensor, torch.Tensor]]

    def _get_paged_compress_metadata(self, compress_ratio: int) -> Any: ...

    def _get_out_loc(self, compress_ratio: int) -> torch.Tensor: ...

    def _forward_prepare_multi_stream(
        self,
        x: torch.Tensor,
        q_lora: torch.Tensor,
        c4_indexer: C4Indexer,
        positions: torch.Tensor,
        forward_batch: ForwardBatch,
        alt_streams: Sequence[torch.cuda.Stream] | None = None,
        q_lora_ready: torch.cuda.Event | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


# Protocol -> the SGLang class (dotted path) it describes; checked by tests/unit/hooks/test_sglang_types.py.
_MP = "sglang.srt.mem_cache.deepseek_v4_memory_pool"
IMPLEMENTED_BY: dict[type, str] = {
    LayerDoneCounter: "sglang.srt.managers.cache_controller.LayerDoneCounter",
    IndexerSubPool: f"{_MP}.DeepSeekV4IndexerPool",
    DSV4TokenToKVPool: f"{_MP}.DeepSeekV4TokenToKVPool",
    PagedHostPool: "sglang.srt.mem_cache.memory_pool_host.DeepSeekV4PagedHostPool",
    TopKBackend: "sglang.srt.layers.attention.dsa.dsa_topk_backend.DSATopKBackend",
    DSV4AttentionBackend: "sglang.srt.layers.attention.deepseek_v4_backend.DeepseekV4AttnBackend",
    GroupCoordinator: "sglang.srt.distributed.parallel_state.GroupCoordinator",
    PoolEntry: "sglang.srt.mem_cache.pool_host.group.PoolEntry",
    HostPoolGroup: "sglang.srt.mem_cache.pool_host.group.HostPoolGroup",
    Req: "sglang.srt.managers.schedule_batch.Req",
    PoolConfigurator: "sglang.srt.model_executor.pool_configurator.DSV4PoolConfigurator",
    HostPoolAnchor: "sglang.srt.mem_cache.memory_pool_host.LogicalHostPool",
    ForwardMode: "sglang.srt.model_executor.forward_batch_info.ForwardMode",
    ForwardBatch: "sglang.srt.model_executor.forward_batch_info.ForwardBatch",
    RMSNorm: "sglang.srt.layers.layernorm.RMSNorm",
    Compressor: "sglang.srt.layers.attention.dsv4.compressor.Compressor",
    C4Indexer: "sglang.srt.layers.attention.dsv4.indexer.C4Indexer",
}
