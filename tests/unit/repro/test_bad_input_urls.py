"""The URL arguments of `repro run`, `ab` and `reparse`, through the real CLI against the loopback stand-in server
(tests/support/repro_server.py) and the real aiohttp client: a scheme in capitals is a scheme, credentials in a URL
are never written or shown, and a redirected request is not followed to a server nobody checked.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sglang_dsv4_ext.tools.repro import settings
from sglang_dsv4_ext.tools.tool_support import urls
from tests.support.repro_cli import TINY, assert_refused, make_run, run_cli
from tests.support.repro_server import InjectingServer

SECRET = "s3cret-Pa55"


def _summary(run_dir) -> dict:
    with open(os.path.join(run_dir, "summary.json")) as f:
        return json.load(f)


def _records(run_dir) -> list[dict]:
    with open(os.path.join(run_dir, "requests.jsonl")) as f:
        return [json.loads(line) for line in f]


def _every_file_text(directory) -> str:
    texts = []
    for root, _, files in os.walk(directory):
        for name in files:
            with open(os.path.join(root, name), encoding="utf-8") as f:
                texts.append(f.read())
    return "\n".join(texts)


def _upper_scheme(url: str) -> str:
    scheme, rest = url.split("://", 1)
    return f"{scheme.upper()}://{rest}"


# ----- a scheme in capitals ----------------------------------------------------------------------
@pytest.mark.parametrize("url", ["HTTP://127.0.0.1:8000", "Https://10.0.0.1:30000/v1", "hTtP://h"])
def test_a_scheme_is_case_insensitive(url):
    settings.url_check(url)  # RFC 3986 3.1; used to say "must be an http:// or https:// URL"


@pytest.mark.parametrize("url", ["ftp://127.0.0.1:8000", "HTTP:/127.0.0.1", "HTTP://", "127.0.0.1:8000"])
def test_other_schemes_stay_refused(url):
    with pytest.raises(ValueError, match="must be an http:// or https:// URL"):
        settings.url_check(url)


def test_run_and_reparse_take_every_url_with_its_scheme_in_capitals(tmp_path, capsys):
    out = str(tmp_path / "run")
    with InjectingServer({"malformed_dsml": 0.5}, seed=1) as srv:
        loud = _upper_scheme(srv.url)
        flags = ["--server-metrics", loud, "--detokenize-url", loud]
        rc, _, err = run_cli(["repro", "run", "--endpoint", loud, "--out", out, *TINY, *flags], capsys)
        assert rc == 0, err
        rc, _, err = run_cli(["repro", "reparse", out, "--detokenize-url", loud], capsys)
        assert rc == 0, err
    assert srv.requests == 8 and all(r["verdict"] != "http_error" for r in _records(out))
    assert _summary(out)["server_evidence"][0]["extension"].startswith("active")


def test_ab_takes_endpoints_with_their_scheme_in_capitals(tmp_path, capsys):
    with InjectingServer({}, seed=1) as a, InjectingServer({}, seed=1) as b:
        argv = ["repro", "ab", "--endpoint-a", _upper_scheme(a.url), "--endpoint-b", _upper_scheme(b.url)]
        rc, _, err = run_cli([*argv, "--out", str(tmp_path / "ab"), *TINY], capsys)
    assert rc == 0, err
    assert a.requests == b.requests == 8


# ----- credentials in a URL --------------------------------------------------------------------
def _with_credentials(url: str) -> str:
    scheme, rest = url.split("://", 1)
    return f"{scheme}://operator:{SECRET}@{rest}"


@pytest.mark.parametrize("text, shown", [
    ("http://u:p@h:1", "http://***@h:1"),
    ("HTTPS://token@h/v1", "HTTPS://***@h/v1"),  # a user alone (a token) is a secret too
    ("http://a:b@c@h:1/x", "http://***@h:1/x"),  # urlsplit's host is after the last @
    ('{"u": "http://u:p@h:1", "v": "x@y"}', '{"u": "http://***@h:1", "v": "x@y"}'),
    ("http://u:p@a:1,http://u:p@b:2", "http://***@a:1,http://***@b:2"),  # --server-metrics' list
    ("http://h:1/path@x and me@example.org", "http://h:1/path@x and me@example.org"),  # no user before the host
])  # fmt: skip
def test_redact_hides_the_user_information_of_every_url_and_nothing_else(text, shown):
    assert urls.redact(text) == shown


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_credentials_in_the_endpoint_are_written_and_shown_nowhere(tmp_path, capsys):
    """The failing /detokenize URL puts a URL into the records and reparsed.jsonl too (their raw_source says why)."""
    out, page = str(tmp_path / "run"), str(tmp_path / "page.html")
    refusing = _with_credentials(f"http://127.0.0.1:{_closed_port()}")
    with InjectingServer({"malformed_dsml": 0.5}, seed=1) as srv:
        secret_url = _with_credentials(srv.url)
        flags = ["--server-metrics", secret_url, "--detokenize-url", refusing]
        rc, stdout, err = run_cli(["repro", "run", "--endpoint", secret_url, "--out", out, *TINY, *flags], capsys)
        assert rc == 0, err
        rc, stdout2, err2 = run_cli(["repro", "reparse", out, "--detokenize-url", refusing], capsys)
        assert rc == 0, err2
    rc, stdout3, err3 = run_cli(["report", out, "-o", page], capsys)
    assert rc == 0, err3
    assert srv.requests == 8  # the URL with its credentials was used
    shown = "\n".join([stdout, err, stdout2, err2, stdout3, err3, _every_file_text(tmp_path)])
    assert SECRET not in shown and "operator:" not in shown
    redacted = "http://***@" + srv.url.split("://", 1)[1]
    summary = _summary(out)
    assert summary["endpoint"] == redacted and summary["config"]["server_metrics"] == [redacted]
    assert f"--endpoint {redacted}" in summary["rerun_command"]
    assert f"re-run: sglang-dsv4 repro run --endpoint {redacted}" in stdout
    failed = [r for r in _records(out) if r["verdict"] != "ok"]
    assert failed and all("unavailable: http://***@127.0.0.1:" in r["reference"]["raw_source"] for r in failed)
    with open(os.path.join(out, "reparsed.jsonl")) as f:
        assert "decode failed: unavailable: http://***@127.0.0.1:" in f.read()


def test_a_refused_server_is_named_without_its_credentials(tmp_path, capsys):
    with InjectingServer({}, extension=[]) as srv:  # a stock server: refused by --expect-extension on
        argv = ["repro", "run", "--endpoint", _with_credentials(srv.url), "--out", str(tmp_path / "run"), *TINY]
        rc, _, err = run_cli(argv, capsys)
    assert_refused(rc, err, "http://***@" + srv.url.split("://", 1)[1], "no sglang-dsv4-ext record")
    assert SECRET not in err


def test_a_summary_written_with_credentials_is_shown_without_them(tmp_path, capsys):
    """A run directory written before URLs were redacted: the report page must not show them either."""
    out = make_run(str(tmp_path / "run"), capsys)
    path = os.path.join(out, "summary.json")
    summary = _summary(out)
    summary["server_evidence"][0]["url"] = _with_credentials(summary["server_evidence"][0]["url"])
    with open(path, "w") as f:
        json.dump(summary, f)
    page = tmp_path / "page.html"
    rc, _, err = run_cli(["report", out, "-o", str(page)], capsys)
    assert rc == 0, err
    text = page.read_text()
    assert SECRET not in text and "http://***@127.0.0.1:" in text


@pytest.mark.parametrize("argv, flag", [
    (["repro", "run", "--endpoint", "http://operator:SECRET@127.0.0.1:99999"], "--endpoint"),
    (["repro", "run", "--endpoint", "http://127.0.0.1:9", "--server-metrics",
      "http://operator:SECRET@h:1,http://operator:SECRET@h:1/"], "--server-metrics"),
    (["repro", "ab", "--endpoint-a", "http://operator:SECRET@127.0.0.1:0", "--endpoint-b", "http://h:1"],
     "--endpoint-a"),
], ids=["bad-port", "twice", "ab-port"])  # fmt: skip
def test_a_refused_url_is_named_without_its_credentials(argv, flag, tmp_path, capsys):
    argv = [word.replace("SECRET", SECRET) for word in argv]
    rc, _, err = run_cli([*argv, "--out", str(tmp_path / "run"), *TINY], capsys)
    assert_refused(rc, err, f"argument {flag}:", "http://***@")
    assert SECRET not in err


# ----- redirects -------------------------------------------------------------------------------
class _Redirect(BaseHTTPRequestHandler):
    """Answers every request with a 307 to the same path on another server (``server.target``)."""

    def log_message(self, *args):
        pass

    def _redirect(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(307)
        self.send_header("Location", self.server.target + self.path)  # type: ignore[attr-defined]
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = _redirect


@pytest.fixture
def redirecting():
    """(redirector URL, the stand-in server it points at)."""
    with InjectingServer({}, seed=1) as target:
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Redirect)
        httpd.target = target.url  # type: ignore[attr-defined]
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{httpd.server_address[1]}", target
        finally:
            httpd.shutdown()
            httpd.server_close()


def test_a_redirected_chat_request_is_not_followed_and_the_record_names_the_target(redirecting, tmp_path, capsys):
    url, target = redirecting
    out = str(tmp_path / "run")
    argv = ["repro", "run", "--endpoint", url, "--server-metrics", target.url, "--model", "m", "--out", out, *TINY]
    rc, _, err = run_cli(argv, capsys)
    assert rc == 0, err
    assert target.requests == 0  # the server behind the redirect was never asked
    records = _records(out)
    assert len(records) == 8 and {r["verdict"] for r in records} == {"http_error"}
    assert {r["http_status"] for r in records} == {307}
    assert f"redirect to '{target.url}/v1/chat/completions' not followed" in records[0]["detail"]


def test_credentials_in_the_endpoint_and_an_api_key_are_refused_before_anything(tmp_path, capsys, monkeypatch):
    """aiohttp refuses every such request ("Cannot combine AUTHORIZATION header ..."): the run used to start,
    write its directory and end on the first request."""
    monkeypatch.setenv("REPRO_KEY", "k")
    out = tmp_path / "run"
    with InjectingServer({}, seed=1) as srv:
        argv = ["repro", "run", "--endpoint", _with_credentials(srv.url), "--api-key-env", "REPRO_KEY"]
        rc, _, err = run_cli([*argv, "--out", str(out), *TINY], capsys)
    assert_refused(rc, err, "carries a user and password and --api-key-env REPRO_KEY an API key", "give one of them")
    assert SECRET not in err and not out.exists() and srv.requests == 0
