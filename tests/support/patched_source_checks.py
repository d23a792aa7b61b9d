"""Checks of the *patched SGLang sources* (patches/ applied), with the extension switched off.

Not collected by the normal run (no ``test_`` file prefix): these run against a copy of the
installed sglang package with the patch series applied, first on ``sys.path`` in a pytest
subprocess with ``-p tests.support.series_killswitch`` (see tests/integration/test_series_patches.py). Against
stock SGLang they fail: the names and behaviour they check exist only in the patched tree.

They cover what the extension's own tests check through plugin objects (its exception
classes, its hook functions), here through the source-level equivalents, on SGLang's real
classes on CPU. Stubbed, because they cannot run on CPU: the bf16 Triton kernels of
``kernels_sm120`` and SGLang's fp8 JIT query kernel (indexer dispatch checks), and the
parts of the HiCache stack build after the anchor pool is made (a gloo group, CUDA streams).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from tests.support import gate_doubles as gd
from tests.support import indexer_doubles
from tests.support.dsv4_pools import BF16_POOL_LAYOUT_MISUSES, sized_pool

RATIO_MODE = dict(swa_full_tokens_ratio=0.1, _swa_full_tokens_ratio_explicitly_set=True)


@pytest.fixture(autouse=True)
def plugin_off(ext_active):
    assert not ext_active.activated, "these checks must run with SGLANG_DSV4_EXT=0"


@pytest.fixture
def bf16_pool(monkeypatch):
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", "bf16")
    with sized_pool(**RATIO_MODE) as (_, _, pool):
        yield pool


# ---- 0002 bf16 storage ------------------------------------------------------------------------


@pytest.mark.parametrize("call", BF16_POOL_LAYOUT_MISUSES)
def test_fp8_and_fp4_layout_paths_refuse_a_bf16_pool(bf16_pool, call):
    from sglang.srt.mem_cache.deepseek_v4_memory_pool import DSV4IndexKLayoutError

    with pytest.raises(DSV4IndexKLayoutError, match="bf16 index-K"):
        call(bf16_pool)


def test_bf16_pages_view_round_trips_the_writer(bf16_pool):
    sub = bf16_pool.c4_indexer_kv_pool
    rows = torch.randn(3, 128).to(torch.bfloat16)
    bf16_pool.set_index_k_fused(2, torch.tensor([5, 64, 130]), rows)
    pages = sub.index_k_bf16_pages(0)
    assert pages.dtype == torch.bfloat16 and tuple(pages.shape[1:]) == (64, 128)
    assert torch.equal(pages[0, 5], rows[0]) and torch.equal(pages[1, 0], rows[1]) and torch.equal(pages[2, 2], rows[2])


# ---- 0003 HiCache L3 tag ------------------------------------------------------------------------


class _StopAfterAnchor(Exception):
    pass


def _anchor_of_real_stack_build(kvcache, monkeypatch):
    """Run SGLang's real build_deepseek_v4_hicache_stack up to the anchor pool, then stop."""
    import sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler as asm

    built = {}

    def first_entry(**kwargs):
        built["anchor"] = kwargs["host_pool"]
        raise _StopAfterAnchor

    monkeypatch.setattr(asm, "_deepseek_v4_num_host_pages", lambda **kw: (4, 4, 4))
    monkeypatch.setattr(asm, "build_pool_entry", first_entry)
    params = SimpleNamespace(page_size=256, mtp_draft_device_pools=[])
    with pytest.raises(_StopAfterAnchor):
        asm.build_deepseek_v4_hicache_stack(params=params, kvcache=kvcache, load_cache_event=None, storage_backend=None)
    return built["anchor"]


def test_l3_keys_of_a_bf16_stack_carry_the_index_k_dtype(monkeypatch):
    from sglang.srt.managers.cache_controller import storage_model_name
    from sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler import DSV4_BF16_INDEX_K_STORAGE_TAG

    keys = {}
    for dtype in ("fp8", "bf16"):
        monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", dtype)
        with sized_pool(**RATIO_MODE) as (_, _, pool):
            keys[dtype] = storage_model_name("DeepSeek-V4-Flash", _anchor_of_real_stack_build(pool, monkeypatch))
    assert keys["fp8"] == "DeepSeek-V4-Flash"
    # The runtime hook's tag: plugin-based and source-built servers share L3 keys.
    assert keys["bf16"] == "DeepSeek-V4-Flash-dsv4-idxk-bf16" == f"DeepSeek-V4-Flash-{DSV4_BF16_INDEX_K_STORAGE_TAG}"


# ---- 0005 gate ----------------------------------------------------------------------------------


def raw_item(buffers, index):
    return list.__getitem__(buffers, index)


