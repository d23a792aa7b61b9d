"""runtime/index_k/integrity.py behaviour that mutmut's mutants showed untested (docs/mutation-testing.md).

On one tracker over a CPU buffer (the checksum kernel's torch reference runs there, as in
tests/unit/hooks/test_integrity.py): how a mismatch is described, single pages counted, which rows
``sample`` mode keeps (how many, evenly spaced, shifted by one per sampled load of each layer so every
row is covered within ``step`` of them, a load kept whole shifting nothing), the requests a mismatch names, the
bounded request history, the warning said when loaded pages were never verified, and the list ``report`` appends to.
Around the tracker: the poll of an idle tracker, the regions label, the three counters made afresh (in a registry
of the test's own), and the background poller (one daemon thread, replaced once it ended, surviving a failing poll
and a tracker registered while it walks the polled set). The module imports nothing from SGLang, so no SGLang
class is involved here.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import time
import uuid
import weakref

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


def test_each_layer_shifts_its_sampled_rows_on_its_own_loads():
    """Two layers sampled on every load: each one's rows shift by one per load of that layer, so each covers all of
    its rows within ``step`` loads (a shift shared by the layers would move each layer's rows by two)."""
    buffer = _tracker().buffers[0]
    tracker = IntegrityTracker("sample", [buffer, buffer.clone()], ROWS, sample_pages=8, sample_layer_stride=1)
    rows = torch.arange(ROWS)  # step 4
    kept: dict[int, list[list[int]]] = {0: [], 1: []}
    for _ in range(ROWS // 8):
        tracker.begin_load()
        for layer in kept:
            tracker.expect(layer, rows, rows)
            kept[layer].append(tracker.pending[layer].rows.tolist())
    for layer, samples in kept.items():
        assert [s[0] for s in samples] == [0, 1, 2, 3], (layer, samples)
        assert sorted(r for s in samples for r in s) == list(range(ROWS)), layer


def test_a_load_kept_whole_leaves_the_rotation_of_a_longer_prefix_as_it_was():
    """A load of at most ``sample_pages`` pages is verified whole and does not shift the layer's rows: a longer
    prefix loaded between such loads still has every row verified within ``step`` of its own loads (were the
    8-page loads counted, the 32-page prefix would be verified at rows 0, 2, 0, 2 + multiples of 4 only)."""
    tracker = _tracker("sample", sample_pages=8, sample_layer_stride=1)
    longer, whole = torch.arange(ROWS), torch.arange(8)
    firsts: list[int] = []
    covered: set[int] = set()
    for _ in range(ROWS // 8):
        kept = _sampled(tracker, longer)
        firsts.append(kept[0])
        covered |= set(kept)
        assert _sampled(tracker, whole) == list(range(8))
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


def test_sample_mode_keeps_at_most_8_pages_by_default_and_every_page_of_a_load_of_8_or_fewer():
    for n in range(1, ROWS + 1):
        kept = _sampled(_tracker("sample", sample_layer_stride=1), torch.arange(n))
        assert len(kept) <= 8, (n, kept)
        assert n > 8 or kept == list(range(n)), (n, kept)


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


# ----- polling when the reader is idle (the background poller's call) -----
def test_report_if_idle_reports_a_tracker_its_reader_has_not_polled(caplog):
    where = f"mutation-survivor-{uuid.uuid4().hex}"
    tracker = _tracker(where=where, series=integrity.Series(where))
    _bad_verify(tracker, 1)  # verified, never polled: the reader polls only at its next verify
    with caplog.at_level(logging.ERROR, logger="sglang_dsv4_ext.integrity"):
        tracker.report_if_idle(0.0)
    assert [r.getMessage() for r in caplog.records] == [Mismatch(where, 1, 0, 1, ()).describe()]
    assert (tracker.pages_checked, tracker.mismatches) == (1, 1)
    assert _sample(integrity.METRIC_NAME, where=where) == 1


def test_report_if_idle_leaves_a_tracker_its_reader_polled_within_the_interval():
    tracker = _tracker()
    tracker.poll()  # the reader's own poll, just now
    _bad_verify(tracker, 1)
    tracker.report_if_idle(60.0)
    assert (tracker.pages_checked, tracker.mismatches) == (0, 0)
    assert tracker.poll() == Mismatch("load", 1, 0, 1, ())  # left to the reader's next poll


# ----- the regions label -----
@pytest.fixture
def restore_regions():
    yield
    integrity.use_regions(integrity.WHOLE_PAGE)


def test_load_series_carry_the_regions_in_use_and_pd_series_every_region(restore_regions):
    integrity.use_regions(integrity.PAYLOAD_ONLY)
    assert integrity.series_labels(integrity.WHERE_LOAD)["regions"] == integrity.PAYLOAD_ONLY
    assert integrity.series_labels(integrity.WHERE_PD)["regions"] == integrity.WHOLE_PAGE  # PD's digest: all


def test_use_regions_refuses_another_value_naming_it_and_the_two_accepted(restore_regions):
    integrity.use_regions(integrity.PAYLOAD_ONLY)
    accepted = f"{integrity.WHOLE_PAGE!r} or {integrity.PAYLOAD_ONLY!r}"
    with pytest.raises(ValueError, match=re.escape(f"{accepted}, got 'scales'")):
        integrity.use_regions("scales")
    assert integrity.series_labels(integrity.WHERE_LOAD)["regions"] == integrity.PAYLOAD_ONLY  # kept


# ----- the counters, made afresh -----
@pytest.fixture
def fresh_registry(monkeypatch):
    """The real prometheus_client counters, registered in a registry of the test's own: the default registry
    refuses a second registration, so the process's counters are made once, by the first test that needs them."""
    import prometheus_client

    registry = prometheus_client.CollectorRegistry()
    monkeypatch.setattr(prometheus_client, "Counter", functools.partial(prometheus_client.Counter, registry=registry))
    monkeypatch.setattr(integrity, "_METRICS", {})
    return registry


def test_the_counters_are_made_with_the_labels_of_each_series_and_can_be_served(fresh_registry):
    import prometheus_client

    where = f"mutation-survivor-{uuid.uuid4().hex}"
    series = integrity.Series(where)  # creates the three counters and the series at zero
    series.checked.inc(3)
    labels = integrity.series_labels(where)
    assert fresh_registry.get_sample_value(integrity.CHECKED_METRIC_NAME, labels) == 3
    assert fresh_registry.get_sample_value(integrity.METRIC_NAME, labels) == 0
    for reason in integrity.UNCHECKED_REASONS:
        assert fresh_registry.get_sample_value(integrity.UNCHECKED_METRIC_NAME, {**labels, "reason": reason}) == 0
    served = prometheus_client.generate_latest(fresh_registry).decode()  # what SGLang's /metrics writes
    for name in (integrity.METRIC_NAME, integrity.CHECKED_METRIC_NAME, integrity.UNCHECKED_METRIC_NAME):
        (help_line,) = [line for line in served.splitlines() if line.startswith(f"# HELP {name} ")]
        assert help_line.removeprefix(f"# HELP {name} ").strip(), help_line
    assert integrity.checked_metric() is integrity.checked_metric()  # made once, then reused


# ----- the background poller -----
class _EndPollersStartedAfter:
    """Added to the polled set to end the poller threads a test started: ``SystemExit`` is no ``Exception``, so it
    leaves ``_poll_forever``'s loop, and a thread ends quietly on it. Threads that ran before (the process's own
    poller, which reads the same set) only skip it."""

    def __init__(self, before: set[threading.Thread]) -> None:
        self.before = before

    def report_if_idle(self, seconds: float) -> None:
        if threading.current_thread() not in self.before:
            raise SystemExit


class _Pollers:
    def __init__(self) -> None:
        self.before = set(threading.enumerate())

    def started(self) -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t not in self.before]

    def end(self) -> None:
        """End the pollers started since; their ``SystemExit`` is not reported as a thread's failure (the default
        ``threading.excepthook`` ignores it too, pytest's reports it)."""
        stopper = _EndPollersStartedAfter(self.before)
        previous = threading.excepthook

        def hook(args) -> None:
            if args.exc_type is not SystemExit:
                previous(args)

        threading.excepthook = hook
        with integrity._POLLER_LOCK:  # the lock the poller walks the set under
            integrity._POLLED.add(stopper)
        try:
            for thread in self.started():
                thread.join(timeout=1.0)
        finally:
            with integrity._POLLER_LOCK:
                integrity._POLLED.discard(stopper)
            threading.excepthook = previous


@pytest.fixture
def pollers(monkeypatch):
    """No poller running and nothing polled yet, as in a fresh process; the pollers the test starts end with it."""
    monkeypatch.setattr(integrity, "_POLLED", weakref.WeakSet())
    monkeypatch.setattr(integrity, "_POLLER", [])
    pollers = _Pollers()
    yield pollers
    pollers.end()


def _eventually(found, seconds: float = 2.0):
    """``found()`` once true, else its last value after ``seconds``: the pollers here run every 0.02 s, and a longer
    wait would outlast mutmut's time limit, so a poller that never polls would count as a timeout, not a failure."""
    deadline = time.monotonic() + seconds
    while not (value := found()) and time.monotonic() < deadline:
        time.sleep(0.01)
    return value


def _reported(caplog, where: str):
    """The mismatch lines logged for the tracker of ``where`` (each test's trackers have a ``where`` of their own)."""
    return _eventually(lambda: [r for r in caplog.records if f"mismatch ({where})" in r.getMessage()])


def _verified_not_polled(bad_row: int = 1) -> IntegrityTracker:
    where = f"mutation-survivor-{uuid.uuid4().hex}"
    tracker = _tracker(where=where, series=integrity.Series(where))
    _bad_verify(tracker, bad_row)  # the run's last verify: the reader polls only at its next one, which never comes
    return tracker


def test_poll_in_background_reports_the_last_verifications_from_its_own_thread(pollers, caplog):
    tracker = _verified_not_polled()
    with caplog.at_level(logging.ERROR, logger="sglang_dsv4_ext.integrity"):
        integrity.poll_in_background(tracker, interval=0.02)
        (record,) = _reported(caplog, tracker.where)
    (poller,) = integrity._POLLER
    assert record.thread == poller.ident  # the poller this call started, not the reader
    assert (tracker.pages_checked, tracker.mismatches) == (1, 1)
    assert _sample(integrity.METRIC_NAME, where=tracker.where) == 1


def test_one_daemon_poller_named_for_thread_dumps_polls_every_tracker(pollers, caplog):
    """One thread for all trackers; a daemon, so it never keeps a scheduler process alive at exit; named so a
    thread dump (py-spy, faulthandler) says what it is."""
    first, second = _verified_not_polled(1), _verified_not_polled(2)
    with caplog.at_level(logging.ERROR, logger="sglang_dsv4_ext.integrity"):
        integrity.poll_in_background(first, interval=0.02)
        integrity.poll_in_background(second, interval=0.02)
        assert _reported(caplog, first.where) and _reported(caplog, second.where)
    (poller,) = pollers.started()
    assert integrity._POLLER == [poller]
    assert (poller.name, poller.daemon) == ("dsv4-integrity-poll", True)


def test_a_poller_that_ended_is_replaced_at_the_next_call(pollers, caplog):
    integrity.poll_in_background(_verified_not_polled(), interval=0.02)
    pollers.end()
    (ended,) = integrity._POLLER
    assert not ended.is_alive()
    tracker = _verified_not_polled()
    with caplog.at_level(logging.ERROR, logger="sglang_dsv4_ext.integrity"):
        integrity.poll_in_background(tracker, interval=0.02)
        (record,) = _reported(caplog, tracker.where)
    (poller,) = integrity._POLLER
    assert poller is not ended and poller.is_alive() and record.thread == poller.ident


class _PollFails:
    """Stands in for a tracker whose poll raises (a CUDA error, say), which no tracker on a CPU can be made to do:
    the poller must go on polling the others."""

    def report_if_idle(self, seconds: float) -> None:
        raise RuntimeError("device lost")


def test_a_failing_poll_is_logged_with_its_traceback_and_the_other_trackers_are_still_polled(pollers, caplog):
    failing, tracker = _PollFails(), _verified_not_polled()
    with caplog.at_level(logging.ERROR, logger="sglang_dsv4_ext.integrity"):
        integrity.poll_in_background(failing, interval=0.02)  # type: ignore[arg-type]
        integrity.poll_in_background(tracker, interval=0.02)
        assert _reported(caplog, tracker.where)
        failures = _eventually(lambda: [r for r in caplog.records if r.exc_info and r.exc_info[0] is RuntimeError])
    assert failures, [r.getMessage() for r in caplog.records]
    assert all("integrity" in r.getMessage() and "background poll" in r.getMessage() for r in failures)
    assert integrity._POLLER[0].is_alive()


def test_a_tracker_registered_while_the_poller_walks_the_polled_set_leaves_the_poller_running(pollers, caplog):
    """A second pool's tracker registered while the poller walks the set of polled trackers. The poller is held at
    its first step through the set (a trace function in its thread, installed by ``threading.settrace`` before it
    starts) until the registration returned or 0.5 s passed. A set that another thread adds to while it is walked
    raises "Set changed size during iteration": it ended the poller, and no tracker's last verifications reached
    the counters any more."""
    walking, registered = threading.Event(), threading.Event()
    walk = weakref.WeakSet.__iter__.__code__

    def hold_at_the_first_step(frame, event, arg):
        if event == "return" and arg is not None and not walking.is_set():  # the walk yields its first tracker
            walking.set()
            registered.wait(timeout=0.5)
        return hold_at_the_first_step

    def trace(frame, event, arg):
        return hold_at_the_first_step if frame.f_code is walk and not walking.is_set() else None

    first = _verified_not_polled()  # held here: the set keeps only weak references
    threading.settrace(trace)
    try:
        integrity.poll_in_background(first, interval=0.02)
    finally:
        threading.settrace(None)  # the poller just started has it; no later thread does
    assert walking.wait(timeout=2.0), "the poller never walked the polled set"
    second = _verified_not_polled()
    with caplog.at_level(logging.ERROR, logger="sglang_dsv4_ext.integrity"):
        integrity.poll_in_background(second, interval=0.02)
        registered.set()
        reported = _reported(caplog, second.where)
    (poller,) = integrity._POLLER
    assert poller.is_alive() and reported and reported[0].thread == poller.ident


def test_a_tracker_collected_on_another_thread_as_the_poller_walks_the_set_leaves_the_poller_running(pollers, caplog):
    """A pool's tracker collected on another thread (its pool torn down) just as the poller starts to walk the set of
    polled trackers. ``WeakSet`` defers a collected member's removal while the set is walked, but its check ("is it
    being walked?") and the removal are two steps: collected between them, the member is discarded under the walk,
    which raises "Set changed size during iteration", as an addition did. The test runs that interleaving with two
    trace functions: the poller is held where its walk starts until the collecting thread has checked, and the
    collecting thread is held before its discard until the walk has yielded its first tracker."""
    import gc
    import linecache
    import sys

    at_walk, checked, walking, discarded = (threading.Event() for _ in range(4))
    walked_at_the_discard: list[bool] = []
    walk = weakref.WeakSet.__iter__.__code__

    def hold_at_the_first_yield(frame, event, arg):
        if event == "return" and arg is not None and not walking.is_set():
            walking.set()
            discarded.wait(timeout=1.0)
        return hold_at_the_first_yield

    def poller_trace(frame, event, arg):  # the walk starts when list() first resumes __iter__
        if frame.f_code is walk and not at_walk.is_set():
            at_walk.set()
            checked.wait(timeout=1.0)
            return hold_at_the_first_yield
        return None

    def hold_before_the_discard(frame, event, arg):
        if event == "line" and "self.data.discard(item)" in linecache.getline(frame.f_code.co_filename, frame.f_lineno):
            checked.set()
            walking.wait(timeout=1.0)
            walked_at_the_discard.append(bool(frame.f_locals["self"]._iterating))
        elif event == "return":
            discarded.set()
        return hold_before_the_discard

    def collector_trace(frame, event, arg):  # only the polled set's removal (another WeakSet's may run in gc too)
        removal = frame.f_code.co_name == "_remove" and "weakref" in frame.f_code.co_filename
        polled = removal and frame.f_locals["selfref"]() is integrity._POLLED
        return hold_before_the_discard if polled and not checked.is_set() else None

    kept, collected = _verified_not_polled(), _verified_not_polled()
    integrity._POLLED.add(collected)
    previous_thread_trace, previous_trace = threading.gettrace(), sys.gettrace()
    threading.settrace(poller_trace)
    try:
        integrity.poll_in_background(kept, interval=0.02)
    finally:
        threading.settrace(previous_thread_trace)
    (poller,) = integrity._POLLER
    assert at_walk.wait(timeout=2.0), "the poller never walked the polled set"
    sys.settrace(collector_trace)
    try:
        del collected
        gc.collect()
    finally:
        sys.settrace(previous_trace)
    assert checked.is_set() and discarded.is_set(), "the collected tracker's removal did not run as staged"
    assert walked_at_the_discard == [True], "the discard did not land under the poller's walk"
    late = _verified_not_polled()
    with caplog.at_level(logging.ERROR, logger="sglang_dsv4_ext.integrity"):
        integrity.poll_in_background(late, interval=0.02)
        reported = _reported(caplog, late.where)
    assert integrity._POLLER == [poller] and poller.is_alive()
    assert reported and reported[0].thread == poller.ident


class _ChangesUnderItsWalks:
    """A stand-in for the set of polled trackers whose first ``changing`` walks raise as a set changed by another
    thread under the walk does (the staged interleaving above, without threads)."""

    def __init__(self, members: list[IntegrityTracker], changing: int):
        self.members, self.changing, self.walks = members, changing, 0

    def __iter__(self):
        self.walks += 1
        if self.walks <= self.changing:
            raise RuntimeError("Set changed size during iteration")
        return iter(self.members)


def test_the_walk_of_the_polled_set_is_taken_again_in_the_same_round(monkeypatch):
    tracker = _verified_not_polled()
    polled = _ChangesUnderItsWalks([tracker], changing=1)
    monkeypatch.setattr(integrity, "_POLLED", polled)
    assert integrity._polled_trackers() == [tracker] and polled.walks == 2


def test_a_set_that_changes_under_every_walk_gives_no_trackers_this_round(monkeypatch):
    polled = _ChangesUnderItsWalks([_verified_not_polled()], changing=1000)
    monkeypatch.setattr(integrity, "_POLLED", polled)
    assert integrity._polled_trackers() == [] and 1 < polled.walks < 1000
