"""runtime/index_k/integrity.py behaviour that mutmut's mutants showed untested (docs/mutation-testing.md).

On one tracker over a CPU buffer (the checksum kernel's torch reference runs there, as in
tests/unit/hooks/test_integrity.py): how a mismatch is described, single pages counted, which rows
``sample`` mode keeps (how many, evenly spaced, shifted by one per sampled load of the layer so every
row is covered within ``step`` of them), the requests a mismatch names, the bounded request history, the warning
said when loaded pages were never verified, and the list ``report`` appends to.
"""

from __future__ import annotations

import logging
import uuid

import pytest
import torch

from sglang_dsv4_ext.runtime.index_k import integrity
from sglang_dsv4_ext.runtime.index_k.integrity import IntegrityTracker, Mismatch

ROWS, WIDTH = 32, 64


def _tracker(mode: str = "full", **kw) -> IntegrityTracker:
    buffer = torch.arange(ROWS * WIDTH, dtype=torch.int64).remainder(251).to(torch.uint8).reshape(ROWS, WIDTH)
    return IntegrityTracker(mode, [buffer], ROWS, **kw)


# ----- the mismatch line -----
def test_a_mismatch_names_page_and_layer_0_and_at_most_8_requests():
    requests = tuple(f"r{i}" for i in range(10))
    assert Mismatch("load", 2, 0, 0, requests).describe() == (
        "index-K integrity mismatch (load): 2 page(s); first at layer 0, page 0, request(s) r0,r1,r2,r3,r4,r5,r6,r7"
    )


def test_a_mismatch_without_its_page_layer_or_requests_says_unknown():
    assert Mismatch("pd", 1, -1, -1, ()).describe() == (
        "index-K integrity mismatch (pd): 1 page(s); first at layer unknown, page unknown, request(s) unknown"
    )


# ----- counts -----
def test_one_page_checked_and_one_page_not_sampled_are_each_counted():
    tracker = _tracker("sample", sample_layer_stride=2)
    tracker.loads = 1  # layer 0 is not sampled on this load: (0 + 1) % 2 != 0
    tracker.expect(0, torch.tensor([3]), torch.tensor([3]))
    assert tracker.unchecked[integrity.SAMPLING] == 1
    tracker.loads = 2
    tracker.record(0, torch.tensor([3]), torch.tensor([3]))
    tracker.expect(0, torch.tensor([3]), torch.tensor([3]))
    assert tracker.verify(0)
    tracker.drain()
    assert tracker.pages_checked == 1


def test_verify_without_anything_pending_says_so():
    assert _tracker().verify(0) is False


# ----- which rows sample mode keeps -----
def _sampled(tracker: IntegrityTracker, rows: torch.Tensor) -> list[int]:
    tracker.begin_load()
    tracker.expect(0, rows, rows)
    return tracker.pending[0].rows.tolist()


def test_sample_mode_keeps_sample_pages_evenly_spaced_rows_and_counts_the_rest():
    tracker = _tracker("sample", sample_pages=8, sample_layer_stride=1)
    kept = _sampled(tracker, torch.arange(16))
    assert len(kept) == 8 and {b - a for a, b in zip(kept, kept[1:])} == {2}
    assert tracker.unchecked[integrity.SAMPLING] == 8


