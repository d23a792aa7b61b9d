"""Reduced GPU replay of the index-K race (R3) and its wait-ahead fix in plain torch (benchmarks/gate_replay.py).

Runs the same schedules as the full script with fewer trials: HiCache's layer-wise async H2D load on
a side stream (events recorded through a verbatim mirror of SGLang's LayerLoadingEvent /
LayerDoneCounter) against eager readers and against readers captured in per-segment CUDA graphs with
eager breaks.  Needs a CUDA GPU. This is the model; the same race in SGLang's own classes is
tests/gpu/test_sglang_race_gpu.py.
"""

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU: replays async H2D layer loads against CUDA-graph readers"
)
def test_stock_breakable_replay_reads_stale_index_k_and_wait_ahead_reads_none(tmp_path):
    from benchmarks import gate_replay as gr

    cfg = gr.ReplayConfig(trials=200, sweep_factors=(0.0, 2.0), sweep_trials=40, progress_every=0)
    report = gr.run_replay(cfg, out_dir=tmp_path, log=lambda *_: None)
    rows = {r.schedule: r for r in report.main_rows}

    assert all(rows[s].trials == 200 for s in gr.MAIN_SCHEDULES)
    # The detector sees the race where nothing (or only the stock break) waits ...
    assert rows[gr.EAGER_UNGATED].stale_trials > 0
    assert rows[gr.GRAPH_STOCK].stale_trials > 0
    # ... and in the stock replay the stale reads come from captured readers, not from the gated breaks.
    assert rows[gr.GRAPH_STOCK].stale_indexer > 0
    assert rows[gr.GRAPH_STOCK].stale_attn == 0
    # Gated eager reads and the wait-ahead replay never see a layer before its load landed.
    for sched in (gr.EAGER_GATED, gr.GRAPH_WAIT_AHEAD):
        assert rows[sched].stale_indexer == 0 and rows[sched].stale_attn == 0, sched
    for row in report.sweep_rows:
        if row.schedule in gr.MUST_BE_CLEAN:
            assert row.stale_indexer == 0 and row.stale_attn == 0, (row.schedule, row.delay_us)
    assert report.failures == []
    assert (tmp_path / "gate_replay_trials.csv").is_file()
    assert (tmp_path / "gate_replay_summary.json").is_file()
