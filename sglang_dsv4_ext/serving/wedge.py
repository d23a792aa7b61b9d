"""Detect a wedged server from SGLang's own ``/metrics``: requests in flight, no tokens produced.

Why: a PD decode server can wedge under load (a tensor-parallel collective desync in the overlap
event loop) while ``/health`` keeps answering; a supervisor that only polls health hangs with it.

How: SGLang (``--enable-metrics``) exports ``sglang:num_running_reqs`` (gauge) and
``sglang:generation_tokens_total`` (counter) (sglang/srt/observability/metrics_collector.py).
:class:`WedgeDetector` scrapes them with ``prometheus_client``'s own text parser; a server with
running requests whose token counter has not moved for ``stall_seconds`` is reported by name.
An unreachable endpoint is not a verdict (health checks own that).
"""

from __future__ import annotations

import time
import urllib.request
from dataclasses import dataclass, field
from typing import Dict, Optional

RUNNING_REQS = "sglang:num_running_reqs"
GENERATED_TOKENS = "sglang:generation_tokens_total"
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def scrape(url: str, timeout: float = 2.0) -> Optional[Dict[str, float]]:
    """Sum of every sample of the two metrics (all label sets), or None if the endpoint does not answer."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with _NO_PROXY.open(url, timeout=timeout) as resp:
            text = resp.read().decode(errors="replace")
    except Exception:
        return None
    totals = {RUNNING_REQS: 0.0, GENERATED_TOKENS: 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in totals:
                totals[sample.name] += sample.value
    return totals


@dataclass
class WedgeDetector:
    name: str
    metrics_url: str  # e.g. http://127.0.0.1:30100/metrics
    stall_seconds: float = 120.0
    _tokens: Optional[float] = field(default=None, init=False)
    _stalled_since: Optional[float] = field(default=None, init=False)

    def observe(self, now: Optional[float] = None) -> Optional[str]:
        """Scrape once; return a message naming the server when it is wedged, else None."""
        now = time.monotonic() if now is None else now
        totals = scrape(self.metrics_url)
        if totals is None:
            return None
        running, tokens = totals[RUNNING_REQS], totals[GENERATED_TOKENS]
        if running <= 0 or tokens != self._tokens:
            self._tokens, self._stalled_since = tokens, None
            return None
        if self._stalled_since is None:
            self._stalled_since = now
        stalled = now - self._stalled_since
        if stalled < self.stall_seconds:
            return None
        return (f"{self.name} looks wedged: {running:g} request(s) running and {GENERATED_TOKENS} stuck at "
                f"{tokens:g} for {stalled:.0f} s ({self.metrics_url}); for PD decode servers see "
                f"--disable-overlap-schedule")


def detectors_for(servers, stall_seconds: Optional[float]):
    """One detector per local server with an HTTP port (its /metrics next to /health); none when off."""
    if not stall_seconds:
        return []
    return [WedgeDetector(c.name, c.health_url.rsplit("/health", 1)[0] + "/metrics", stall_seconds)
            for c in servers if c.health_url]
