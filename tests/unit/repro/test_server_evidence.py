"""repro.server_evidence against a loopback HTTP stand-in serving Prometheus text with SGLang's real
metric names (taken from SGLang's own collectors, so a rename upstream fails here)."""

from __future__ import annotations

import http.server
import inspect
import re
import threading

import pytest

from sglang_dsv4_ext.tools.repro import server_evidence as se


class _Metrics:
    """Counters exposed by prometheus_client itself (the exporter SGLang uses): values[family][label] = n."""

    def __init__(self):
        self.values = {}

    def text(self) -> str:
        from prometheus_client import CollectorRegistry, Counter, generate_latest

        registry = CollectorRegistry()
        for family, by_label in self.values.items():
            counter = Counter(family, "stand-in", labelnames=["label"], registry=registry)
            for label, value in by_label.items():
                counter.labels(label=label).inc(value)
        return generate_latest(registry).decode()


@pytest.fixture
def server():
    metrics = _Metrics()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = metrics.text().encode()
            self.send_response(200 if self.path == "/metrics" else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", metrics
    httpd.shutdown()
    httpd.server_close()


def test_metric_names_are_sglangs_own():
    from sglang.srt.observability import metrics_collector

    from sglang_dsv4_ext.runtime.index_k import integrity as ii

    source = inspect.getsource(metrics_collector)
    ours = {ii.METRIC_NAME, ii.CHECKED_METRIC_NAME, ii.UNCHECKED_METRIC_NAME}
    for family in se.EVIDENCE_METRICS.values():
        if family.startswith("sglang:dsv4_"):
            ours.discard(family + "_total")
            continue
        assert f'"{family}_total"' in source, family
    assert ours == set()  # all three integrity series are read


def test_deltas_per_server_with_an_unreadable_one(server):
    url, metrics = server
    metrics.values = {"sglang:num_aborted_requests": {"m": 3, "n": 1}, "sglang:num_transfer_failed_reqs": {"0": 70}}
    dead = "http://127.0.0.1:9"  # discard port: nothing listens
    before = se.snapshot([url, dead])
    metrics.values["sglang:num_aborted_requests"]["m"] = 10
    metrics.values["sglang:num_transfer_failed_reqs"]["0"] = 140
    metrics.values["sglang:dsv4_index_k_integrity_mismatches"] = {"load": 2}
    rows = se.deltas(before, se.snapshot([url, dead]))
    assert rows[0]["aborted_requests"] == 7 and rows[0]["pd_transfer_failed"] == 70
    assert rows[0]["integrity_mismatches"] == 2 and rows[0]["hicache_backup_tokens"] is None
    assert "error" in rows[1] and "9/metrics" in rows[1]["error"]
    table = se.format_table(rows)
    assert "70" in table and "unavailable: http://127.0.0.1:9/metrics" in table


def _gauge_text(label_sets_and_values) -> str:
    """The extension's activation gauge as prometheus_client renders it (one sample per label set)."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

    registry = CollectorRegistry()
    Counter("sglang:num_requests", "SGLang's own family", registry=registry).inc(5)
    if label_sets_and_values:
        names = sorted(label_sets_and_values[0][0])
        gauge = Gauge(se.EXTENSION_GAUGE, "stand-in", labelnames=names, registry=registry)
        for labels, value in label_sets_and_values:
            gauge.labels(**labels).set(value)
    return generate_latest(registry).decode()


def test_the_activation_gauge_label_sets_per_server():
    labels = {"version": "0.9", "sglang": "0.5.23", "index_k_dtype": "bf16", "gate": "auto", "fp4_budget": "exact",
              "integrity": "sample"}  # fmt: skip
    tp1 = dict(labels, integrity="off")
    parsed = se.parse_metrics(_gauge_text([(labels, 1), (tp1, 1), (dict(labels, gate="off"), 0)]))
    assert parsed["extension"] == [labels, tp1]  # at 1 only, each label set once
    assert parsed["sglang_metrics"] is True
    assert se.parse_metrics(_gauge_text([(labels, 0)]))["extension"] == []  # exported, not active
    assert se.parse_metrics(_gauge_text([]))["extension"] is None  # not exported


def test_a_reply_that_is_not_prometheus_text_is_reported_not_raised(server):
    url, metrics = server
    metrics.text = lambda: "<html><body>router</body></html>"
    [entry] = se.snapshot([url])
    assert "not Prometheus text" in entry["error"] and entry["url"] == url


def test_integrity_counts_are_read_from_the_series_the_extension_exports_at_zero():
    """The tracker's own Prometheus text (series at 0, then counts with reasons) parsed as a server's /metrics."""
    from prometheus_client import generate_latest

    from sglang_dsv4_ext.runtime.index_k import integrity as ii

    ii.export_at_zero("load")
    counters = se.parse_counters(generate_latest().decode())
    for label in ("integrity_checked", "integrity_not_checked", "integrity_mismatches"):
        assert se.EVIDENCE_METRICS[label] in counters, label


@pytest.mark.parametrize(
    "checked, mismatches, cell",
    [
        (0.0, 0.0, se.NOT_CHECKED),  # integrity ran, nothing was checked: never "0 mismatches"
        (None, 0.0, "n/a"),  # the server does not say how many pages it checked: cannot tell
        (None, None, "n/a"),  # integrity not exported at all
        (1200.0, 0.0, "0"),  # 0 mismatches in 1200 checked pages
        (0.0, 3.0, "3"),  # a mismatch is evidence whatever was counted (PD digests count no pages)
    ],
)
def test_zero_mismatches_are_shown_only_beside_checked_pages(checked, mismatches, cell):
    row = {
        "url": "http://decode:30001",
        **dict.fromkeys(se.EVIDENCE_METRICS, 0.0),
        "integrity_checked": checked,
        "integrity_mismatches": mismatches,
    }
    assert se.shown(row)["integrity_mismatches"] == (
        None if cell == "n/a" else se.NOT_CHECKED if cell == se.NOT_CHECKED else row["integrity_mismatches"]
    )
    assert se.format_table([row]).splitlines()[1][-24:].strip() == cell
    assert row["integrity_mismatches"] == mismatches  # the summary's numbers stay as read


def test_the_report_page_says_not_checked_for_zero_checked_pages(tmp_path):
    from sglang_dsv4_ext.tools.report import cli

    evidence = [
        {
            "url": "http://prefill:30000",
            "integrity_checked": 0.0,
            "integrity_not_checked": 512.0,
            "integrity_mismatches": 0.0,
        },
        {"url": "http://old-summary:30000", "integrity_mismatches": 0.0},
    ]
    page = cli.run_section(str(tmp_path), {"label": "run", "server_evidence": evidence}, {})
    table = page[page.index("server evidence") :]
    head = re.findall(r"<th>(.*?)</th>", table)
    rows = [dict(zip(head, re.findall(r"<td>(.*?)</td>", tr))) for tr in re.findall(r"<tr><td>.*?</tr>", table)]
    assert [r["integrity_mismatches"] for r in rows] == [se.NOT_CHECKED, "n/a"]  # never a bare 0
    assert rows[0]["integrity_checked"] == "0.0000" and rows[0]["integrity_not_checked"] == "512.0000"
