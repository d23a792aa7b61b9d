"""Protocol types for the SGLang objects the hooks touch: what a hook may rely on, in one place.

SGLang's classes carry few annotations and importing them costs seconds, so the hooks name these
structural types instead (imported under ``TYPE_CHECKING`` only: nothing here runs in a server).
Each Protocol lists the members our hooks use, no more; :data:`IMPLEMENTED_BY` names the SGLang class
each describes, and ``tests/unit/hooks/test_sglang_types.py`` checks every listed method against it.
"""

from __future__ import annotations

from collections.abc import Sequence
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

    page_size: int
    index_head_dim: int
    layer_num: int
    index_k_with_scale_buffer: list[torch.Tensor]

    def contiguous_page_row_buffers(self) -> list[torch.Tensor]: ...


class DSV4TokenToKVPool(Protocol):
    """``DeepSeekV4TokenToKVPool``: the DSV4 KV pool whose index-K the hooks store, gate and check."""

    start_layer: int
    layer_transfer_counter: LayerDoneCounter | None
    index_pools: dict[int, IndexerSubPool]
    c4_indexer_kv_pool: IndexerSubPool
    layer_mapping: Sequence[Any]

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


class DSV4AttentionBackend(Protocol):
    """SGLang's DSV4 attention backend (``CompressorBackendMixin`` + ``C4IndexerBackendMixin``)."""

    token_to_kv_pool: DSV4TokenToKVPool
    forward_metadata: Any
    hisparse_coordinator: Any
    dsa_topk_backend: TopKBackend
    debug_use_external_c4_sparse_indices: bool

    def _get_paged_compress_metadata(self, compress_ratio: int) -> Any: ...

    def _get_out_loc(self, compress_ratio: int) -> torch.Tensor: ...


# Protocol -> the SGLang class (dotted path) it describes; checked by tests/unit/hooks/test_sglang_types.py.
_MP = "sglang.srt.mem_cache.deepseek_v4_memory_pool"
IMPLEMENTED_BY: dict[type, str] = {
    LayerDoneCounter: "sglang.srt.managers.cache_controller.LayerDoneCounter",
    IndexerSubPool: f"{_MP}.DeepSeekV4IndexerPool",
    DSV4TokenToKVPool: f"{_MP}.DeepSeekV4TokenToKVPool",
    PagedHostPool: "sglang.srt.mem_cache.memory_pool_host.DeepSeekV4PagedHostPool",
    TopKBackend: "sglang.srt.layers.attention.dsa.dsa_topk_backend.DSATopKBackend",
    DSV4AttentionBackend: "sglang.srt.layers.attention.deepseek_v4_backend.DeepseekV4AttnBackend",
}
