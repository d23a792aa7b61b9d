"""The bounded GET (sglang_dsv4_ext/tools/tool_support/http_probe.py) over ``https://``: repro reads a server's
``/metrics`` and ``/server_info`` through it, and ``--server-metrics`` / ``--endpoint`` accept https URLs.

A real TLS server on 127.0.0.1 with a certificate made here (``cryptography``); the probe's certificate
checks are pointed at that certificate, nothing else is replaced. A TCP relay in front of it that drips the
server's bytes shows that the handshake, not only the body, ends by the one deadline.
"""

from __future__ import annotations

import datetime
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sglang_dsv4_ext.tools.tool_support import http_probe


def _certificate(tmp_path):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


class _Metrics(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server API)
        body = b"sglang:num_aborted_requests_total 3.0\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def tls_server(tmp_path, monkeypatch):
    """(port of an https server for ``localhost``, whose certificate the probe is told to trust)."""
    cert, key = _certificate(tmp_path)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    server.daemon_threads = True
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(http_probe, "tls_context", lambda: ssl.create_default_context(cafile=str(cert)))
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_an_https_read_goes_through_tls_and_checks_the_certificate(tls_server, monkeypatch):
    reply = http_probe.get(f"https://localhost:{tls_server}/metrics", deadline=10)
    assert reply.status == 200 and reply.body == b"sglang:num_aborted_requests_total 3.0\n"
    monkeypatch.setattr(http_probe, "tls_context", ssl.create_default_context)  # the system's CAs: not this one
    with pytest.raises(http_probe.ProbeError, match="CERTIFICATE_VERIFY_FAILED"):
        http_probe.get(f"https://localhost:{tls_server}/metrics", deadline=10)


def test_https_to_a_plain_http_server_is_an_error_not_a_traceback():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(http_probe.ProbeError):
            http_probe.get(f"https://localhost:{server.server_address[1]}/metrics", deadline=10)
    finally:
        server.shutdown()
        server.server_close()


def _drip_relay(target_port: int, stop: threading.Event, byte_every: float = 0.2, limit_s: float = 8.0) -> int:
    """A TCP relay to ``target_port``: the client's bytes go through at once, the server's one every
    ``byte_every`` seconds (each recv of a reader is answered in time); it gives up after ``limit_s``."""
    listener = socket.create_server(("127.0.0.1", 0))

    def pump(src, dst, drip):
        end = time.monotonic() + limit_s
        src.settimeout(0.1)  # so that the limit is checked while nothing comes
        try:
            while time.monotonic() < end and not stop.is_set():
                try:
                    data = src.recv(1 if drip else 65536)
                except TimeoutError:
                    continue
                if not data:
                    return
                dst.sendall(data)
                if drip:
                    time.sleep(byte_every)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                s.close()

    def serve():
        client, _ = listener.accept()
        upstream = socket.create_connection(("127.0.0.1", target_port))
        threading.Thread(target=pump, args=(client, upstream, False), daemon=True).start()
        pump(upstream, client, True)

    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1]


def test_a_dripping_tls_handshake_ends_by_the_deadline(tls_server):
    """The server's handshake flight (its certificate) one byte at a time: each recv is answered in time, so a
    per-recv timeout would hold the read for as long as the server likes."""
    stop = threading.Event()
    port = _drip_relay(tls_server, stop)
    try:
        with pytest.raises(http_probe.ProbeError, match="no complete answer within 1 s"):
            http_probe.get(f"https://localhost:{port}/metrics", deadline=1)
    finally:
        stop.set()
