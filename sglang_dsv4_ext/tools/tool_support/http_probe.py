"""One HTTP GET whose whole exchange (connect, request, headers, body) ends by a deadline.

Why: a socket timeout bounds each ``recv``, not the request: a server that drips one byte a second
answers every ``recv`` in time and holds a plain ``urlopen(url, timeout=2).read()`` for as long as it
likes. serve's health checks and wedge watch, and repro's reads of each server's ``/metrics`` and
``/server_info`` before and after a run, must return in bounded time whatever a server does, so here
every ``recv`` (and, for ``https://``, the TLS handshake as a whole) is given only the time left
until one deadline, and the body is capped. Every way the exchange can fail (refused, reset, a bad
status line, an over-long header line, a body cut short, past the deadline, too large) is one
:class:`ProbeError` with the reason.

Proxies are never used (loopback and cluster-local addresses). Shared by ``serve`` and ``repro``.
"""

from __future__ import annotations

import http.client
import io
import socket
import ssl
import time
import urllib.parse
from dataclasses import dataclass

MAX_BODY = 16 << 20  # SGLang's /metrics is a few hundred KiB; anything near this is not metrics


class ProbeError(Exception):
    """The GET did not complete: refused, reset, past the deadline, too large, or not HTTP."""


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes


class _Deadline:
    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        left = self.end - time.monotonic()
        if left <= 0:
            raise TimeoutError()
        return left


class _DeadlineReader(io.RawIOBase):
    """The socket's byte stream, each ``recv`` limited to the time left."""

    def __init__(self, sock: socket.socket, deadline: _Deadline):
        self._sock, self._deadline = sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        self._sock.settimeout(self._deadline.left())
        return self._sock.recv_into(buffer)


class _DeadlineSocket:
    """What :class:`http.client.HTTPConnection` uses of its socket, under one deadline."""

    def __init__(self, sock: socket.socket, deadline: _Deadline):
        self._sock, self._deadline = sock, deadline

    def sendall(self, data) -> None:
        self._sock.settimeout(self._deadline.left())
        self._sock.sendall(data)

    def makefile(self, mode: str = "rb", buffering: int = -1):
        return io.BufferedReader(_DeadlineReader(self._sock, self._deadline))

    def close(self) -> None:
        """Nothing: http.client hands the connection to the response (``Connection: close``) and closes it
        before the body is read; :func:`get` closes the socket when it is done."""


def tls_context() -> ssl.SSLContext:
    """The certificate checks of an ``https://`` read (the system's CAs, host name checked)."""
    return ssl.create_default_context()


class _Connection(http.client.HTTPConnection):
    def __init__(self, host: str, port: int, deadline: _Deadline, tls: bool = False):
        super().__init__(host, port, timeout=deadline.left())
        self._deadline, self._tls = deadline, tls

    raw: socket.socket | None = None

    def connect(self) -> None:
        self.raw = socket.create_connection((self.host, self.port), timeout=self._deadline.left())
        if self._tls:
            # The handshake as a whole (not each record) is bounded by the socket's timeout (CPython's _ssl).
            self.raw.settimeout(self._deadline.left())
            self.raw = tls_context().wrap_socket(self.raw, server_hostname=self.host)
        self.sock = _DeadlineSocket(self.raw, self._deadline)


def get(url: str, deadline: float = 2.0, max_body: int = MAX_BODY) -> Reply:
    """GET ``url`` (``http://`` or ``https://host:port/path``); :class:`ProbeError` with the reason when it
    does not complete within ``deadline`` seconds or its body exceeds ``max_body`` bytes."""
    parts = urllib.parse.urlsplit(url)
    tls = parts.scheme == "https"
    limit = _Deadline(deadline)
    conn = None
    try:
        conn = _Connection(parts.hostname or "", parts.port or (443 if tls else 80), limit, tls)
        conn.request("GET", parts.path or "/", headers={"Connection": "close"})
        resp = conn.getresponse()
        body = resp.read(max_body + 1)
        missing = resp.length  # of a declared Content-Length: read(n) returns a short body without an error
    except TimeoutError:  # the deadline, or a recv that waited for the rest of it
        raise ProbeError(f"no complete answer within {deadline:g} s") from None
    except (OSError, http.client.HTTPException, ValueError) as exc:  # ssl.SSLError is an OSError; ValueError:
        raise ProbeError(_reason(exc)) from None  # a bad port in the URL
    finally:
        if conn is not None and conn.raw is not None:
            conn.raw.close()
    if len(body) > max_body:
        raise ProbeError(f"answer larger than {max_body} bytes")
    if missing:
        raise ProbeError(_cut_short(len(body), missing))
    return Reply(resp.status, body)


def _cut_short(read: int, missing: int | None) -> str:
    more = f", {missing} more expected" if missing else ""  # a chunked body does not say how much is missing
    return f"the body was cut short ({read} bytes read{more})"


def _reason(exc: Exception) -> str:
    """What went wrong, in words: http.client's exceptions say little on their own (``IncompleteRead(10 bytes
    read, 90 more expected)``, ``BadStatusLine`` with the line only)."""
    if isinstance(exc, http.client.IncompleteRead):
        return _cut_short(len(exc.partial), exc.expected)
    if isinstance(exc, http.client.LineTooLong):
        return f"not HTTP: {exc}"
    if isinstance(exc, http.client.BadStatusLine):
        return f"not HTTP: bad status line {str(exc)[:80]!r}"
    return str(exc) or type(exc).__name__
