"""One read of a server's ``/metrics`` or ``/server_info`` for a repro run: bounded as a whole, never raising.

Why: these reads come before the first request (the "before" of the evidence, the extension check) and
after the last (the "after"). A server that drips its answer, cuts its body short, or answers with
something that is not HTTP must neither hold a run before it starts or after it finished, nor end it
with a traceback and no summary: each read ends within :data:`READ_DEADLINE_S` seconds, through the
bounded GET serve uses too (:mod:`sglang_dsv4_ext.tools.tool_support.http_probe`), and any failure is a reason in words.
"""

from __future__ import annotations

from sglang_dsv4_ext.tools.tool_support import http_probe

READ_DEADLINE_S = 10.0  # one whole read (connect, headers, body); SGLang answers both in milliseconds


class ServerReadError(Exception):
    """The read did not give an HTTP 200 answer in time; the message says ``URL: why``."""


def get_text(url: str, path: str) -> str:
    """The body of ``GET url + path`` as text; :class:`ServerReadError` naming the endpoint and the reason."""
    endpoint = url.rstrip("/") + path
    try:
        reply = http_probe.get(endpoint, READ_DEADLINE_S)
    except http_probe.ProbeError as exc:
        raise ServerReadError(f"{endpoint}: {exc}") from None
    if reply.status != 200:
        raise ServerReadError(f"{endpoint}: HTTP {reply.status}")
    return reply.body.decode("utf-8", "replace")
