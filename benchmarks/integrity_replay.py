"""GPU: does integrity mode catch the index-K read race, and what does it cost?

Reuses the race replay (``benchmarks/gate_replay.py``: HiCache-style layer-wise async H2D loads on a side
stream, readers on the compute stream) and adds the shipped :class:`IntegrityTracker`: the host
content sets play the backed-up pages (their checksums are recorded once), each trial's load
``expect``s its pages, and every indexer reader verifies its layer on its own stream right after
reading it. The breakable-graph schedules (stock R3 and the gate's wait-ahead) are run too: their
captured readers replay no Python, so nothing is verified there; the column ``unverified`` shows
that this is counted (``IntegrityTracker.unverified_pages``, logged once), not silent.

Per mode (off / sample / full) and schedule: trials, stale trials (ground truth from the replay's
sums), stale trials the integrity record flagged, false positives on clean trials, pages loaded
and replaced before any reader verified them, trials whose host launches outran the window that
holds the GPU (their time includes host launch gaps), and median trial time. Requirement: ungated stale
trials detected >= 99% (full), gated: 0 false positives, sample <= 2% of the gated step time.

Run: PYTHONUNBUFFERED=1 python -m benchmarks.integrity_replay [--trials N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import gate_replay as gr  # noqa: E402
from kernels_sm120 import index_k_checksum as ck  # noqa: E402
from sglang_dsv4_ext.config import IntegrityMode
from sglang_dsv4_ext.runtime.index_k import integrity as ii  # noqa: E402

SCHEDULES = (gr.EAGER_UNGATED, gr.EAGER_GATED, gr.GRAPH_STOCK, gr.GRAPH_WAIT_AHEAD)


class IntegrityReplay(gr.GateReplay):
    def __init__(self, cfg, mode, log=print):
        super().__init__(cfg, log=log)
        self.mode = mode
        self.pages = cfg.pages_per_layer
        self.tracker = None
        if mode != IntegrityMode.OFF:
            n, p = cfg.layers, self.pages
            views = [self.kdev[layer].view(p, -1) for layer in range(n)]
            self.tracker = ii.IntegrityTracker(mode, views, gr.CONTENT_SETS * p)
            rows = torch.arange(p, device="cuda")
            for s in range(gr.CONTENT_SETS):  # "backup": the host pages' checksums
                for layer in range(n):
                    host_page = self.host_sets[s, layer].cuda().view(p, -1)
                    self.tracker.table[layer, s * p : (s + 1) * p] = ck.page_checksums(host_page, rows)
            self.rows = rows
            torch.cuda.synchronize()

    def _pre(self, layer):
        super()._pre(layer)
        if self.tracker is not None:
            self.tracker.verify(layer)

    def run_trial(self, schedule, delay_cycles):
        if self.tracker is not None:
            k = self.trial_id % gr.CONTENT_SETS
            with torch.cuda.stream(self.compute):
                self.tracker.begin_load()
                for layer in range(self.cfg.layers):
                    self.tracker.expect(layer, self.rows, k * self.pages + self.rows)
            before, unverified = int(self.tracker.state[0]), self.tracker.unverified_pages
        rec = super().run_trial(schedule, delay_cycles)
        rec["flagged"] = int(self.tracker.state[0]) > before if self.tracker is not None else False
        # Pages this trial's load left pending are counted when the next trial's load replaces them.
        rec["unverified_before"] = unverified if self.tracker is not None else 0
        return rec


def run_mode(cfg, mode, trials, log):
    rep = IntegrityReplay(cfg, mode, log=log)
    rep.capture()
    cal = rep.calibrate()
    delay = int(cfg.delay_factor * rep.layer_compute_us * rep.cycles_per_us)
    rows = {
        s: {
            "mode": mode,
            "schedule": s,
            "trials": 0,
            "stale": 0,
            "detected": 0,
            "false_pos": 0,
            "ms": [],
            "unverified": 0,
            "overruns": 0,
        }
        for s in SCHEDULES
    }
    previous, last_unverified = None, 0
    for r in range(trials):
        for i in range(len(SCHEDULES)):
            s = SCHEDULES[(i + r) % len(SCHEDULES)]
            rec = rep.run_trial(s, delay)
            if previous is not None:  # what the previous trial's readers left unverified
                rows[previous]["unverified"] += rec["unverified_before"] - last_unverified
            previous, last_unverified = s, rec["unverified_before"]
            row = rows[s]
            stale = rec["stale_indexer"] + rec["stale_attn"] > 0
            row["trials"] += 1
            row["stale"] += stale
            row["detected"] += stale and rec["flagged"]
            row["false_pos"] += (not stale) and rec["flagged"]
            row["ms"].append(rec["ms"])
            # The host's launches outran the window that holds the GPU: host launch time is in "ms".
            row["overruns"] += rec["launch_overrun"]
    out = []
    for row in rows.values():
        row["median_ms"] = statistics.median(row.pop("ms"))
        row["detected_pct"] = 100.0 * row["detected"] / row["stale"] if row["stale"] else float("nan")
        out.append(row)
    return out, cal


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=300, help="trials per schedule and mode (default %(default)s)")
    p.add_argument("--out", default=os.environ.get("OUT") or "out/integrity_replay")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("integrity_replay.py needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    cfg = gr.ReplayConfig(trials=args.trials, progress_every=0)
    results, card = [], gr.card_info()
    for mode in (IntegrityMode.OFF, IntegrityMode.SAMPLE, IntegrityMode.FULL):
        rows, cal = run_mode(cfg, mode, args.trials, print)
        results += rows
        print(f"mode {mode}: done ({cal['layer_compute_us']:.1f} us/layer compute)", flush=True)
    base = {r["schedule"]: r["median_ms"] for r in results if r["mode"] == IntegrityMode.OFF}
    print(f"card: {card}")
    print(
        f"{'mode':<7}{'schedule':<17}{'trials':>7}{'stale':>7}{'detected':>9}{'det_%':>8}{'false+':>7}"
        f"{'unverified':>11}{'overruns':>9}{'median_ms':>10}{'vs_off_%':>9}"
    )
    for r in results:
        r["vs_off_pct"] = (r["median_ms"] / base[r["schedule"]] - 1) * 100
        print(
            f"{r['mode']:<7}{r['schedule']:<17}{r['trials']:>7}{r['stale']:>7}{r['detected']:>9}"
            f"{r['detected_pct']:>8.2f}{r['false_pos']:>7}{r['unverified']:>11}{r['overruns']:>9}{r['median_ms']:>10.3f}"
            f"{r['vs_off_pct']:>+9.2f}"
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "integrity_replay.json").write_text(json.dumps({"card": card, "rows": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