def test_subpool_reads_wait_for_their_layer_in_auto_mode(gate_mode):
    gate_mode("auto")
    pool = gd.build_pool()
    sub = pool.c4_indexer_kv_pool
    waits = gd.StreamWaits.on(pool)
    for getter in ("c4_indexer_kv_pool", "index_pools", "_indexer_pool"):
        consumer = waits.start_load()
        reader = {
            "c4_indexer_kv_pool": sub,
            "index_pools": pool.index_pools[4],
            "_indexer_pool": pool._indexer_pool(4),
        }[getter]
        data = reader.get_index_k_with_scale_buffer(1)  # sub-pool layer 1 = global layer 3
        assert (consumer, 3) in waits.stream_waits, getter  # waited before the data came back
        assert data is raw_item(sub.index_k_with_scale_buffer, 1)
        waits.clear()


def test_a_read_after_the_toplevel_getter_adds_no_wait(gate_mode):
    gate_mode("auto")
    pool = gd.build_pool()
    waits = gd.StreamWaits.on(pool)
    waits.start_load()
    pool.get_index_k_with_scale_buffer(3)
    before = list(waits.stream_waits)
    pool.c4_indexer_kv_pool.get_index_k_with_scale_buffer(1)
    assert waits.stream_waits == before


def test_strict_mode_refuses_an_unwaited_subpool_read_naming_the_caller(gate_mode):
    from sglang.srt.mem_cache.deepseek_v4_memory_pool import DSV4IndexKGateError

    gate_mode("strict")
    pool = gd.build_pool()
    waits = gd.StreamWaits.on(pool)
    waits.start_load()
    with pytest.raises(DSV4IndexKGateError, match=r"layer 1's index-K .*in test_strict_mode_refuses"):
        pool.c4_indexer_kv_pool.get_index_k_with_scale_buffer(0)
    assert waits.stream_waits == []
    pool.wait_layer_transfer(1)
    assert pool.c4_indexer_kv_pool.get_index_k_with_scale_buffer(0) is raw_item(
        pool.c4_indexer_kv_pool.index_k_with_scale_buffer, 0
    )
    waits.start_load()  # the next batch: nothing waited for under the new consumer
    with pytest.raises(DSV4IndexKGateError, match="layer 1's"):
        pool.c4_indexer_kv_pool.get_index_k_with_scale_buffer(0)


def test_off_mode_and_no_pending_load_read_as_stock(gate_mode):
    gate_mode("off")
    pool = gd.build_pool()
    waits = gd.StreamWaits.on(pool)
    waits.start_load()
    pool.c4_indexer_kv_pool.get_index_k_with_scale_buffer(1)
    assert waits.stream_waits == [] and waits.wait_until_calls == []
    gate_mode("auto")
    pool = gd.build_pool()
    waits = gd.StreamWaits.on(pool)
    waits.counter.set_consumer(-1)  # HiCache on, nothing to load for this batch
    pool.c4_indexer_kv_pool.get_index_k_with_scale_buffer(1)
    assert waits.stream_waits == [] and waits.wait_until_calls == []


def test_shared_low_ratio_layers_wait_for_their_source_layer(gate_mode):
    gate_mode("strict")
    pool = gd.build_low_ratio_pool()
    waits = gd.StreamWaits.on(pool)
    waits.start_load()
    slots = torch.arange(4)
    pool.get_low_ratio_index_k_fp4(1, slots)  # source layer 1: waits for load 1 only
    assert waits.covered() == 1
    pool.get_low_ratio_index_k_fp4(2, slots)  # layer 2 reads layer 1's storage
    from sglang.srt.mem_cache.deepseek_v4_memory_pool import DSV4IndexKGateError

    with pytest.raises(DSV4IndexKGateError, match="layer 3's"):
        pool.index_pools[2].get_index_k_fp4(1, slots)


@pytest.mark.parametrize("backend", ["breakable", "tc_piecewise"])
def test_prefill_replay_waits_one_layer_ahead(gate_mode, backend):
    """SGLang's real PrefillCudaGraphRunner.execute with the stand-in replay of
    tests/integration/test_gate_prefill_replay.py (the CUDA graph itself cannot run on CPU)."""
    from tests.integration import test_gate_prefill_replay as replay_kit

    gate_mode("auto")
    replay, waits = replay_kit.replay_once(backend)
    layers = range(replay.pool.layer_num)
    assert replay.captured_reader_coverage == {layer: layer for layer in layers}
    assert replay.break_coverage == {layer: min(layer + 1, len(layers) - 1) for layer in layers}
    waits.clear()
    replay.pool.wait_layer_transfer(0)  # outside the replay: no wait ahead
    assert waits.wait_until_calls == [0]

    gate_mode("off")
    stock, _ = replay_kit.replay_once(backend)
    assert stock.captured_reader_coverage == {layer: layer - 1 for layer in layers}


