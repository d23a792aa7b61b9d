"""PD handshake: the KV layout string carries the index-K dtype.

Why: a bf16 prefill paired with an fp8 decode (or the reverse) has index-K items of
16384 B on one side and 8448 B on the other. SGLang's transfer engines write with the
*source* item length and do not compare it with the peer's for DSV4's non-unified kv_data,
so such a pair silently corrupts decode memory (docs/patch-point-map.md, "PD").

How: an AFTER hook on ``DeepSeekV4TokenToKVPool.pd_kv_layout`` appends ``,c4idx:bf16``
when the pool's c4 indexer is bf16. Both roles exchange this string and SGLang's own check
(``disaggregation/common/conn.py``: "KV layout mismatch") refuses the pair, naming both
layouts. fp8 pools keep the stock string, so an fp8 extension peer still pairs with a
stock SGLang peer.

SGLang 0.5.22 has no ``pd_kv_layout`` and no KV layout check between the roles. There a BEFORE
hook on each role's ``_init_kv_manager`` (``PrefillBootstrapQueue``, ``DecodePreallocQueue``) refuses
a bf16 index-K pool, naming the release, before any KV manager registers with a peer: the pair could
not be told apart. fp8/fp4 pools pass untouched (the source series, ``patches/sglang-0.5.22/0004``,
carries the dtype in ``kv_cache_dtype`` instead).

Upstream status: not upstream (no bf16 index-K upstream).
Retire when: SGLang encodes the indexer dtype in ``pd_kv_layout`` (or checks item lengths against the
peer for DSV4 kv_data).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang_dsv4_ext.errors import Bf16IndexKUnsupported
from sglang_dsv4_ext.runtime import compat
from sglang_dsv4_ext.runtime.index_k.dtype import stores_bf16_index_k

if TYPE_CHECKING:
    from sglang_dsv4_ext.runtime.hooks import Hook, HookContext
    from sglang_dsv4_ext.runtime.sglang_types import DSV4TokenToKVPool

INDEX_K_LAYOUT_TAG = "c4idx"


def _after_pd_kv_layout(result: str, self: DSV4TokenToKVPool) -> str | None:
    if result.endswith(f",{INDEX_K_LAYOUT_TAG}:bf16"):
        return None  # an SGLang built with patches/0004 already says it
    index_pool = getattr(self, "index_pools", {}).get(4)
    if index_pool is not None and stores_bf16_index_k(index_pool):
        return f"{result},{INDEX_K_LAYOUT_TAG}:bf16"
    return None  # keep SGLang's string


def _before_init_kv_manager(self: object, *args: object, **kwargs: object) -> None:
    """SGLang 0.5.22: no channel tells a PD peer the index-K dtype, so a bf16 index-K pool is refused."""
    index_pool = getattr(getattr(self, "token_to_kv_pool", None), "index_pools", {}).get(4)
    if index_pool is not None and stores_bf16_index_k(index_pool):
        raise Bf16IndexKUnsupported(
            f"SGLANG_DSV4_INDEX_K_DTYPE=bf16 with PD disaggregation needs SGLang 0.5.23 or later: SGLang "
            f"0.5.22 has no pd_kv_layout, so a bf16 peer and an fp8 peer could not tell each other apart and "
            f"the transfer would corrupt decode memory ({type(self).__name__}). Use fp8 index-K, SGLang 0.5.23, "
            f"or SGLang 0.5.22 built with patches/sglang-0.5.22"
        )
    return None


def hooks(ctx: HookContext) -> list[Hook]:
    from sglang_dsv4_ext.runtime.hooks import Hook

    return [
        Hook(compat.PD_KV_LAYOUT, _after_pd_kv_layout, "after"),
        Hook(compat.PD_PREFILL_KV_MANAGER, _before_init_kv_manager, "before"),
        Hook(compat.PD_DECODE_KV_MANAGER, _before_init_kv_manager, "before"),
    ]
