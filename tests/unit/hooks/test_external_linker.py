"""bf16 index-K is refused on the external-linker path (direct L3 keys carry no index-K dtype).

SGLang's real ``create_unified_cache_linker`` (hooked, and unwrapped through ``__wrapped__`` for
stock) with SGLang's real DSV4 pools built on CPU. ``params`` is a duck-typed CacheInitParams
carrying only the allocator's ``get_kvcache()`` (the real one needs a scheduler). The linkers
themselves (mooncake / mori stores) cannot be built here; an unknown backend name shows where
SGLang's own code is reached: it raises its "Unknown ... backend" error only after our check.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sglang_dsv4_ext import errors
from tests.support.dsv4_pools import sized_pool
from tests.support.releases import only_on

pytestmark = only_on(
    "0.5.23",
    "0.5.22 has no unified_cache.linker_factory; its refusal there is at the DeepSeek-V4 "
    "direct-linker pool group (tests/unit/hooks/test_release_paths.py)",
)

RATIO_MODE = dict(swa_full_tokens_ratio=0.1, _swa_full_tokens_ratio_explicitly_set=True)


def _params(pool):
    return SimpleNamespace(token_to_kv_pool_allocator=SimpleNamespace(get_kvcache=lambda: pool))


def _create(fn, pool, backend):
    return fn(None, _params(pool), backend=backend, config=None, components=set())


@pytest.fixture(params=["bf16", "fp8"])
def pool(request, ext_active, monkeypatch):
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", request.param)
    with sized_pool(**RATIO_MODE) as (_, _, built):
        yield request.param, built


@pytest.mark.parametrize("backend", ["mooncake", "mori", "dynamic"])
def test_bf16_refused_naming_the_flag_fp8_untouched(pool, backend):
    from sglang.srt.mem_cache.unified_cache import linker_factory

    dtype, kv_pool = pool
    if dtype == "bf16":
        with pytest.raises(errors.Bf16IndexKUnsupported, match="--enable-unified-cache-external-linker"):
            _create(linker_factory.create_unified_cache_linker, kv_pool, backend)
    else:
        with pytest.raises(ValueError, match="Unknown unified cache external linker backend"):
            _create(linker_factory.create_unified_cache_linker, kv_pool, "not-a-backend")


def test_stock_lets_bf16_through_to_the_linker(pool):
    """Regression replay: unwrapped, SGLang goes on to build a linker for a bf16 pool."""
    from sglang.srt.mem_cache.unified_cache import linker_factory

    with pytest.raises(ValueError, match="Unknown unified cache external linker backend"):
        _create(linker_factory.create_unified_cache_linker.__wrapped__, pool[1], "not-a-backend")
