"""What each server's schedulers say about sglang-dsv4-ext right now: their records in ``/server_info``.

SGLang's ``GET /server_info`` (``srt/entrypoints/http_server.py``; served with or without
``--enable-metrics``) returns ``internal_states``, one per DP rank, which the tokenizer manager asks
the schedulers for when the request arrives. With the extension loaded each carries the scheduler's
activation record (``hooks/evidence.py``: :func:`sglang_dsv4_ext.activation.evidence_record`); a stock
scheduler's has none. Unlike a log or a metrics file, nothing of an earlier launch can answer here.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Dict

from sglang_dsv4_ext.hooks.evidence import RECORD_KEY

# Like the harness's own HTTP client (aiohttp, trust_env off): no proxy from the environment.
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def parse(body: object) -> Dict[str, object]:
    """``{"records": [record or None per DP rank], "startup_time"}`` of a ``/server_info`` reply.

    Raises ``ValueError`` for a reply without a list of ``internal_states`` (not SGLang's server, e.g. a router).
    """
    states = body.get("internal_states") if isinstance(body, dict) else None
    if not isinstance(states, list) or not states:
        raise ValueError("no internal_states in the reply (not an SGLang server? a router has none)")
    records = [s.get(RECORD_KEY) if isinstance(s, dict) and isinstance(s.get(RECORD_KEY), dict) else None
               for s in states]
    return {"records": records, "startup_time": body.get("startup_time")}


def read(url: str, timeout: float = 10.0) -> Dict[str, object]:
    """One server: ``{"url", "records", "startup_time"}`` or ``{"url", "error"}`` (never raises)."""
    endpoint = url.rstrip("/") + "/server_info"
    try:
        with _NO_PROXY.open(endpoint, timeout=timeout) as resp:
            return {"url": url, **parse(json.loads(resp.read().decode("utf-8", "replace")))}
    except (urllib.error.URLError, OSError, ValueError) as exc:  # json.JSONDecodeError is a ValueError
        return {"url": url, "error": f"{endpoint}: {exc}"}
