"""index_k/integrity.py behaviour that mutmut's mutants showed untested (docs/mutation-testing.md).

On one tracker over a CPU buffer (the checksum kernel's torch reference runs there, as in
tests/unit/hooks/test_integrity.py): how a mismatch is described, single pages counted, which rows
``sample`` mode keeps (how many, evenly spaced, every row covered within ``step`` loads when every
load samples the layer), the requests a mismatch names, the bounded request history, the warning
said when loaded pages were never verified, and the list ``report`` appends to.
"""

from __future__ import annotations

import logging

import torch

from sglang_dsv4_ext.index_k import integrity
from sglang_dsv4_ext.index_k.integrity import IntegrityTracker, Mismatch

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


def test_sample_mode_covers_every_row_within_step_loads_when_each_load_samples_the_layer():
    tracker = _tracker("sample", sample_pages=8, sample_layer_stride=1)
    rows = torch.arange(ROWS)  # step 4
    covered: set[int] = set()
    for _ in range(ROWS // 8):
        covered |= set(_sampled(tracker, rows))
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
