"""Integrity evidence that cannot lie: every loaded page counted once (checked, or not checked and why), the
series exported at zero from pool creation, and no integrity path that blocks the host.

The host-sync part is checked here on its CPU-checkable grounds (which copies are made, what is read back);
``tests/gpu/test_integrity_no_host_sync_gpu.py`` checks it on a GPU under CUDA's sync debug mode.
"""

from __future__ import annotations

import types

import pytest
import torch
from torch.overrides import TorchFunctionMode

from kernels_sm120 import index_k_checksum as ck
from sglang_dsv4_ext.runtime.hooks import integrity
from sglang_dsv4_ext.runtime.index_k import integrity as ii

ROW_BYTES = 256


def _tracker(mode="sample", layers=4, rows=32, keys=64, where=None):
    g = torch.Generator().manual_seed(1)
    buffers = [torch.randint(0, 256, (rows, ROW_BYTES), dtype=torch.uint8, generator=g) for _ in range(layers)]
    series = ii.Series(where) if where else None
    return ii.IntegrityTracker(mode, buffers, keys, where=where or ii.WHERE_LOAD, series=series)


def _series_values(where):
    from prometheus_client import REGISTRY

    def value(name, **labels):
        return REGISTRY.get_sample_value(name, {**ii.series_labels(where), **labels})

    return {
        "checked": value(ii.CHECKED_METRIC_NAME),
        "mismatches": value(ii.METRIC_NAME),
        **{r: value(ii.UNCHECKED_METRIC_NAME, reason=r) for r in ii.UNCHECKED_REASONS},
    }


def test_the_three_series_exist_at_zero_from_pool_creation(ext_active, monkeypatch):
    """A healthy server must read 0 mismatches in N checked pages; one where integrity never ran reads nothing."""
    from tests.support import dsv4_hicache_stack as hs

    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", "fp8")
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_INTEGRITY", "sample")
    stack = hs.build(monkeypatch)
    tracker = integrity.tracker_of(stack.c4_host)
    assert tracker.series is not None and tracker.pages_checked == 0 and not any(tracker.unchecked.values())
    values = _series_values(ii.WHERE_LOAD)
    assert all(v is not None for v in values.values()), values  # every series exported, before any load


def test_every_loaded_page_is_counted_once_checked_or_why_not():
    where = "test-every-page"
    tracker = _tracker(where=where)
    tracker.record_all_layers(torch.arange(8), torch.arange(8))  # keys 0..7 hold a checksum, 8..15 do not
    tracker.begin_load()  # load 1: sample mode verifies c4 layer 3 of 4, 8 of its 16 pages (rows 0, 2, .., 14)
    for layer in range(4):
        tracker.expect(layer, torch.arange(16), torch.arange(16))
    tracker.verify(3)
    tracker.poll()
    assert tracker.pages_checked == 4  # keys 1, 3, 5, 7
    assert tracker.unchecked == {ii.SAMPLING: 3 * 16 + 8, ii.NO_CHECKSUM: 4, ii.NO_EAGER_READER: 0}
    tracker.begin_load()  # nothing was pending any more
    tracker.expect(2, torch.arange(16), torch.arange(16))  # load 2 samples layer 2; no reader runs
    tracker.begin_load()
    assert tracker.unchecked[ii.NO_EAGER_READER] == 8
    total = tracker.pages_checked + sum(tracker.unchecked.values())
    assert total == 4 * 16 + 16 + 0  # load 1's 64 pages and load 2's 16 pages of layer 2: each counted once
    values = _series_values(where)
    assert values == {
        "checked": 4.0,
        "mismatches": 0.0,
        ii.SAMPLING: 56.0 + 8.0,
        ii.NO_CHECKSUM: 4.0,
        ii.NO_EAGER_READER: 8.0,
    }


def test_a_poll_reads_the_newest_finished_snapshot_while_later_ones_are_still_in_flight():
    """Under load the host runs verifies ahead of the GPU: the counts must advance with what has finished,
    not wait for an idle moment that never comes."""
    tracker = _tracker(mode="full", layers=2)
    tracker.record_all_layers(torch.arange(4), torch.arange(4))
    tracker.begin_load()
    for layer in range(2):
        tracker.expect(layer, torch.arange(4), torch.arange(4))
    tracker.verify(0)
    tracker.verify(1)
    in_flight = types.SimpleNamespace(query=lambda: False)
    tracker._snapshots[1].event = in_flight  # layer 1's verify has not run on the device yet
    assert tracker.poll() is None and tracker.pages_checked == 4  # layer 0's snapshot counted
    tracker._snapshots[1].event = None  # now it has
    tracker.poll()
    assert tracker.pages_checked == 8


