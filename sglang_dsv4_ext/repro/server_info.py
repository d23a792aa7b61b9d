"""What each server's schedulers say about sglang-dsv4-ext right now: their records in ``/server_info``.

SGLang's ``GET /server_info`` (``srt/entrypoints/http_server.py``; served with or without
``--enable-metrics``) returns ``internal_states``, one per DP rank, which the tokenizer manager asks
the schedulers for when the request arrives. With the extension loaded each carries the scheduler's
activation record (``hooks/evidence.py``: :func:`sglang_dsv4_ext.plugin.activation.evidence_record`); a stock
scheduler's has none. Unlike a log or a metrics file, nothing of an earlier launch can answer here.
"""

from __future__ import annotations

from sglang_dsv4_ext.plugin.activation import EVIDENCE_RECORD_KEY as RECORD_KEY
from sglang_dsv4_ext.repro import server_http, strict_json


def parse(body: object) -> dict[str, object]:
    """``{"records": [record or None per DP rank], "startup_time"}`` of a ``/server_info`` reply.

    Raises ``ValueError`` for a reply without a list of ``internal_states`` (not SGLang's server, e.g. a router).
    """
    states = body.get("internal_states") if isinstance(body, dict) else None
    if not isinstance(body, dict) or not isinstance(states, list) or not states:
        raise ValueError("no internal_states in the reply (not an SGLang server? a router has none)")
    records = [
        s.get(RECORD_KEY) if isinstance(s, dict) and isinstance(s.get(RECORD_KEY), dict) else None for s in states
    ]
    return {"records": records, "startup_time": body.get("startup_time")}


def read(url: str) -> dict[str, object]:
    """One server: ``{"url", "records", "startup_time"}`` or ``{"url", "error"}`` (never raises; the read is
    bounded as a whole, :mod:`.server_http`)."""
    try:
        return {"url": url, **parse(strict_json.loads(server_http.get_text(url, "/server_info")))}
    except server_http.ServerReadError as exc:
        return {"url": url, "error": str(exc)}
    except ValueError as exc:  # json.JSONDecodeError is a ValueError
        return {"url": url, "error": f"{url.rstrip('/')}/server_info: {exc}"}
