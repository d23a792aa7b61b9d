"""The index-K read gate on DeepSeek-V4.1's shared ratio-1/2 sub-pools (the bundled V4.1-Flash config).

SGLang 0.5.23's real pool is built from the config through SGLang's configurator and builder on CPU; the
real ``LayerDoneCounter`` carries the pending load (as in test_gate.py: ``tests.support.gate_doubles.StreamWaits``
observes which layers the reading stream waited for). A ratio-1/2 sub-pool layer is loaded by HiCache with
its kv_source layer's transfer (``hybrid_pool_assembler._dsv4_low_ratio_entries``), so a read through the
sub-pool must wait for that source layer: not an earlier one (stale data) and not the later readers
(a needless stall, and in strict mode a refusal of SGLang's own gated getters).
"""

from __future__ import annotations

import pytest
import torch

from sglang_dsv4_ext import errors
from sglang_dsv4_ext.tools.sglang_cpu import dsv4_model
from tests.support import gate_doubles as gd
from tests.support.dsv4_pools import sized_pool
from tests.support.releases import ONLY_WITH_0_5_23_V41

pytestmark = ONLY_WITH_0_5_23_V41

V41 = dsv4_model.load_model(bundled="v4.1-flash")
SERVER_ARGS = dict(swa_full_tokens_ratio=0.1, _swa_full_tokens_ratio_explicitly_set=True)
SLOTS = torch.arange(4)


@pytest.fixture
def v41_pool(ext_active, gate_mode):
    def build(mode):
        gate_mode(mode)
        with sized_pool(model=V41, budget_bytes=64 << 20, **SERVER_ARGS) as (_, _, pool):
            return pool

    return build


def _hicache_sources(pool):
    """{ratio: {sub-pool layer: global layer whose HiCache transfer loads it}} from SGLang's own host entries."""
    from sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler import _dsv4_low_ratio_regions

    result = {}
    for _, device_pool, _, layer_mapping in _dsv4_low_ratio_regions(pool, dsv4_model.PAGE_SIZE):
        for ratio, index_pool in pool.index_pools.items():
            if device_pool is index_pool:
                result[ratio] = {local: transfer + pool.start_layer for transfer, local in layer_mapping.items()}
    return result


def test_every_low_ratio_reader_maps_to_its_kv_source_as_hicache_loads_it(v41_pool):
    pool = v41_pool("strict")
    hicache = _hicache_sources(pool)
    assert set(hicache) == {1, 2}
    for layer, ratio in enumerate(V41.compress_ratios[: V41.num_hidden_layers]):
        if ratio not in (1, 2):
            continue
        local = pool.layer_mapping[layer].compress_layer_id
        source = pool.source_layer_of(layer)
        assert pool.index_pools[ratio]._dsv4_gate_global_layers[local] == source == hicache[ratio][local]


def test_strict_refuses_each_shared_subpool_read_until_its_source_load_was_waited(v41_pool):
    pool = v41_pool("strict")
    waits = gd.StreamWaits.on(pool)
    waits.start_load()
    sources = sorted((s, r, k) for r, layers in V41.low_ratio_sources().items() for k, s in enumerate(layers))
    for source, ratio, local in sources:  # 2, 8, 14 (ratio 2), then 20 (ratio 1), as HiCache loads them
        sub = pool.index_pools[ratio]
        with pytest.raises(errors.DSV4IndexKGateError, match=rf"layer {source}'s index-K"):
            sub.get_index_k_fp4(local, SLOTS)
        with pytest.raises(errors.DSV4IndexKGateError, match=rf"layer {source}'s index-K"):
            sub.index_k_with_scale_buffer[local]
        pool.wait_layer_transfer(source)
        assert waits.covered() == source
        payload, _ = sub.get_index_k_fp4(local, SLOTS)
        assert payload.shape == (4, 64)
        # SGLang's own getters for every layer reading this storage pass now.
        readers = [
            layer
            for layer in range(V41.num_hidden_layers)
            if V41.compress_ratios[layer] == ratio and pool.source_layer_of(layer) == source
        ]
        for layer in readers:
            assert pool.get_low_ratio_index_k_dequant(layer, SLOTS).shape == (4, 128)


def test_auto_waits_for_the_source_layer_not_the_reader(v41_pool):
    pool = v41_pool("auto")
    waits = gd.StreamWaits.on(pool)
    for ratio, layers in V41.low_ratio_sources().items():
        for local, source in enumerate(layers):
            consumer = waits.start_load()
            pool.index_pools[ratio].get_index_k_dequant(local, SLOTS)
            assert waits.covered() == source  # waited up to the source, no further
            assert (consumer, source) in waits.stream_waits
            waits.clear()
