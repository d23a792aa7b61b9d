"""What each server's schedulers say about sglang-dsv4-ext right now: their records in ``/server_info``.

SGLang's ``GET /server_info`` (``srt/entrypoints/http_server.py``; served with or without
``--enable-metrics``) returns ``internal_states``, one per DP rank, which the tokenizer manager asks
the schedulers for when the request arrives. With the extension loaded each carries the scheduler's
activation record (``runtime/hooks/evidence.py``: :func:`sglang_dsv4_ext.runtime.activation.evidence_record`); a stock
scheduler's has none. Unlike a log or a metrics file, nothing of an earlier launch can answer here.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from typing import cast

from sglang_dsv4_ext.runtime.record_names import EVIDENCE_RECORD_KEY as RECORD_KEY
from sglang_dsv4_ext.tools.repro import server_http, strict_json

_DEFAULT_PORTS = {"http": 80, "https": 443}
_LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")
# What a server says about itself at the top of /server_info (SGLang's server_args and version).
_TOP_LEVEL_KEYS = ("version", "tool_call_parser", "reasoning_parser")


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
    return {
        "records": records,
        "startup_time": body.get("startup_time"),
        **{k: body.get(k) for k in _TOP_LEVEL_KEYS if isinstance(body.get(k), str)},
    }


def read(url: str) -> dict[str, object]:
    """One server: ``{"url", "records", "startup_time"}`` or ``{"url", "error"}`` (never raises; the read is
    bounded as a whole, :mod:`.server_http`)."""
    try:
        return {"url": url, **parse(strict_json.loads(server_http.get_text(url, "/server_info")))}
    except server_http.ServerReadError as exc:
        return {"url": url, "error": str(exc)}
    except ValueError as exc:  # json.JSONDecodeError is a ValueError
        return {"url": url, "error": f"{url.rstrip('/')}/server_info: {exc}"}


# ----- one server, whatever its spelling ---------------------------------------------------------
def _host_key(host: str) -> str:
    """A host as one server is named: every loopback spelling is one host."""
    host = host.lower().rstrip(".")
    if host in _LOOPBACK_NAMES:
        return "loopback"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    mapped = getattr(address, "ipv4_mapped", None) or address
    return "loopback" if mapped.is_loopback else str(mapped)


def address_key(url: str) -> str:
    """``scheme://host:port/path`` of a URL with the spelling taken out (host case, loopback names,
    default port, trailing slash): two URLs with one key name one server."""
    parts = urllib.parse.urlsplit(url.strip())
    scheme = parts.scheme.lower()
    try:
        port = parts.port or _DEFAULT_PORTS.get(scheme)
    except ValueError:  # refused elsewhere (settings.url_check); here only the spelling matters
        port = None
    return f"{scheme}://{_host_key(parts.hostname or '')}:{port}{parts.path.rstrip('/')}"


def identities(records: list) -> set[str]:
    """``launch/process`` of every record that names both: one server's schedulers, whatever URL reached them."""
    return {
        f"{r['launch']}/{r['process']}"
        for r in records
        if isinstance(r, dict) and isinstance(r.get("launch"), str) and isinstance(r.get("process"), str)
    }


# ----- the workers behind an sglang-router -------------------------------------------------------
class UnreadableWorkersError(ValueError):
    """A router's worker list whose workers cannot be read here (no http:// URL: a gRPC worker)."""


def parse_workers(body: object) -> list[str]:
    """The worker URLs of sglang-router's ``GET /workers`` reply (``{"workers": [{"url": ...}, ...], "total"}``,
    SGLang's ``docs/advanced_features/sgl_model_gateway.md``, "List Workers"); ValueError for another shape,
    :class:`UnreadableWorkersError` for a list holding a worker without an http:// URL."""
    workers = body.get("workers") if isinstance(body, dict) else None
    if not isinstance(workers, list) or not workers:
        raise ValueError("no worker list in the reply (not sglang-router's GET /workers)")
    urls = [w.get("url") if isinstance(w, dict) else None for w in workers]
    if not all(isinstance(u, str) and u.startswith(("http://", "https://")) for u in urls):
        raise UnreadableWorkersError(f"workers {urls}: one without an http:// URL (a gRPC worker has no /server_info)")
    return cast(list[str], urls)


def router_workers(url: str) -> list[str] | None:
    """The workers a router at ``url`` lists, or None when ``url`` serves no worker list (a server itself);
    :class:`UnreadableWorkersError` when it lists workers that cannot be read from here."""
    try:
        return parse_workers(strict_json.loads(server_http.get_text(url, "/workers")))
    except UnreadableWorkersError:
        raise
    except (server_http.ServerReadError, ValueError):
        return None
