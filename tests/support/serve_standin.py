"""Stand-in for an SGLang server or router in supervision tests (stdlib only, but for STANDIN_ACTIVATION_LINE).

Run as ``python -m tests.support.serve_standin <the command line serve generated>``: it takes --host
and --port from SGLang's/the router's flags (ignoring the rest), serves GET /health on
that loopback port, and records its argv, pid and SGLANG_DSV4_* environment. Behaviour
comes from environment variables (the preset's per-server ``env`` table sets them):

  STANDIN_RECORD_DIR          write <dir>/<port>.json with argv, pid, env, grandchild pid
  STANDIN_HEALTHY_AFTER=S     /health answers 503 for the first S seconds (default 0)
  STANDIN_DIE_AFTER=S         exit after S seconds with STANDIN_EXIT_CODE (default 3)
  STANDIN_IGNORE_SIGTERM=1    ignore SIGTERM (forces the supervisor's SIGKILL path)
  STANDIN_GRANDCHILD=1        spawn a sleeping grandchild in the same process group
  STANDIN_ESCAPED=1           also spawn one in a new session (setsid): killpg cannot reach it
  STANDIN_ORPHAN=1            also leave one orphaned in the group (its parent exits at once)
  STANDIN_WEDGED=1            GET /metrics: 4 requests running, generation token counter never moves
                              (SGLang's metric names); otherwise /metrics shows an idle server
  STANDIN_METRICS=drip        GET /metrics sends its headers, then one body byte per second, for hours
                              (prints "metrics drip started" to its log on the first such request)
  STANDIN_METRICS=html        GET /metrics answers 200 with an HTML page (not Prometheus text)
  STANDIN_ACTIVATION_LINE=K   print what a launcher and its scheduler print at start, with the real
                              functions of sglang_dsv4_ext.runtime.activation (the one import beyond the stdlib):
                              this-launch (as a launch_server that built a DSV4 model), other-launch (an
                              active line naming another launch), launcher (only the launcher's line)

Every descendant's pid is recorded (``descendant_pids``) so a test can check none survives.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


def _orphan() -> int:
    """Start a sleeper through a parent that exits at once; return the sleeper's pid."""
    parent = subprocess.run(
        [sys.executable, "-c", f"import subprocess; print(subprocess.Popen({SLEEPER!r}, stdout=-3).pid)"],
        stdout=subprocess.PIPE,
        check=True,
        text=True,
    )
    return int(parent.stdout)


def _descendants():
    """(the same-group grandchild or None, every descendant pid) as the environment asks."""
    grandchild = None
    descendants = []
    if os.environ.get("STANDIN_GRANDCHILD") == "1":
        grandchild = subprocess.Popen(SLEEPER)
        descendants.append(grandchild.pid)
    if os.environ.get("STANDIN_ESCAPED") == "1":
        descendants.append(subprocess.Popen(SLEEPER, start_new_session=True).pid)
    if os.environ.get("STANDIN_ORPHAN") == "1":
        descendants.append(_orphan())
    return grandchild, descendants


def _print_activation_lines(kind: str) -> None:
    from sglang_dsv4_ext.config import load_config
    from sglang_dsv4_ext.runtime import activation, launch_identity

    os.environ[launch_identity.ENV_LAUNCH] = launch_identity.of_process()  # as the launcher's entry point does
    cfg = load_config()
    print(activation.launcher_line(cfg), file=sys.stderr, flush=True)
    if kind == "other-launch":
        os.environ[launch_identity.ENV_LAUNCH] = "999@1577836800.00"
    if kind != "launcher":
        print(activation.activation_line(cfg), file=sys.stderr, flush=True)


class Handler(BaseHTTPRequestHandler):
    """GET /health (503 until healthy_after seconds past start) and GET /metrics, as the environment asks."""

    start = 0.0
    healthy_after = 0.0

    def log_message(self, *a):
        pass

    def _drip(self):
        print("metrics drip started", flush=True)
        self.send_response(200)
        self.send_header("Content-Length", "100000")
        self.end_headers()
        try:
            for _ in range(100000):
                self.wfile.write(b"#")
                self.wfile.flush()
                time.sleep(1.0)
        except (BrokenPipeError, ConnectionResetError):  # the reader gave up: what the drip is for
            pass

    def _metrics_body(self) -> bytes:
        if os.environ.get("STANDIN_METRICS") == "html":
            return b"<html><body>metrics are elsewhere</body></html>\n"
        running = 4 if os.environ.get("STANDIN_WEDGED") == "1" else 0
        return (
            f"# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs {running}\n"
            "# TYPE sglang:generation_tokens counter\nsglang:generation_tokens_total 100\n"
        ).encode()

    def do_GET(self):  # noqa: N802 (http.server API)
        if self.path == "/metrics" and os.environ.get("STANDIN_METRICS") == "drip":
            self._drip()
            return
        if self.path == "/metrics":
            body = self._metrics_body()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        ok = self.path == "/health" and time.monotonic() - self.start >= self.healthy_after
        self.send_response(200 if ok else 503)
        self.send_header("Content-Length", "0")
        self.end_headers()


def _record(port: int, grandchild, descendants) -> None:
    record_dir = os.environ.get("STANDIN_RECORD_DIR")
    if record_dir:
        record = {
            "argv": sys.argv[1:],
            "pid": os.getpid(),
            "grandchild_pid": grandchild.pid if grandchild else None,
            "descendant_pids": descendants,
            "env": {k: v for k, v in os.environ.items() if k.startswith("SGLANG_DSV4")},
        }
        with open(os.path.join(record_dir, f"{port}.json"), "w") as f:
            json.dump(record, f)


def main() -> None:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args, _ = parser.parse_known_args()
    if args.host not in ("127.0.0.1", "localhost"):
        args.host = "127.0.0.1"  # tests use loopback only, whatever the preset says
    Handler.start = start = time.monotonic()
    Handler.healthy_after = float(os.environ.get("STANDIN_HEALTHY_AFTER", "0"))
    if os.environ.get("STANDIN_IGNORE_SIGTERM") == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    grandchild, descendants = _descendants()
    if os.environ.get("STANDIN_ACTIVATION_LINE"):
        _print_activation_lines(os.environ["STANDIN_ACTIVATION_LINE"])
    _record(args.port, grandchild, descendants)

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"standin listening on {args.host}:{args.port}", flush=True)

    die_after = os.environ.get("STANDIN_DIE_AFTER")
    deadline = start + float(die_after) if die_after else None
    while True:
        if deadline is not None and time.monotonic() >= deadline:
            print("standin exiting on purpose", flush=True)
            os._exit(int(os.environ.get("STANDIN_EXIT_CODE", "3")))
        time.sleep(0.05)


if __name__ == "__main__":
    main()
