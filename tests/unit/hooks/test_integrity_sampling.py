"""Which pages the integrity tracker verifies, and what each mismatch report names.

Pure tracker tests (``sglang_dsv4_ext/runtime/index_k/integrity.py``, which imports nothing from SGLang): the
checksum kernels run their torch reference on CPU (``kernels_sm120/index_k_checksum.py``).
"""

from __future__ import annotations

import torch

from sglang_dsv4_ext.runtime.index_k import integrity as ii

ROW_BYTES = 256


def _tracker(mode="sample", layers=4, rows=40, keys=64):
    g = torch.Generator().manual_seed(3)
    buffers = [torch.randint(0, 256, (rows, ROW_BYTES), dtype=torch.uint8, generator=g) for _ in range(layers)]
    return ii.IntegrityTracker(mode, buffers, keys)


def _rows_verified_per_layer(tracker, loads: int, pages: int) -> dict[int, list[list[int]]]:
    """Load one ``pages``-page prefix ``loads`` times (device rows = host keys = 0..pages-1): rows kept per layer."""
    kept: dict[int, list[list[int]]] = {layer: [] for layer in range(len(tracker.buffers))}
    rows = torch.arange(pages)
    for _ in range(loads):
        tracker.begin_load()
        for layer in range(len(tracker.buffers)):
            tracker.expect(layer, rows, rows)
            if tracker.has_pending(layer):
                kept[layer].append(tracker.pending[layer].rows.tolist())
                tracker.verify(layer)
    return kept


def test_a_repeatedly_loaded_prefix_is_verified_at_every_position_of_every_layer():
    """32 pages, 8 sampled per load, one layer in four: each layer's sampled loads shift the rows by one,
    so 4 sampled loads (16 loads) cover all 32 positions of every layer; before, a layer was sampled only on
    loads with (layer + loads) % 4 == 0, so ``loads % 4`` never changed for it and 8 of 32 positions were
    ever verified."""
    tracker = _tracker()
    kept = _rows_verified_per_layer(tracker, loads=16, pages=32)
    for layer, samples in kept.items():
        assert len(samples) == 4, (layer, samples)
        assert samples == [list(range(shift, 32, 4)) for shift in range(4)], (layer, samples)
        assert sorted(r for s in samples for r in s) == list(range(32))


def test_rows_past_the_last_full_stride_are_covered_too():
    """33 pages, 8 per load: step 5 (ceil), so the five shifts cover row 32 as well; samples never exceed 8."""
    tracker = _tracker()
    kept = _rows_verified_per_layer(tracker, loads=20, pages=33)
    for layer, samples in kept.items():
        assert len(samples) == 5
        assert all(len(s) <= tracker.sample_pages for s in samples)
        assert samples[0] == [0, 5, 10, 15, 20, 25, 30]
        assert sorted(r for s in samples for r in s) == list(range(33)), layer


def test_sampled_and_unsampled_pages_add_up_on_every_load():
    tracker = _tracker()
    _rows_verified_per_layer(tracker, loads=20, pages=33)
    assert tracker.rows_verified + tracker.unchecked[ii.SAMPLING] == 20 * 4 * 33


def _load_and_verify(tracker, rows, requests):
    tracker.begin_load()
    for layer in range(len(tracker.buffers)):
        tracker.expect(layer, rows, rows, requests=requests)
        tracker.verify(layer)
    return tracker.poll()


def test_each_mismatch_report_names_its_own_first_bad_page_and_request():
    """After a report the first-bad-page record is reset: a later incident is named by its own layer, page and
    request, not the first incident's (the device record keeps the minimum code, ``atomic_min``)."""
    tracker = _tracker(mode="full")
    rows = torch.arange(8)
    tracker.record_all_layers(rows, rows)
    tracker.buffers[1][2, 5] ^= 0x10
    first = _load_and_verify(tracker, rows, ("req-a",))
    assert (first.count, first.layer, first.page, first.requests) == (1, 1, 2, ("req-a",))
    tracker.record_all_layers(rows, rows)  # a new backup of the (now changed) rows: they match again
    tracker.buffers[3][6, 9] ^= 0x01
    second = _load_and_verify(tracker, rows, ("req-b",))
    assert (second.count, second.layer, second.page, second.requests) == (1, 3, 6, ("req-b",))
    assert tracker.mismatches == 2
    third = _load_and_verify(tracker, rows, ("req-c",))  # layer 3 page 6 still differs from its checksum
    assert (third.layer, third.page, third.requests) == (3, 6, ("req-c",))
