"""Detect a wedged server from SGLang's own ``/metrics``: requests in flight, no tokens produced.

Why: a PD decode server can wedge under load (a tensor-parallel collective desync in the overlap
event loop) while ``/health`` keeps answering; a supervisor that only polls health hangs with it.

How: SGLang (``--enable-metrics``) exports ``sglang:num_running_reqs`` (gauge) and
``sglang:generation_tokens_total`` (counter) (sglang/srt/observability/metrics_collector.py).
:class:`WedgeDetector` scrapes them with ``prometheus_client``'s own text parser; a server with
running requests whose token counter has not moved for ``stall_seconds`` is reported by name.
A /metrics that cannot be read (unreachable, not HTTP 200, past the read deadline, not Prometheus
text) is not a verdict: the problem is said once and the watch goes on (health checks and the
children's exit status own a server that is gone).

:class:`WedgeWatch` runs the detectors on a thread of its own, each read bounded as a whole
(:mod:`sglang_dsv4_ext.tools.tool_support.http_probe`), so a slow or dripping /metrics never delays the
supervisor's signal handling.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sglang_dsv4_ext.tools.tool_support import http_probe

RUNNING_REQS = "sglang:num_running_reqs"
GENERATED_TOKENS = "sglang:generation_tokens_total"
READ_DEADLINE = 2.0  # seconds for one whole /metrics read


class MetricsUnreadableError(Exception):
    """/metrics gave no answer that can be judged; the message says why."""


def scrape(url: str, deadline: float = READ_DEADLINE) -> dict[str, float]:
    """Sum of every sample of the two metrics (all label sets); :class:`MetricsUnreadableError` with the reason."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        reply = http_probe.get(url, deadline)
    except http_probe.ProbeError as exc:
        raise MetricsUnreadableError(f"no answer ({exc})") from None
    if reply.status != 200:
        raise MetricsUnreadableError(f"HTTP {reply.status} (was the server started with --enable-metrics?)")
    totals = {RUNNING_REQS: 0.0, GENERATED_TOKENS: 0.0}
    try:
        for family in text_string_to_metric_families(reply.body.decode(errors="replace")):
            for sample in family.samples:
                if sample.name in totals:
                    totals[sample.name] += sample.value
    except (ValueError, IndexError) as exc:  # what prometheus_client's parser raises on text it cannot read
        raise MetricsUnreadableError(f"not Prometheus text ({exc})") from None
    return totals


@dataclass
class WedgeDetector:
    name: str
    metrics_url: str  # e.g. http://127.0.0.1:30100/metrics
    stall_seconds: float = 120.0
    problem: str | None = field(default=None, init=False)  # why the last read gave no answer
    _tokens: float | None = field(default=None, init=False)
    _stalled_since: float | None = field(default=None, init=False)

    def observe(self, now: float | None = None) -> str | None:
        """Scrape once; return a message naming the server when it is wedged, else None."""
        try:
            totals = scrape(self.metrics_url)
        except MetricsUnreadableError as exc:
            self.problem = str(exc)
            return None
        self.problem = None
        now = time.monotonic() if now is None else now
        running, tokens = totals[RUNNING_REQS], totals[GENERATED_TOKENS]
        if running <= 0 or tokens != self._tokens:
            self._tokens, self._stalled_since = tokens, None
            return None
        if self._stalled_since is None:
            self._stalled_since = now
        stalled = now - self._stalled_since
        if stalled < self.stall_seconds:
            return None
        return (
            f"{self.name} looks wedged: {running:g} request(s) running and {GENERATED_TOKENS} stuck at "
            f"{tokens:g} for {stalled:.0f} s ({self.metrics_url}); for PD decode servers see "
            f"--disable-overlap-schedule"
        )


class WedgeWatch:
    """The detectors, scraped every ``interval`` seconds on a daemon thread; :attr:`verdict` is the first
    wedge found (the watch stops there). ``say`` gets one line when a server's /metrics becomes
    unreadable, and one when it is readable again."""

    def __init__(self, detectors: list[WedgeDetector], interval: float, say: Callable[[str], None]):
        self.detectors, self.interval, self.say = detectors, interval, say
        self.verdict: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="serve-wedge-watch", daemon=True)

    def start(self) -> WedgeWatch:
        if self.detectors:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=READ_DEADLINE + 1)

    def _run(self) -> None:
        while not self._stop.is_set():
            for detector in self.detectors:
                if self._stop.is_set():
                    return
                said = detector.problem
                message = detector.observe()
                self._report(detector, said)
                if message:
                    self.verdict = message
                    return
            self._stop.wait(self.interval)

    def _report(self, detector: WedgeDetector, said: str | None) -> None:
        if detector.problem and not said:
            self.say(
                f"{detector.name}: cannot read {detector.metrics_url}: {detector.problem}; the wedge watch goes on"
            )
        elif said and not detector.problem:
            self.say(f"{detector.name}: {detector.metrics_url} readable again")


def detectors_for(servers, stall_seconds: float | None):
    """One detector per local server with an HTTP port (its /metrics next to /health); none when off."""
    if not stall_seconds:
        return []
    return [
        WedgeDetector(c.name, c.health_url.rsplit("/health", 1)[0] + "/metrics", stall_seconds)
        for c in servers
        if c.health_url
    ]