class _DeviceMoves(TorchFunctionMode):
    """Records every tensor copy that names a device, every read-back to the host and every pinned allocation;
    with ``pretend`` it does not run copies to that device (there is none on this machine)."""

    _READ_BACKS = (
        torch.Tensor.item,
        torch.Tensor.tolist,
        torch.Tensor.__bool__,
        torch.Tensor.nonzero,
        torch.unique,
        torch.Tensor.cpu,
        torch.Tensor.numpy,
    )

    def __init__(self, pretend=None, allowed_reads=()):
        super().__init__()
        self.pretend, self.allowed = pretend, {id(t) for t in allowed_reads}
        self.copies, self.reads, self.pinned = [], [], set()

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.Tensor.to, torch.Tensor.cuda, torch.Tensor.copy_):
            device = kwargs.get("device") or next((a for a in args[1:] if isinstance(a, (torch.device, str))), None)
            if func is torch.Tensor.cuda or device is not None:
                self.copies.append((func.__name__, id(args[0]) in self.pinned, bool(kwargs.get("non_blocking"))))
                if self.pretend is not None and torch.device(device or "cuda") == self.pretend:
                    return args[0]
        if func in self._READ_BACKS and id(args[0]) not in self.allowed:
            self.reads.append(func.__name__)
        if func is torch.empty and kwargs.get("pin_memory"):
            out = func(*args, **dict(kwargs, pin_memory=False))
            self.pinned.add(id(out))
            return out
        return func(*args, **kwargs)


def test_host_indices_reach_a_cuda_device_through_fresh_pinned_memory_without_blocking():
    cuda = torch.device("cuda", 0)
    host = torch.arange(5, dtype=torch.int32)  # what --hicache-io-backend direct hands the hooks
    with _DeviceMoves(pretend=cuda) as moves:
        staged = ii.indices_on(cuda, host)
    assert moves.copies == [("to", True, True)]  # one copy, from a pinned buffer of our own, non-blocking
    assert torch.equal(staged, host.to(torch.int64)) and staged.data_ptr() != host.data_ptr()
    assert moves.reads == []


def test_record_expect_verify_forget_poll_copy_no_index_blocking_and_read_back_only_the_pinned_record():
    tracker = _tracker(mode="full", layers=2)
    snapshots = [s.values for s in tracker._snapshots]
    with _DeviceMoves(allowed_reads=snapshots) as moves:
        tracker.record_all_layers(torch.arange(4), torch.arange(4))
        tracker.forget(torch.tensor([3]))
        tracker.begin_load()
        for layer in range(2):
            tracker.expect(layer, torch.arange(4), torch.arange(4))
        for layer in range(2):
            tracker.verify(layer)
        tracker.poll()
    assert tracker.pages_checked == 6 and tracker.unchecked[ii.NO_CHECKSUM] == 2
    assert moves.reads == []
    assert all(non_blocking for _, _, non_blocking in moves.copies), moves.copies


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_page_keys_of_device_indices_are_not_deduplicated_on_the_host(device):
    """``torch.unique`` of a device tensor waits for the device; the meta device has no values to read at all,
    so any read-back raises there."""
    keys = integrity._page_keys(torch.arange(512, device=device), 256)
    assert keys.device.type == device
    if device == "cpu":
        assert keys.tolist() == [0, 1]


def test_checksums_compared_are_counted_on_the_device():
    buf = torch.randint(0, 256, (4, 64), dtype=torch.uint8, generator=torch.Generator().manual_seed(2))
    rows = torch.tensor([0, 1, 2])
    expected = ck.page_checksums(buf, rows)
    expected[1] = ck.NO_MISMATCH
    state = ck.new_state("cpu")
    ck.verify_page_checksums(buf, rows, expected, state, layer=0, seq=1, skip_unknown=True)
    assert state.tolist() == [0, ck.NO_MISMATCH, 2]
