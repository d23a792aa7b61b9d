"""Index-K integrity mode on CPU, with SGLang's real DSV4 pool, host pool and C4 indexer entry point.

Stubbed (CUDA kernels that are not even defined on CPU): ``transfer_kv_all_layer_mla`` (backup,
device -> host) and ``transfer_kv_per_layer_mla`` (load, host -> device), replaced by torch row
copies with the same index semantics. The GPU side (Triton kernel, reader-stream verification
under a real race) is covered by ``benchmarks/integrity_replay.py``.
"""

from __future__ import annotations

import types

import pytest
import torch

from kernels_sm120 import index_k_checksum as ck
from sglang_dsv4_ext.runtime import compat
from sglang_dsv4_ext.runtime.hooks import integrity
from sglang_dsv4_ext.runtime.index_k import integrity as index_k_integrity
from tests.support import gate_doubles as gd

PAGE = 256


def _copy_all_layers(src_layers, dst_layers, src_indices, dst_indices, **kw):
    for src, dst in zip(src_layers, dst_layers):
        dst[dst_indices] = src[src_indices]


@pytest.fixture
def integrity_mode(monkeypatch):
    import sglang.srt.mem_cache.memory_pool_host as mph

    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", "fp8")
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_GATE", "off")
    monkeypatch.setattr(
        mph,
        "transfer_kv_all_layer_mla",
        lambda src_layers, dst_layers, src_indices, dst_indices, **kw: _copy_all_layers(
            [list.__getitem__(src_layers, i) for i in range(len(src_layers))], dst_layers, src_indices, dst_indices
        ),
        raising=False,
    )
    monkeypatch.setattr(
        mph,
        "transfer_kv_per_layer_mla",
        lambda src, dst, src_indices, dst_indices, **kw: dst.__setitem__(dst_indices, src[src_indices]),
        raising=False,
    )

    def set_mode(mode: str) -> None:
        monkeypatch.setenv("SGLANG_DSV4_INDEX_K_INTEGRITY", mode)

    return set_mode


def _stack(ext_active):
    """A real pool, its real c4 indexer regions and host mirror (device_ptrs/data_ptrs unused on CPU)."""
    import sglang.srt.mem_cache.memory_pool_host as mph
    from sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler import _dsv4_indexer_regions

    pool = gd.build_pool()
    (region,) = _dsv4_indexer_regions(pool, PAGE)
    host = mph.DeepSeekV4PagedHostPool(
        pool_name=region.name,
        device_buffers=region.device_buffers,
        item_bytes=region.item_bytes,
        num_host_pages=4,
        slot_page_size=region.slot_page_size,
        layout="layer_first",
        pin_memory=False,
        page_aligned_only=region.page_aligned_only,
    )
    host.device_ptrs = list(region.device_buffers)  # what the stubbed kernel reads
    host.data_ptrs = host.data_refs
    sub = pool.c4_indexer_kv_pool
    for layer, buf in enumerate(sub.index_k_with_scale_buffer):
        g = torch.Generator().manual_seed(layer)
        list.__getitem__(sub.index_k_with_scale_buffer, layer).copy_(
            torch.randint(0, 256, buf.shape, dtype=torch.uint8, generator=g)
        )
    return pool, host


def _read_layer(pool, model_layer, rids=("req-7",)):
    """SGLang's real C4Indexer.forward entry, with the backend call stubbed (it needs CUDA metadata)."""
    from sglang.srt.layers.attention.dsv4.indexer import C4Indexer

    indexer = C4Indexer.__new__(C4Indexer)
    indexer.layer_id = model_layer
    indexer.alt_streams = None
    backend = types.SimpleNamespace(forward_c4_indexer=lambda **kw: None)
    batch = types.SimpleNamespace(token_to_kv_pool=pool, rids=list(rids))
    C4Indexer.forward(indexer, None, None, batch, backend)


def _backup_corrupt_load(pool, host, *, corrupt_host_page, layer):
    host_idx = torch.arange(0, 2 * PAGE)  # host pages 0, 1
    dev_idx = torch.arange(PAGE, 3 * PAGE)  # device pages 1, 2
    host.backup_from_device_all_layer(pool.c4_indexer_kv_pool, host_idx, dev_idx, "kernel")
    if corrupt_host_page is not None:
        host.kv_buffer[layer][corrupt_host_page, 17] ^= 0x40  # one bit, between backup and load
    for sub_layer in range(host.layer_num):
        host.load_to_device_per_layer(pool.c4_indexer_kv_pool, host_idx, dev_idx, sub_layer, "kernel")


def _model_layer_of(pool, sub_layer):
    return next(
        i
        for i, m in enumerate(pool.layer_mapping)
        if m is not None and m.compress_ratio == 4 and m.compress_layer_id == sub_layer
    )


