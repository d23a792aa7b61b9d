"""HiCache for a bf16 index-K: page-aligned transfers only, and a dtype tag on L3 keys.

Why: (a) the fused indexer host region is registered with ``page_aligned_only=False``, so
a transfer that is not a whole number of pages falls back to ``transfer_cache_dsv4_mla``,
whose kernel hard-codes the 584-B C4 main-KV page; on a 16384-B bf16 index-K row it would
address the wrong bytes (code map D.2; latent in stock for the 132-B row too).
(b) HiCache L3 keys are ``storage_model_name(model, anchor)`` plus the pool name; nothing
encodes the index-K dtype, so a shared L3 store could serve fp8 index-K pages to a bf16
server or the reverse (code map D.2, last paragraph).

How: (a) an AFTER hook on ``_dsv4_indexer_regions`` returns the regions with
``page_aligned_only=True`` when the pool's c4 indexer is bf16 (``dataclasses.replace``;
the dataclass is frozen). Item bytes already follow the buffers: 16384 B per page row.
(b) an AROUND hook on ``build_deepseek_v4_hicache_stack`` marks the build of a bf16 stack,
and an AFTER hook on ``LogicalHostPool.__init__`` sets that anchor's
``storage_format_tag`` (SGLang's own mechanism for page-format-specific keys) to
``dsv4-idxk-bf16``. fp8 stacks keep the stock keys.

Upstream status: not upstream. Retire when: SGLang sizes/tags a bf16 index-K itself.
"""

from __future__ import annotations

import contextvars
import dataclasses

_ASM = "sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler"
_HOST = "sglang.srt.mem_cache.memory_pool_host"

L3_FORMAT_TAG = "dsv4-idxk-bf16"

# Set while a DSV4 HiCache stack whose c4 indexer is bf16 is being built in this context.
_building_bf16_stack: contextvars.ContextVar[bool] = contextvars.ContextVar("dsv4_ext_bf16_stack", default=False)


def _kvcache_has_bf16_index_k(kvcache) -> bool:
    from sglang_dsv4_ext.patches.pool import is_bf16_index_pool

    return is_bf16_index_pool(getattr(kvcache, "c4_indexer_kv_pool", None))


def _after_indexer_regions(result, kvcache, page_size):
    if not _kvcache_has_bf16_index_k(kvcache):
        return None
    return [dataclasses.replace(region, page_aligned_only=True) for region in result]


def _around_build_stack(original, *args, **kwargs):
    token = _building_bf16_stack.set(_kvcache_has_bf16_index_k(kwargs.get("kvcache")))
    try:
        return original(*args, **kwargs)
    finally:
        _building_bf16_stack.reset(token)


def _after_logical_host_pool_init(result, self, *args, **kwargs):
    if _building_bf16_stack.get():
        existing = getattr(self, "storage_format_tag", None)
        if existing and existing.endswith(L3_FORMAT_TAG):
            return None  # an SGLang built with patches/0003 already tags it
        self.storage_format_tag = f"{existing}-{L3_FORMAT_TAG}" if existing else L3_FORMAT_TAG
    return None


def hooks(ctx):
    from sglang_dsv4_ext.patches import Hook

    return [
        Hook(f"{_ASM}._dsv4_indexer_regions", _after_indexer_regions, "after"),
        Hook(f"{_ASM}.build_deepseek_v4_hicache_stack", _around_build_stack, "around"),
        Hook(f"{_HOST}.LogicalHostPool.__init__", _after_logical_host_pool_init, "after"),
    ]