def test_prefill_replay_adds_nothing_without_a_pending_load_or_for_full_graphs(gate_mode):
    from tests.integration import test_gate_prefill_replay as replay_kit

    gate_mode("auto")
    for backend in ("breakable", "tc_piecewise", "full"):
        _, waits = replay_kit.replay_once(backend, load="none")
        assert waits.stream_waits == []
    replay, waits = replay_kit.replay_once("full")
    last = replay.pool.layer_num - 1
    assert waits.wait_until_calls == [last]  # SGLang's own full-graph wait, nothing added


# ---- 0006 bf16 indexer data path ----------------------------------------------------------------


@pytest.fixture
def cuda_stubs(monkeypatch):
    """The indexer's CUDA-only launches (our bf16 Triton kernels, SGLang's JIT q kernels), recorded and computed
    by their stand-ins (tests/support/indexer_doubles.py)."""
    return indexer_doubles.CudaStubs(monkeypatch).install()


def _fake_c4_indexer(heads=4, dim=128):
    return SimpleNamespace(
        use_fp4_indexer=False,
        n_local_heads=heads,
        head_dim=dim,
        weight_scale=0.5,
        freqs_cis=torch.polar(torch.ones(8, dim // 4), torch.zeros(8, dim // 4)),  # RoPE on the last 64 dims
        wq_b=lambda q_lora: (torch.ones(q_lora.shape[0], heads * dim, dtype=torch.bfloat16), None),
    )


def test_compute_q_takes_the_bf16_path_only_for_bf16(monkeypatch, cuda_stubs):
    from sglang.srt.layers.attention.dsv4 import indexer as sg_indexer

    fake = _fake_c4_indexer()
    q_lora, positions, weight = torch.zeros(3, 16), torch.arange(3), torch.ones(3, 4)
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", "bf16")
    q, w = sg_indexer.C4Indexer.compute_q(fake, q_lora, positions, weight)
    assert cuda_stubs.called("index_q_bf16") == 1 and cuda_stubs.called("fused_q_fp8") == 0
    call = cuda_stubs.calls["index_q_bf16"][0]
    assert tuple(call["q"].shape) == (3, 4, 128) and call["weight_scale"] == 0.5
    assert q.dtype == torch.bfloat16 and tuple(w.shape) == (3, 4, 1) and torch.all(w == 0.5)
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", "fp8")
    q, _ = sg_indexer.C4Indexer.compute_q(fake, q_lora, positions, weight)
    assert q.dtype == torch.float8_e4m3fn  # what SGLang's fp8 JIT kernel hands back
    assert cuda_stubs.called("fused_q_fp8") == 1 and cuda_stubs.called("index_q_bf16") == 1


def test_indexer_and_compressor_route_a_bf16_pool_to_the_bf16_path(monkeypatch, bf16_pool):
    from sglang.srt.layers.attention.dsv4 import bf16_index_k
    from sglang.srt.layers.attention.dsv4.compressor_v2 import CompressorBackendMixin
    from sglang.srt.layers.attention.dsv4.indexer import C4IndexerBackendMixin

    routed = []
    monkeypatch.setattr(bf16_index_k, "forward_c4_indexer_bf16", lambda *a, **k: routed.append("logits"))
    monkeypatch.setattr(bf16_index_k, "store_compressed_index_k_bf16", lambda *a, **k: routed.append("store"))
    backend = SimpleNamespace(token_to_kv_pool=bf16_pool)
    batch = SimpleNamespace(forward_mode=SimpleNamespace(is_idle=lambda: False))
    C4IndexerBackendMixin.forward_c4_indexer(backend, None, None, SimpleNamespace(use_fp4_indexer=False), batch)
    CompressorBackendMixin.forward_unified(backend, None, batch, 2, SimpleNamespace(is_in_indexer=True, ratio=4))
    assert routed == ["logits", "store"]
    # The non-paged (fp8 DeepGEMM) branch: on "CUDA" with the switch on, a bf16 pool is
    # refused before anything else is looked at (stock code would read forward_batch).
    import sglang.srt.layers.attention.dsv4.indexer as sg_indexer

    monkeypatch.setenv("SGLANG_OPT_DSV4_NONPAGED_INDEXER", "1")
    monkeypatch.setattr(sg_indexer, "is_cuda", lambda: True)
    monkeypatch.setattr(sg_indexer, "is_hip", lambda: False)
    assert (
        C4IndexerBackendMixin._can_use_nonpaged_indexer(
            backend, c4_indexer=None, forward_batch=None, indexer_metadata=None
        )
        is False
    )