def test_corrupted_host_page_is_reported_with_layer_and_page(ext_active, integrity_mode, caplog):
    integrity_mode("full")
    pool, host = _stack(ext_active)
    _backup_corrupt_load(pool, host, corrupt_host_page=1, layer=1)
    before = index_k_integrity.mismatch_metric().labels(**index_k_integrity.series_labels("load"))._value.get()
    with caplog.at_level("ERROR", logger="sglang_dsv4_ext.integrity"):
        for sub_layer in range(host.layer_num):
            _read_layer(pool, _model_layer_of(pool, sub_layer))
    messages = [r.getMessage() for r in caplog.records if "integrity mismatch" in r.getMessage()]
    # host page 1 was loaded into device page 2
    assert messages == ["index-K integrity mismatch (load): 1 page(s); first at layer 1, page 2, request(s) req-7"]
    assert (
        index_k_integrity.mismatch_metric().labels(**index_k_integrity.series_labels("load"))._value.get() == before + 1
    )


def test_intact_pages_and_mode_off_report_nothing(ext_active, integrity_mode, caplog):
    integrity_mode("full")
    pool, host = _stack(ext_active)
    _backup_corrupt_load(pool, host, corrupt_host_page=None, layer=0)
    tracker = integrity.tracker_of(host)
    for sub_layer in range(host.layer_num):
        _read_layer(pool, _model_layer_of(pool, sub_layer))
    assert tracker.mismatches == 0 and tracker.seq == host.layer_num  # every layer was verified

    integrity_mode("off")
    pool, host = _stack(ext_active)
    assert integrity.tracker_of(host) is None


def test_without_the_hooks_the_corruption_goes_unnoticed(ext_active, integrity_mode):
    """The regression replay's other half: stock SGLang (hooks unwrapped) loads the bad page silently."""
    import sglang.srt.mem_cache.memory_pool_host as mph

    integrity_mode("full")
    pool, host = _stack(ext_active)
    cls = mph.DeepSeekV4PagedHostPool
    with pytest.MonkeyPatch.context() as stock:
        for name in ("backup_from_device_all_layer", "load_to_device_per_layer"):
            stock.setattr(cls, name, compat.unwrap_to_original(getattr(cls, name)))
        _backup_corrupt_load(pool, host, corrupt_host_page=0, layer=0)
    tracker = integrity.tracker_of(host)
    for sub_layer in range(host.layer_num):
        _read_layer(pool, _model_layer_of(pool, sub_layer))
    assert tracker.seq == 0 and tracker.mismatches == 0  # nothing recorded, nothing verified


def test_freed_host_pages_forget_their_checksum(ext_active, integrity_mode):
    integrity_mode("full")
    pool, host = _stack(ext_active)
    _backup_corrupt_load(pool, host, corrupt_host_page=None, layer=0)
    tracker = integrity.tracker_of(host)
    assert (tracker.table[:, :2] != ck.NO_MISMATCH).all()
    host.free(torch.arange(0, PAGE))
    assert (tracker.table[:, 0] == ck.NO_MISMATCH).all() and (tracker.table[:, 1] != ck.NO_MISMATCH).all()


def test_loads_no_reader_verified_are_counted_and_said_once(ext_active, integrity_mode, caplog):
    """A reader replayed from a CUDA graph runs no hook: the next load must not drop its pages silently."""
    integrity_mode("full")
    pool, host = _stack(ext_active)
    tracker = integrity.tracker_of(host)
    caplog.set_level("WARNING", logger="sglang_dsv4_ext.integrity")
    _backup_corrupt_load(pool, host, corrupt_host_page=None, layer=0)
    assert tracker.unverified_pages == 0  # the first load has nothing to replace
    _backup_corrupt_load(pool, host, corrupt_host_page=None, layer=0)  # no reader ran in between
    assert tracker.unverified_pages == 2 * host.layer_num  # two pages per layer, every layer (full)
    _backup_corrupt_load(pool, host, corrupt_host_page=None, layer=0)
    warnings = [r.getMessage() for r in caplog.records if "never verified" in r.getMessage()]
    assert len(warnings) == 1 and "CUDA-graph replay" in warnings[0]
    _read_layer(pool, _model_layer_of(pool, 0))  # a reader that runs: its pages are verified, not counted
    before = tracker.unverified_pages
    _backup_corrupt_load(pool, host, corrupt_host_page=None, layer=0)
    assert tracker.unverified_pages == before + 2 * (host.layer_num - 1)


