"""Integrity counts belong to one launch, and the last verifications of a run reach them without another load.

The counters are the tracker's own (prometheus_client's default registry, as SGLang's /metrics serves it) and
are read back through repro's parser (``tools/repro/server_evidence.py``), as ``repro run`` reads a server.
"""

from __future__ import annotations

import time

import pytest
import torch
from prometheus_client import REGISTRY, generate_latest

from sglang_dsv4_ext.config import IntegrityMode
from sglang_dsv4_ext.runtime.index_k import integrity as ii
from sglang_dsv4_ext.tools.repro import server_evidence as se

EARLIER, CURRENT = "111@1764500000.00", "222@1764590000.00"


@pytest.fixture
def launch_label():
    yield ii.use_launch
    ii.use_launch(ii.UNKNOWN_LAUNCH)


def _entry(url: str) -> dict[str, object]:
    return {"url": url, **se.parse_metrics(generate_latest().decode())}


def test_counters_an_earlier_launch_left_are_not_the_current_servers(launch_label):
    """A shared PROMETHEUS_MULTIPROC_DIR keeps an earlier launch's counter files; /metrics aggregates them."""
    launch_label(EARLIER)
    earlier = ii.Series("launch-test")
    earlier.checked.inc(512)
    before = [_entry("http://stock:30000"), _entry("http://active:30000")]
    earlier.checked.inc(64)  # the earlier launch's files do not change; the live one's counts do (below)
    launch_label(CURRENT)
    ii.Series("launch-test").checked.inc(32)
    after = [_entry("http://stock:30000"), _entry("http://active:30000")]
    stock, active = se.deltas(before, after, [None, CURRENT])
    assert stock["integrity_checked"] is None and se.shown(stock)["integrity_mismatches"] is None  # n/a
    assert active["integrity_checked"] == 32  # its own launch only, never the earlier one's 64
    assert se.deltas(before, after, [EARLIER, EARLIER])[0]["integrity_checked"] == 64


def _pending_verification(where: str):
    g = torch.Generator().manual_seed(5)
    buffers = [torch.randint(0, 256, (8, 256), dtype=torch.uint8, generator=g) for _ in range(2)]
    tracker = ii.IntegrityTracker(IntegrityMode.FULL, buffers, 16, where=where, series=ii.Series(where))
    rows = torch.arange(8)
    tracker.record_all_layers(rows, rows)
    tracker.begin_load()
    for layer in range(2):
        tracker.expect(layer, rows, rows)
        tracker.verify(layer)  # the reader polls only at its next verify, which the run's end never brings
    return tracker


def test_the_last_verifications_reach_the_counters_without_another_load(launch_label):
    launch_label(CURRENT)
    tracker = _pending_verification("poll-test")
    labels = ii.series_labels("poll-test")
    assert REGISTRY.get_sample_value(ii.CHECKED_METRIC_NAME, labels) == 0.0
    ii.poll_in_background(tracker, interval=0.05)
    deadline = time.monotonic() + 10.0
    while tracker.pages_checked < 16 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert tracker.pages_checked == 16
    assert REGISTRY.get_sample_value(ii.CHECKED_METRIC_NAME, labels) == 16.0


def test_the_pool_hook_labels_the_series_with_this_processs_launch(ext_active, monkeypatch, launch_label):
    from sglang_dsv4_ext.runtime import activation
    from sglang_dsv4_ext.runtime.hooks import integrity as integrity_hook
    from tests.support import dsv4_hicache_stack as hs

    monkeypatch.setattr(activation.STATE, "launch", CURRENT)
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", "fp8")
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_INTEGRITY", "sample")
    stack = hs.build(monkeypatch)
    labels = {"where": ii.WHERE_LOAD, "launch": CURRENT, "regions": ii.WHOLE_PAGE}
    assert REGISTRY.get_sample_value(ii.CHECKED_METRIC_NAME, labels) is not None
    assert integrity_hook.tracker_of(stack.c4_host) in ii._POLLED  # its last verifications are polled too


@pytest.fixture
def restore_regions():
    yield
    ii.use_regions(ii.WHOLE_PAGE)


