"""The HiCache index-K load race in SGLang's own classes on a GPU, with the extension's activated hooks.

SGLang's real ``DeepSeekV4TokenToKVPool`` (cuda), pinned ``DeepSeekV4PagedHostPool``, ``HiCacheController``
loading layer by layer on its own H2D stream with ``LayerDoneCounter`` events and
``SGLANG_TEST_HICACHE_H2D_DELAY_CYCLES``; readers through the pool's getters; for R3 SGLang's
``BreakableCUDAGraph`` replayed by ``PrefillCudaGraphRunner.execute``. 2000 trials per gate mode and
phase. Stubbed or stood in (benchmarks/sglang_gpu/race.py says why): the allocator, the
``sgl_kernel`` transfer op (plain torch), the reader kernels (exact checksums), the model around the
replay. The unfixed path is gate ``off`` (SGLang's own schedule): it must read stale.
"""

import json
import os

import pytest

from benchmarks.sglang_gpu import race

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def race_result(sglang_gpu):
    cfg = race.RaceConfig(trials=2000, progress_every=0)
    return race.run(cfg, log=lambda *_: None)


def _rows(result, phase):
    return {r["gate"]: r for r in result["rows"] if r["phase"] == phase}


def test_race_result_files(race_result, result_dir):
    with open(os.path.join(result_dir, "sglang_race_summary.json"), "w") as fh:
        json.dump(race_result, fh, indent=2, default=str)
    print("\n" + race_result["table"])
    for r in race_result["rows"]:
        # >= 2000 trials that started only once the host had enqueued the whole trial (the worst case);
        # the rare trial whose GPU hold ended early is run again, and counted in the totals too.
        assert r["trials"] - r["launch_overruns"] >= 2000, r
        assert r["launch_overruns"] <= 0.01 * r["trials"], r


def test_subpool_reads_are_stale_without_the_gate_and_never_with_it(race_result):
    rows = _rows(race_result, "eager")
    assert rows["off"]["stale_trials"] > 0 and rows["off"]["stale_reads"]["subpool"] > 0  # the detector sees it
    for gate in ("auto", "strict"):
        assert rows[gate]["stale_reads"] == {"subpool": 0, "toplevel": 0}, gate
    layers = race.RaceConfig().layers
    assert rows["strict"]["refused_reads"] == rows["strict"]["trials"] * layers  # every unwaited read refused
    assert rows["auto"]["refused_reads"] == rows["off"]["refused_reads"] == 0
    # SGLang's own top-level getter (the C4 indexer's) waits in every mode.
    assert rows["off"]["stale_reads"]["toplevel"] == 0


def test_r3_stock_breakable_replay_reads_stale_and_wait_ahead_reads_none(race_result):
    rows = _rows(race_result, "r3")
    assert rows["off"]["stale_trials"] > 0 and rows["off"]["stale_reads"]["captured"] > 0
    assert rows["off"]["stale_reads"]["break"] == 0  # the eager breaks wait for their own layer
    for gate in ("auto", "strict"):
        assert rows[gate]["stale_reads"] == {"captured": 0, "break": 0}, gate
    assert race_result["failures"] == []
