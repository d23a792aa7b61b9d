"""Server-side evidence for a repro run: every server's Prometheus counters before and after.

The harness counts corrupted tool calls; the servers count what they saw meanwhile. Reading each
server's ``/metrics`` (SGLang's own exporter, ``--enable-metrics``) before and after a run and
printing the deltas next to the corruption rates settles "did the failures coincide with aborted
requests, PD transfer failures or timeouts, HiCache loads, integrity mismatches?" in one run.

Parsing uses ``prometheus_client``'s text parser (the library SGLang exports with). Counters are
summed over their label sets per server. A server that cannot be read is reported, not fatal.

Call site for the runner (two lines)::

    before = server_evidence.snapshot(urls)          # before the first request
    ...run...
    summary["server_evidence"] = server_evidence.deltas(before, server_evidence.snapshot(urls))
"""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Dict, Iterable, List, Optional

# label shown in the summary -> SGLang 0.5.23 metric family (counter name without ``_total``)
EVIDENCE_METRICS = {
    "aborted_requests": "sglang:num_aborted_requests",
    "pd_transfer_failed": "sglang:num_transfer_failed_reqs",  # includes KV transfer timeouts
    "pd_bootstrap_failed": "sglang:num_bootstrap_failed_reqs",
    "hicache_load_back_tokens": "sglang:load_back_tokens",
    "hicache_backup_tokens": "sglang:hicache_backup_tokens",
    "integrity_mismatches": "sglang:dsv4_index_k_integrity_mismatches",
}


def parse_counters(text: str) -> Dict[str, float]:
    """``{family: value summed over label sets}`` for the evidence families present in ``text``."""
    from prometheus_client.parser import text_string_to_metric_families

    wanted = set(EVIDENCE_METRICS.values())
    out: Dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            base = sample.name[: -len("_total")] if sample.name.endswith("_total") else None
            if base in wanted:
                out[base] = out.get(base, 0.0) + float(sample.value)
    return out


def read_metrics(url: str, timeout: float = 10.0) -> Dict[str, object]:
    """One server: ``{"url", "counters"}`` or ``{"url", "error"}`` (never raises for network errors)."""
    endpoint = url.rstrip("/") + "/metrics"
    try:
        with urllib.request.urlopen(endpoint, timeout=timeout) as resp:
            text = resp.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return {"url": url, "error": f"{endpoint}: {exc}"}
    return {"url": url, "counters": parse_counters(text)}


def snapshot(urls: Iterable[str]) -> List[Dict[str, object]]:
    return [read_metrics(u) for u in urls]


def _delta(before: Dict[str, float], after: Dict[str, float], family: str) -> Optional[float]:
    if family not in after:
        return None  # the server does not export it (metrics off, feature off, older SGLang)
    return after[family] - before.get(family, 0.0)


def deltas(before: List[Dict[str, object]], after: List[Dict[str, object]]) -> List[Dict[str, object]]:
    """Per server: each evidence label's increase during the run (None: not exported; error: unreadable)."""
    rows = []
    for b, a in zip(before, after):
        row: Dict[str, object] = {"url": a["url"]}
        error = b.get("error") or a.get("error")
        if error:
            row["error"] = error
        else:
            for label, family in EVIDENCE_METRICS.items():
                row[label] = _delta(b["counters"], a["counters"], family)
        rows.append(row)
    return rows


def format_table(rows: List[Dict[str, object]]) -> str:
    labels = list(EVIDENCE_METRICS)
    lines = ["server".ljust(28) + "".join(lbl[:22].rjust(24) for lbl in labels)]
    for row in rows:
        if "error" in row:
            lines.append(f"{row['url']:<28}  unreadable: {row['error']}")
            continue
        cells = ["n/a" if row[lbl] is None else f"{row[lbl]:g}" for lbl in labels]
        lines.append(f"{row['url']:<28}" + "".join(c.rjust(24) for c in cells))
    return "\n".join(lines)