@pytest.mark.parametrize("stride", [1, 2])
def test_sample_mode_shifts_by_one_row_per_sampled_load_of_the_layer_and_covers_every_row(stride):
    """The shift counts the layer's own sampled loads (``_sampled_rows``), so a prefix loaded again and again has
    every row verified within ``step`` sampled loads of the layer, ``step * stride`` loads, whatever the stride."""
    tracker = _tracker("sample", sample_pages=8, sample_layer_stride=stride)
    rows = torch.arange(ROWS)  # step 4
    firsts: list[int] = []
    covered: set[int] = set()
    for _ in range((ROWS // 8) * stride):
        tracker.begin_load()
        tracker.expect(0, rows, rows)
        if 0 in tracker.pending:
            kept = tracker.pending[0].rows.tolist()
            firsts.append(kept[0])
            covered |= set(kept)
    assert firsts == [0, 1, 2, 3]
    assert covered == set(range(ROWS))


def test_full_mode_keeps_every_row_however_many():
    tracker = _tracker("full", sample_pages=8)
    assert _sampled(tracker, torch.arange(16)) == list(range(16))


# ----- what a mismatch names -----
def test_a_mismatch_names_the_requests_of_the_load_when_the_reader_gives_none():
    tracker = _tracker()
    tracker.record(0, torch.tensor([1, 2]), torch.tensor([5, 6]))
    tracker.expect(0, torch.tensor([1, 2]), torch.tensor([5, 6]), requests=["req-a"])
    tracker.buffers[0][2] ^= 0xFF
    tracker.verify(0)
    assert tracker.drain() == Mismatch("load", 1, 0, 2, ("req-a",))


def test_the_request_history_keeps_the_newest_256_verifies():
    tracker = _tracker()
    for i in range(258):
        tracker.expect(0, torch.tensor([1]), torch.tensor([1]), requests=[f"r{i}"])
        tracker.verify(0)
    assert len(tracker.requests) == 256
    assert next(iter(tracker.requests)) == 3  # verify seq 1 and 2 were dropped, the oldest first


# ----- saying that loaded pages were never verified -----
def test_pages_replaced_before_any_reader_are_said_once_with_the_metric_to_read(caplog):
    tracker = _tracker()
    caplog.set_level(logging.WARNING, logger="sglang_dsv4_ext.integrity")
    for _ in range(3):
        tracker.expect(0, torch.tensor([1, 2, 3]), torch.tensor([1, 2, 3]))
    assert [r.getMessage() for r in caplog.records] == [
        "index-K integrity: 3 loaded page(s) of c4 layer 0 were never verified before the next load: their reader "
        "ran no Python hook (a CUDA-graph replay, e.g. --cuda-graph-backend-prefill breakable) or did not run; "
        "integrity counts cover eagerly run readers only (logged once; counted in "
        "sglang:dsv4_index_k_integrity_pages_unchecked_total{reason='no_eager_reader'})"
    ]
    assert tracker.unverified_pages == 6


def test_a_reported_mismatch_is_added_to_the_list_given():
    seen: list[Mismatch] = []
    mismatch = Mismatch("load", 1, 0, 0, ())
    integrity.report(mismatch, seen)
    assert seen == [mismatch]


# ----- the counters, exported at zero on the tracker's own label -----
def _sample(name: str, where: str, **labels) -> float | None:
    """The counter's value in ``where``'s series (its launch and regions labels as the tracker sets them)."""
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name, {**integrity.series_labels(where), **labels})


def test_a_series_is_exported_at_zero_under_its_own_label_and_counts_there():
    where = f"mutation-survivor-{uuid.uuid4().hex}"  # a series of its own: the counters are per process
    series = integrity.Series(where)
    assert _sample(integrity.CHECKED_METRIC_NAME, where=where) == 0
    assert _sample(integrity.METRIC_NAME, where=where) == 0
    for reason in integrity.UNCHECKED_REASONS:
        assert _sample(integrity.UNCHECKED_METRIC_NAME, where=where, reason=reason) == 0
    tracker = _tracker("sample", sample_pages=2, sample_layer_stride=1, series=series)
    tracker.begin_load()
    tracker.record(0, torch.arange(4), torch.arange(4))
    tracker.expect(0, torch.arange(4), torch.arange(4))
    tracker.verify(0)
    tracker.drain()
    assert _sample(integrity.UNCHECKED_METRIC_NAME, where=where, reason=integrity.SAMPLING) == 2
    assert _sample(integrity.CHECKED_METRIC_NAME, where=where) == 2


def test_export_at_zero_creates_each_series_of_its_label_at_zero():
    where = f"mutation-survivor-{uuid.uuid4().hex}"
    integrity.export_at_zero(where)
    assert _sample(integrity.CHECKED_METRIC_NAME, where=where) == 0
    assert _sample(integrity.METRIC_NAME, where=where) == 0
    for reason in integrity.UNCHECKED_REASONS:
        assert _sample(integrity.UNCHECKED_METRIC_NAME, where=where, reason=reason) == 0


# ----- indices -----
def test_indices_become_int64_on_the_device_asked_for():
    assert integrity.indices_on(torch.device("cpu"), torch.tensor([1, 2], dtype=torch.int32)).dtype == torch.int64
    moved = integrity.indices_on(torch.device("meta"), torch.tensor([1, 2]))  # another device: no pinned staging
    assert (moved.device.type, moved.dtype) == ("meta", torch.int64)


def test_a_tracker_refuses_a_mode_that_checks_nothing_naming_it():
    import pytest

    with pytest.raises(ValueError, match=r"^integrity mode must be 'sample' or 'full' for a tracker, got 'off'$"):
        _tracker("off")


def test_sample_mode_keeps_8_pages_by_default():
    tracker = _tracker("sample", sample_layer_stride=1)
    assert len(_sampled(tracker, torch.arange(ROWS))) == 8


# ----- reports -----
def _bad_verify(tracker: IntegrityTracker, row: int, requests=()) -> None:
    tracker.record(0, torch.tensor([row]), torch.tensor([row]))
    tracker.expect(0, torch.tensor([row]), torch.tensor([row]), requests=requests)
    tracker.buffers[0][row] ^= 0xFF
    tracker.verify(0)


def test_each_report_counts_the_pages_found_since_the_previous_one():
    tracker = _tracker()
    _bad_verify(tracker, 1)
    assert tracker.drain().count == 1
    _bad_verify(tracker, 2)
    assert tracker.drain().count == 1
    assert tracker.mismatches == 2


def test_a_mismatch_whose_verify_left_the_request_history_names_no_request():
    tracker = _tracker()
    _bad_verify(tracker, 1, requests=["old"])
    for _ in range(256):  # the bad verify's requests are dropped from the history
        tracker.expect(0, torch.tensor([5]), torch.tensor([5]))
        tracker.verify(0)
    assert tracker.drain() == Mismatch("load", 1, 0, 1, ())


class _CopyInFlight:
    """Stands in for the ``torch.cuda.Event`` behind a snapshot whose copy has not completed yet
    (``torch.cuda.Event.query()`` is False until it has): CPU snapshots have no event and are always done."""

    def __init__(self):
        self.completed = False

    def query(self) -> bool:
        return self.completed


def test_pages_found_between_a_snapshot_and_the_reset_are_counted_without_a_page():
    tracker = _tracker()
    _bad_verify(tracker, 1)  # snapshot 0: one mismatch, its page
    _bad_verify(tracker, 2)  # snapshot 1: two mismatches, still the first page; its copy is in flight
    in_flight = _CopyInFlight()
    tracker._snapshots[1].event = in_flight
    assert tracker.poll() == Mismatch("load", 1, 0, 1, ())  # reads snapshot 0, then resets the first-page record
    in_flight.completed = True
    tracker.expect(0, torch.tensor([5]), torch.tensor([5]))
    tracker.verify(0)  # snapshot 2: two mismatches, the first-page record empty since the reset
    assert tracker.poll() == Mismatch("load", 1, -1, -1, ())
