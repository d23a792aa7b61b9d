"""A forget is ordered on the GPU between the work around it: after the stream that made its device keys, and
before the next backup of its page on another stream.

The integrity tracker clears forgotten host keys on a side stream of its own (``IntegrityTracker._forgetting``):
that stream first waits for the caller's stream when the keys are device tensors (SGLang's kernel io backend makes
them there), and every later record or verify waits for the forget's event. Here the caller's stream is held on the
GPU for about 0.5 s, then writes the key to forget into the index tensor and forgets it; another stream backs the
same page up again at once. Done right, the forget clears the written key, not the one the tensor held before, and
the new backup's checksum is what the table keeps. Two replays of orderings the tracker must not have are shown
to be caught by the same check: the forget on the caller's stream without the side stream and its event (the next
backup then runs first and is erased), and a side stream that does not wait for the keys' stream (it clears the
key the tensor held before). No SGLang here: the tracker and its Triton checksum kernel only.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu

ROWS = 16
HOLD_S = 0.5
FORGOTTEN, STALE = 5, 7  # the key the held stream writes into the index tensor, and the one it held before


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: run tests/run_gpu_tests.sh on a CUDA GPU machine")
    return torch


def forget_then_back_up_again(torch, arrange=None):
    """The table's checksums of keys FORGOTTEN and STALE after the replay, with what they must be."""
    from benchmarks.sglang_gpu import race
    from kernels_sm120 import index_k_checksum as ck
    from sglang_dsv4_ext.runtime.index_k import integrity as ii

    g = torch.Generator(device="cuda").manual_seed(9)
    buffers = [torch.randint(0, 256, (ROWS, 8448), dtype=torch.uint8, device="cuda", generator=g)]
    tracker = ii.IntegrityTracker("full", buffers, 2 * ROWS)
    if arrange is not None:
        arrange(tracker)
    rows = torch.arange(ROWS, device="cuda")
    tracker.record_all_layers(rows, rows)  # every page backed up once (and the checksum kernel compiled)
    buffers[0][FORGOTTEN, 0] ^= 1  # the page's next backup has another checksum
    keys = torch.full((1,), STALE, dtype=torch.int64, device="cuda")
    hold_cycles = int(race.sleep_rate_cycles_per_us() * HOLD_S * 1e6)  # synchronises: before the replay
    torch.cuda.synchronize()
    before = tracker.table[0].clone()
    owner, other = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(owner):
        torch.cuda._sleep(hold_cycles)
        keys.fill_(FORGOTTEN)  # the device keys are made on the owner's stream, after its held work
        tracker.forget(keys)
    with torch.cuda.stream(other):
        tracker.record(0, rows[FORGOTTEN : FORGOTTEN + 1], rows[FORGOTTEN : FORGOTTEN + 1])
    torch.cuda.synchronize()
    backed_up = int(ck.page_checksums(buffers[0], rows[FORGOTTEN : FORGOTTEN + 1])[0])
    assert backed_up != int(before[FORGOTTEN])
    after = tracker.table[0]
    return (int(after[FORGOTTEN]), int(after[STALE])), (backed_up, int(before[STALE]))


def test_a_forget_lands_after_its_keys_are_made_and_before_the_next_backup(torch):
    got, want = forget_then_back_up_again(torch)
    assert got == want, "the table lost the new backup or the forget cleared the key its index tensor held before"


def test_a_forget_on_the_callers_stream_without_an_event_is_caught(torch):
    """Replay: no side stream (the forget runs on the held stream, nothing marks it for the table's users)."""

    def on_the_callers_stream(tracker):
        tracker._forget_stream = None

    (forgotten, stale), (backed_up, stale_before) = forget_then_back_up_again(torch, on_the_callers_stream)
    assert stale == stale_before
    assert forgotten != backed_up  # the backup ran first and the late forget erased it


def test_a_forget_that_does_not_wait_for_its_keys_stream_is_caught(torch):
    """Replay: the side stream does not wait for the stream that made the device keys."""

    class NoWait(torch.cuda.Stream):
        def wait_stream(self, stream):
            return None

    def without_the_wait(tracker):
        tracker._forget_stream = NoWait(device=tracker.device)

    (_forgotten, stale), (_backed_up, stale_before) = forget_then_back_up_again(torch, without_the_wait)
    assert stale != stale_before  # the forget read the index tensor before the held stream wrote it
