"""One HTTP GET whose whole exchange (connect, request, headers, body) ends by a deadline.

Why: a socket timeout bounds each ``recv``, not the request: a server that drips one byte a second
answers every ``recv`` in time and holds a plain ``urlopen(url, timeout=2).read()`` for as long as it
likes. The supervisor's health checks and wedge watch must return in bounded time whatever a server
does, so here every ``recv`` is given only the time left until one deadline, and the body is capped.

Proxies are never used (loopback and cluster-local addresses).
"""

from __future__ import annotations

import http.client
import io
import socket
import time
import urllib.parse
from dataclasses import dataclass
from typing import Optional

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


class _Connection(http.client.HTTPConnection):
    def __init__(self, host: str, port: int, deadline: _Deadline):
        super().__init__(host, port, timeout=deadline.left())
        self._deadline = deadline

    raw: Optional[socket.socket] = None

    def connect(self) -> None:
        self.raw = socket.create_connection((self.host, self.port), timeout=self._deadline.left())
        self.sock = _DeadlineSocket(self.raw, self._deadline)


def get(url: str, deadline: float = 2.0, max_body: int = MAX_BODY) -> Reply:
    """GET ``url`` (``http://host:port/path``); :class:`ProbeError` with the reason when it does not
    complete within ``deadline`` seconds or its body exceeds ``max_body`` bytes."""
    parts = urllib.parse.urlsplit(url)
    limit = _Deadline(deadline)
    conn = None
    try:
        conn = _Connection(parts.hostname or "", parts.port or 80, limit)
        conn.request("GET", parts.path or "/", headers={"Connection": "close"})
        resp = conn.getresponse()
        body = resp.read(max_body + 1)
    except TimeoutError:  # the deadline, or a recv that waited for the rest of it
        raise ProbeError(f"no complete answer within {deadline:g} s") from None
    except (OSError, http.client.HTTPException, ValueError) as exc:  # ValueError: a bad port in the URL
        raise ProbeError(str(exc) or type(exc).__name__) from None
    finally:
        if conn is not None and conn.raw is not None:
            conn.raw.close()
    if len(body) > max_body:
        raise ProbeError(f"answer larger than {max_body} bytes")
    return Reply(resp.status, body)
