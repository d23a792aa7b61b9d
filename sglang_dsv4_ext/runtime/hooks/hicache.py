"""HiCache index-K: page-aligned transfers only (every dtype), and a dtype tag on L3 keys.

Why: (a) the fused indexer host region is registered with ``page_aligned_only=False``, so
a transfer that is not a whole number of pages falls back to ``transfer_cache_dsv4_mla``,
whose kernel hard-codes the 584-B C4 main-KV page; on an index-K row (132 B fp8, 68 B fp4
on CUDA, 256 B bf16 per token) it addresses the wrong bytes. Stock leaves this latent for
fp8 and fp4 as well, so it is fixed for every index-K dtype, not only ours.
(b) HiCache L3 keys are ``storage_model_name(model, anchor)`` plus the pool name; nothing
encodes the index-K dtype, so a shared L3 store could serve fp8 index-K pages to a bf16
server or the reverse (docs/patch-point-map.md, "HiCache").

How: (a) an AFTER hook on ``_dsv4_indexer_regions`` returns the regions with
``page_aligned_only=True`` for every CUDA index-K layout (``dataclasses.replace``; the
dataclass is frozen): SGLang's host pool then refuses a token-granular transfer with a
clear error instead of reaching the 584-B kernel. NPU storage keeps its own transfer path
and is left alone. Item bytes already follow the buffers (16384 B per page row for bf16).
(b) an AROUND hook on ``build_deepseek_v4_hicache_stack`` marks the build of a bf16 stack,
and an AFTER hook on ``LogicalHostPool.__init__`` sets that anchor's
``storage_format_tag`` (SGLang's own mechanism for page-format-specific keys) to
``dsv4-idxk-bf16``. fp8 stacks keep the stock keys.

(c) With ``--enable-unified-cache-external-linker`` SGLang's mooncake and mori (umbp) direct
linkers build their storage config with ``model_name=get_model().model_path``, bypassing
``storage_model_name``: bf16 and fp8 servers sharing one store would exchange 16384-B and
8448-B page rows. An AROUND hook on ``create_unified_cache_linker`` refuses a bf16 index-K
pool there, naming the flag, before any linker or store is built; fp8/fp4 pass untouched. SGLang
0.5.22 has no ``create_unified_cache_linker`` (``mem_cache/registry.py`` builds the linker): there the
same refusal is an AROUND hook on ``_build_deepseek_v4_device_pool_group``, where the direct linker
maps a DeepSeek-V4 pool, before any page is stored.

Upstream status: not upstream.
Retire when: SGLang registers the indexer region page-aligned (or fixes the token-granular kernel for
index-K rows) and keys L3 pages by index-K dtype.
"""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from sglang_dsv4_ext.errors import Bf16IndexKUnsupported
from sglang_dsv4_ext.runtime import compat
from sglang_dsv4_ext.runtime.index_k.dtype import stores_bf16_index_k

if TYPE_CHECKING:
    from sglang_dsv4_ext.runtime.hooks import Hook, HookContext
    from sglang_dsv4_ext.runtime.sglang_types import DSV4TokenToKVPool, HostPoolAnchor

_Result = TypeVar("_Result")

L3_FORMAT_TAG = "dsv4-idxk-bf16"

# Set while a DSV4 HiCache stack whose c4 indexer is bf16 is being built in this context.
_building_bf16_stack: contextvars.ContextVar[bool] = contextvars.ContextVar("dsv4_ext_bf16_stack", default=False)


def _kvcache_stores_bf16_index_k(kvcache: DSV4TokenToKVPool | None) -> bool:
    return stores_bf16_index_k(getattr(kvcache, "c4_indexer_kv_pool", None))


def _after_indexer_regions(result: list[Any], kvcache: DSV4TokenToKVPool, page_size: int) -> list[Any] | None:
    # result: SGLang's frozen region dataclasses (each with page_aligned_only)
    # NPU stores index-K in its own PA_ND buffers with their own transfer ops; not ours to change.
    if getattr(getattr(kvcache, "c4_indexer_kv_pool", None), "has_npu_storage", False):
        return None
    if all(region.page_aligned_only for region in result):
        return None  # SGLang's HIP fp4 split already refuses token-granular copies
    return [dataclasses.replace(region, page_aligned_only=True) for region in result]


def _around_build_stack(original: Callable[..., _Result], *args: object, **kwargs: Any) -> _Result:
    token = _building_bf16_stack.set(_kvcache_stores_bf16_index_k(kwargs.get("kvcache")))
    try:
        return original(*args, **kwargs)
    finally:
        _building_bf16_stack.reset(token)


def _after_logical_host_pool_init(result: None, self: HostPoolAnchor, *args: object, **kwargs: object) -> None:
    if _building_bf16_stack.get():
        existing = getattr(self, "storage_format_tag", None)
        if existing and existing.endswith(L3_FORMAT_TAG):
            return None  # an SGLang built with patches/0003 already tags it
        self.storage_format_tag = f"{existing}-{L3_FORMAT_TAG}" if existing else L3_FORMAT_TAG
    return None


def _refuse_external_linker(kvcache: DSV4TokenToKVPool, backend: str) -> None:
    if _kvcache_stores_bf16_index_k(kvcache):
        raise Bf16IndexKUnsupported(
            f"SGLANG_DSV4_INDEX_K_DTYPE=bf16 cannot be combined with --enable-unified-cache-external-linker "
            f"(backend {backend}): its direct linkers key L3 pages on the model path alone, so bf16 and fp8 "
            f"servers sharing a store would exchange pages of different layouts. Use HiCache "
            f"(--enable-hierarchical-cache with --hicache-storage-backend), whose keys carry the index-K dtype, "
            f"or fp8 index-K"
        )


def _around_create_external_linker(
    original: Callable[..., _Result],
    server_args: object,
    params: Any,
    *,
    backend: object,
    config: object,
    components: object,
    forward_stream: object = None,
) -> _Result:
    _refuse_external_linker(params.token_to_kv_pool_allocator.get_kvcache(), repr(backend))
    return original(
        server_args, params, backend=backend, config=config, components=components, forward_stream=forward_stream
    )


def _around_dsv4_linker_pool_group(
    original: Callable[..., _Result], kvcache: DSV4TokenToKVPool, page_size: int, *args: object, **kwargs: object
) -> _Result:
    # SGLang 0.5.22: the direct linker's DeepSeek-V4 pool group (mem_cache/registry.py picks the backend).
    _refuse_external_linker(kvcache, "--unified-cache-external-linker-backend")
    return original(kvcache, page_size, *args, **kwargs)


def hooks(ctx: HookContext) -> list[Hook]:
    from sglang_dsv4_ext.runtime.hooks import Hook

    return [
        Hook(compat.HICACHE_INDEXER_REGIONS, _after_indexer_regions, "after"),
        Hook(compat.HICACHE_BUILD_STACK, _around_build_stack, "around"),
        Hook(compat.LOGICAL_HOST_POOL_INIT, _after_logical_host_pool_init, "after"),
        Hook(compat.EXTERNAL_LINKER_CREATE, _around_create_external_linker, "around"),
        Hook(compat.EXTERNAL_LINKER_DSV4_POOL_GROUP, _around_dsv4_linker_pool_group, "around"),
    ]
