"""Wedge detection against a real loopback HTTP server exposing Prometheus text.

The text is produced by ``prometheus_client`` (SGLang's own metrics library) with SGLang's metric
names and a label set like SGLang's; the detector scrapes it over HTTP as it would a server.
"""

from __future__ import annotations

import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from sglang_dsv4_ext.tools.serving.wedge import (
    GENERATED_TOKENS,
    RUNNING_REQS,
    MetricsUnreadableError,
    WedgeDetector,
    WedgeWatch,
    scrape,
)


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


class _Canned(BaseHTTPRequestHandler):
    """One fixed answer per path: /html (200, not Prometheus text), /missing (404), /drip (a 40-byte body at
    one byte every half second: 20 s, each recv well within any per-recv timeout)."""

    def do_GET(self):  # noqa: N802 (http.server API)
        if self.path == "/drip":
            self.send_response(200)
            self.send_header("Content-Length", "40")
            self.end_headers()
            try:
                for _ in range(40):
                    self.wfile.write(b"#")
                    self.wfile.flush()
                    time.sleep(0.5)
            except (BrokenPipeError, ConnectionResetError):  # the reader gave up: what the drip is for
                pass
            return
        body = b"<html>not here</html>\n"
        self.send_response(200 if self.path == "/html" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def canned():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Canned)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    "path, reason",
    [
        ("/html", "not Prometheus text"),
        ("/missing", "HTTP 404 (was the server started with --enable-metrics?)"),
        pytest.param(  # a deadline for the whole read, not per recv; waits it out
            "/drip", "no answer (no complete answer within 2 s)", marks=pytest.mark.slow
        ),
    ],
)
def test_an_unreadable_metrics_endpoint_is_no_verdict_and_says_why(canned, path, reason):
    with pytest.raises(MetricsUnreadableError, match=re.escape(reason)):
        scrape(canned + path)
    detector = WedgeDetector("decode-0", canned + path, stall_seconds=0)
    assert detector.observe(now=0) is None and reason in detector.problem


def test_the_watch_says_an_unreadable_server_once_and_goes_on_to_find_a_wedge(canned, served):
    """decode-0 serves HTML; decode-1 is wedged: the watch names decode-1, having said decode-0's problem once."""
    metrics, url = served
    metrics.running.labels(**metrics.labels).set(4)
    said = []
    watch = WedgeWatch(
        [
            WedgeDetector("decode-0", canned + "/html", stall_seconds=0.5),
            WedgeDetector("decode-1", url, stall_seconds=0.5),
        ],
        interval=0.05,
        say=said.append,
    ).start()
    try:
        for _ in range(200):
            if watch.verdict:
                break
            time.sleep(0.05)
    finally:
        watch.stop()
    assert watch.verdict and watch.verdict.startswith("decode-1 looks wedged: 4 request(s) running"), said
    assert [line for line in said if "decode-0" in line] == [
        f"decode-0: cannot read {canned}/html: not Prometheus text "
        f"({said[0].split('not Prometheus text (', 1)[1].split(')', 1)[0]}); the wedge watch goes on"
    ]