def test_a_new_load_drops_what_the_last_left_pending_instead_of_verifying_it_later(ext_active, integrity_mode, caplog):
    """Regression (seen on the GPU replay, sample mode): a layer the last load sampled but the next does not kept
    its pending rows; they were verified after the next load, against rows that hold other data by then."""
    integrity_mode("sample")
    pool, host = _stack(ext_active)
    tracker = integrity.tracker_of(host)
    tracker.loads = 2  # the rotation at which load #1 samples c4 sub-layer 1 and load #2 sub-layer 0 only
    host_idx = torch.arange(0, 2 * PAGE)
    host.backup_from_device_all_layer(pool.c4_indexer_kv_pool, host_idx, torch.arange(PAGE, 3 * PAGE), "kernel")
    for sub_layer in range(host.layer_num):  # load #1 into device pages 1, 2; no reader runs
        host.load_to_device_per_layer(
            pool.c4_indexer_kv_pool, host_idx, torch.arange(PAGE, 3 * PAGE), sub_layer, "kernel"
        )
    assert tracker.has_pending(1) and not tracker.has_pending(0)
    list.__getitem__(pool.c4_indexer_kv_pool.index_k_with_scale_buffer, 1)[1:3] ^= 0xFF  # pages 1, 2 reused
    for sub_layer in range(host.layer_num):  # load #2 into device pages 3, 4
        host.load_to_device_per_layer(
            pool.c4_indexer_kv_pool, host_idx, torch.arange(3 * PAGE, 5 * PAGE), sub_layer, "kernel"
        )
    caplog.set_level("WARNING", logger="sglang_dsv4_ext.integrity")
    for sub_layer in range(host.layer_num):
        _read_layer(pool, _model_layer_of(pool, sub_layer))
    index_k_integrity.report(tracker.drain())
    assert tracker.mismatches == 0, [r.getMessage() for r in caplog.records]
    assert tracker.unverified_pages == 2  # load #1's two sampled pages of sub-layer 1, counted instead


def test_a_load_without_its_layer_0_still_counts_what_it_replaces():
    """begin_load runs on layer 0's load; a load that replaces a pending layer without it is counted too."""
    tracker = index_k_integrity.IntegrityTracker("full", [torch.zeros(4, 64, dtype=torch.uint8)], 8)
    rows, keys = torch.tensor([1, 2]), torch.tensor([5, 6])
    tracker.expect(0, rows, keys)
    tracker.expect(0, rows, keys)  # no reader verified the first
    assert tracker.unverified_pages == 2
    tracker.verify(0)
    tracker.expect(0, rows, keys)
    assert tracker.unverified_pages == 2  # verified pages are not counted


def test_checksum_kernel_in_triton_interpreter_matches_torch():
    from tests.support.triton_interpreter import interpreted_kernels

    g = torch.Generator().manual_seed(3)
    buf = torch.randint(0, 256, (6, 8448), dtype=torch.uint8, generator=g)
    rows = torch.tensor([5, 0, 3])
    ref = ck.page_checksums(buf, rows)
    swapped = buf.clone()
    swapped[0, :4], swapped[0, 4:8] = buf[0, 4:8].clone(), buf[0, :4].clone()
    assert ck.page_checksums(swapped, rows)[1] != ref[1]  # order-sensitive within a page
    expected = ref.clone()
    expected[2] += 1
    unknown = expected.clone()
    unknown[0] = ck.NO_MISMATCH  # no checksum recorded for row 5
    with interpreted_kernels(ck):
        got = ck.page_checksums(buf, rows)
        state = ck.new_state("cpu")
        ck.verify_page_checksums(buf, rows, expected, state, layer=3, seq=9)
        skipping = ck.new_state("cpu")
        ck.verify_page_checksums(buf, rows, unknown, skipping, layer=3, seq=9, skip_unknown=True)
    assert torch.equal(got, ref)
    assert int(state[0]) == 1 and ck.decode_mismatch_code(int(state[1])) == (9, 3, 3)
    assert int(state[2]) == 3  # pages compared
    assert int(skipping[0]) == 1 and int(skipping[2]) == 2  # the row without a checksum is not compared
    reference = ck.new_state("cpu")
    ck.verify_page_checksums(buf, rows, unknown, reference, layer=3, seq=9, skip_unknown=True)
    assert torch.equal(reference, skipping)  # the torch path counts the same


def test_bad_mode_names_the_variable(monkeypatch):
    from sglang_dsv4_ext.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="SGLANG_DSV4_INDEX_K_INTEGRITY='fast'.*'off', 'sample', 'full'"):
        load_config({"SGLANG_DSV4_INDEX_K_INTEGRITY": "fast"})
    assert load_config({"SGLANG_DSV4_INDEX_K_INTEGRITY": " "}).integrity == "off"
