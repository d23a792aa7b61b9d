"""The URL arguments of every command: which are accepted, and how they are shown once accepted.

Why one module: ``repro run``'s ``--endpoint``, ``--detokenize-url`` and ``--server-metrics``, ``repro ab``'s
``--endpoint-a``/``-b`` and ``repro reparse``'s ``--detokenize-url`` take the same kind of URL, and all of
them end up in files and on screens. A scheme is case-insensitive (RFC 3986, section 3.1: ``HTTP://`` is
``http://``), so the check reads it as :func:`urllib.parse.urlsplit` does, lower-cased. A URL may carry a
user and password (``http://user:pass@host``: aiohttp sends them as Basic auth); they are the operator's
secret, so every text a tool writes or shows (``summary.json``, the records, the re-run line, the report
page, its messages) goes through :func:`redact` first.
"""

from __future__ import annotations

import re
import urllib.parse

SCHEMES = ("http", "https")
_PREFIXES = tuple(f"{scheme}://" for scheme in SCHEMES)
PORTS = (1, 65535)
REDACTED = "***"

# The user-information part of an http(s) URL inside any text: from the scheme to the last "@" before the
# host's end (a "/", "?", "#", white space, a quote or an angle bracket ends a URL in JSON, a shell line or HTML).
_USERINFO = re.compile(r"(?i)\b(https?://)[^/?#\s\"'<>]*@")


def check_http_url(url) -> None:
    """Refuse a URL the HTTP client would fail on for every request (no http/https scheme, no host, a port out
    of range); ``ValueError`` saying which and what is allowed."""
    if not isinstance(url, str) or not url.lower().startswith(_PREFIXES) or not url.split("://", 1)[1]:
        raise ValueError(f"must be an http:// or https:// URL, got {redact(str(url))!r}")
    parts, shown = urllib.parse.urlsplit(url), redact(url)
    try:
        port = parts.port
    except ValueError:  # not a number, or past 65535
        port = -1
    if port is not None and not PORTS[0] <= port <= PORTS[1]:
        raise ValueError(
            f"{shown!r}: the port must be a number in {PORTS[0]}..{PORTS[1]}, got {parts.netloc.rsplit(':', 1)[-1]!r}"
        )
    if not parts.hostname:
        raise ValueError(f"{shown!r}: no host (expected http://HOST[:PORT], e.g. http://127.0.0.1:8000)")


def has_credentials(url: str) -> bool:
    """Whether ``url`` carries a user (and maybe a password) before its host."""
    return "@" in urllib.parse.urlsplit(url).netloc


def redact(text: str) -> str:
    """``text`` with the user and password of every http(s) URL in it replaced by ``***``."""
    return _USERINFO.sub(rf"\g<1>{REDACTED}@", text)