@pytest.mark.parametrize(
    "built, hip, regions",
    [
        ("fp4", "6.4", ii.PAYLOAD_ONLY),
        ("fp4", None, ii.WHOLE_PAGE),
        ("fp8", "6.4", ii.WHOLE_PAGE),
        ("bf16", None, ii.WHOLE_PAGE),
    ],
)
def test_only_aiters_split_fp4_layout_is_labelled_payload_only(
    built, hip, regions, monkeypatch, launch_label, restore_regions
):
    """SGLang splits fp4 payload and scale into two host regions only in AITER's layout (a ROCm build,
    ``DeepSeekV4IndexerPool.uses_aiter_fp4_layout``); the scale region is not checksummed there.

    The host pool is stood in by a namespace: ``DeepSeekV4PagedHostPool.__init__``'s AFTER hook only sets the
    tracker on it; the pool name is SGLang's own; ``torch.version.hip`` is what SGLang's ``is_hip`` reads."""
    import types

    from sglang.srt.mem_cache.hicache_storage import PoolName

    from sglang_dsv4_ext.runtime import activation
    from sglang_dsv4_ext.runtime.hooks import integrity

    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_INTEGRITY", "sample")
    monkeypatch.setattr(activation.STATE, "index_k_built", [built])
    monkeypatch.setattr(activation.STATE, "launch", CURRENT)
    monkeypatch.setattr(torch.version, "hip", hip)
    host = types.SimpleNamespace()
    buffers = [torch.zeros(4, 64, dtype=torch.uint8)]
    integrity._after_host_pool_init(activation, None, host, PoolName.DEEPSEEK_V4_C4_INDEXER, buffers, 64, 4)
    assert integrity.tracker_of(host) is not None
    labels = {"where": ii.WHERE_LOAD, "launch": CURRENT, "regions": regions}
    assert REGISTRY.get_sample_value(ii.CHECKED_METRIC_NAME, labels) is not None
    assert ii.series_labels(ii.WHERE_PD)["regions"] == ii.WHOLE_PAGE  # PD's digest covers every region


def test_fp4_integrity_covers_payload_and_scales_of_each_page(monkeypatch, launch_label, caplog):
    """SGLang's real fp4 c4 indexer pool (``--enable-deepseek-v4-fp4-indexer``) and HiCache stack on CPU: one
    page row holds the 64 slots' payload and their scales (68 B per slot); a flipped scale byte of a host page
    is found where the layer is read."""
    from sglang_dsv4_ext.runtime import activation
    from sglang_dsv4_ext.runtime.hooks import integrity
    from sglang_dsv4_ext.tools.sglang_cpu import dsv4_model
    from tests.support import dsv4_hicache_stack as hs
    from tests.support import gate_doubles as gd

    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", "fp8")
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_GATE", "off")
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_INTEGRITY", "full")
    monkeypatch.setattr(activation.STATE, "index_k_built", [])
    build_pool = gd.build_pool

    def fp4_pool(**kwargs):
        with dsv4_model.cpu_server_args(enable_deepseek_v4_fp4_indexer=True):
            return build_pool(**kwargs)

    monkeypatch.setattr(gd, "build_pool", fp4_pool)
    stack = hs.build(monkeypatch)
    assert stack.pool.c4_indexer_kv_pool.use_fp4_indexer
    tracker = integrity.tracker_of(stack.c4_host)
    assert tracker.buffers[0].shape[1] == (hs.PAGE // 4) * 68  # payload and scales of the page's 64 slots
    assert ii.series_labels(ii.WHERE_LOAD)["regions"] == ii.WHOLE_PAGE
    host = stack.controller.write(hs.tokens([1, 2]), node_id=1, extra_pools=hs.c4_sidecar())
    stack.c4_host.kv_buffer[1][hs.pages_of(host)[0], -1] ^= 0x40  # the last scale byte of c4 layer 1's page
    hs.load(stack, host)
    with caplog.at_level("ERROR", logger="sglang_dsv4_ext.integrity"):
        hs.read_c4_layers(stack.pool)
        ii.report(tracker.drain())
    assert tracker.mismatches == 1
    assert "first at layer 1" in caplog.text
