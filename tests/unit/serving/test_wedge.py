"""Wedge detection against a real loopback HTTP server exposing Prometheus text.

The text is produced by ``prometheus_client`` (SGLang's own metrics library) with SGLang's metric
names and a label set like SGLang's; the detector scrapes it over HTTP as it would a server.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from sglang_dsv4_ext.serving.wedge import GENERATED_TOKENS, RUNNING_REQS, WedgeDetector


class _Metrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine_type"]
        self.running = Gauge(RUNNING_REQS, "running", labels, registry=self.registry)
        self.tokens = Counter(GENERATED_TOKENS.removesuffix("_total"), "tokens", labels, registry=self.registry)
        self.labels = dict(model_name="dsv4", engine_type="unified")


@pytest.fixture
def served():
    metrics = _Metrics()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server API)
            body = generate_latest(metrics.registry)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield metrics, f"http://127.0.0.1:{server.server_address[1]}/metrics"
    server.shutdown()
    server.server_close()


def test_running_requests_without_progress_are_reported_by_name(served):
    metrics, url = served
    detector = WedgeDetector("decode-0", url, stall_seconds=30)
    metrics.running.labels(**metrics.labels).set(4)
    metrics.tokens.labels(**metrics.labels).inc(100)
    assert detector.observe(now=0) is None  # first look
    assert detector.observe(now=10) is None  # stalled 0 s
    assert detector.observe(now=35) is None  # stalled 25 s
    message = detector.observe(now=41)
    assert message and message.startswith("decode-0 looks wedged: 4 request(s) running") and "31 s" in message


def test_progress_or_idle_is_not_a_wedge(served):
    metrics, url = served
    detector = WedgeDetector("decode-0", url, stall_seconds=30)
    metrics.running.labels(**metrics.labels).set(2)
    for t in range(0, 200, 20):
        metrics.tokens.labels(**metrics.labels).inc(5)
        assert detector.observe(now=t) is None
    metrics.running.labels(**metrics.labels).set(0)  # idle: no tokens is fine
    assert all(detector.observe(now=t) is None for t in range(200, 400, 50))


def test_unreachable_endpoint_is_no_verdict():
    assert WedgeDetector("decode-0", "http://127.0.0.1:9/metrics", stall_seconds=0).observe(now=0) is None
