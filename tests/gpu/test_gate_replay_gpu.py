"""Reduced GPU replay of issue 4's index-K race (R3) and its wait-ahead fix (gpu/gate_replay.py).

Runs the same schedules as the full script with fewer trials: HiCache's layer-wise async H2D load on
a side stream (events recorded through a verbatim mirror of SGLang's LayerLoadingEvent /
LayerDoneCounter) against eager readers and against readers captured in per-segment CUDA graphs with
eager breaks.  Needs a CUDA GPU; SGLang itself is not imported (it cannot be on the GPU machine).
"""

import importlib.util
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

SCRIPT = Path(__file__).resolve().parents[2] / "gpu" / "gate_replay.py"


def _load_gate_replay():
    # gpu/ is a script folder, not a package: load the module from its file.
    spec = importlib.util.spec_from_file_location("gate_replay", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module through sys.modules
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="needs a CUDA GPU: replays async H2D layer loads against CUDA-graph readers")
def test_stock_breakable_replay_reads_stale_index_k_and_wait_ahead_reads_none(tmp_path):
    gr = _load_gate_replay()
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
