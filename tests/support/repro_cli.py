"""Helpers for the `sglang-dsv4 repro` bad-input tests: run the real CLI in-process and capture
what the user sees, and make small real runs (against the stand-in server) to break on purpose."""

from __future__ import annotations

import hashlib
import json
import os
import shutil

from sglang_dsv4_ext.tools.cli import main
from tests.support.repro_server import InjectingServer

# A tiny workload: 2 sessions x 2 rounds (tool + answer step) = 8 requests.
TINY = ["--sessions", "2", "--rounds", "2", "--concurrency", "2", "--system-prompt-chars", "200",
        "--tool-result-chars", "100", "--no-progress"]  # fmt: skip


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``sglang-dsv4 <argv>``; argparse's own exit counts as a code."""
    capsys.readouterr()
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse refuses a flag value with exit 2
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


def assert_refused(rc: int, err: str, *fragments: str) -> None:
    """A user mistake: exit 2, one clear message holding every fragment, no traceback."""
    assert rc == 2, (rc, err)
    assert "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, (fragment, err)


def tree_digest(path: str) -> dict:
    """{relative path: sha256} of every file under ``path`` (to show nothing was changed)."""
    digest = {}
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            with open(full, "rb") as f:
                digest[os.path.relpath(full, path)] = hashlib.sha256(f.read()).hexdigest()
    return digest


class NoCapture:
    """Stands in for pytest's ``capsys`` where a module-scoped fixture makes runs (``capsys`` is function-scoped)."""

    def readouterr(self):
        return "", ""


def make_run(out: str, capsys, rates=None, extra: list[str] = (), **server) -> str:
    """A real run in ``out`` (8 requests unless ``extra`` changes the shape) made through the CLI;
    ``server``: keyword arguments of the stand-in server (e.g. ``stall_after``)."""
    with InjectingServer(rates or {"malformed_dsml": 0.4}, seed=1, **server) as srv:
        rc, _, err = run_cli(["repro", "run", "--endpoint", srv.url, "--out", out, *TINY, *extra], capsys)
    assert rc == 0, err
    return out


def copy_run(src: str, dst: str) -> str:
    shutil.copytree(src, dst)
    return dst


def requests_file(run_dir: str) -> str:
    return os.path.join(run_dir, "requests.jsonl")  # the documented name (docs/repro.md), spelled as users see it


def _not_json(constant: str):
    raise AssertionError(f"{constant} in a file repro wrote: that is not JSON (RFC 8259)")


def read_json_strict(path) -> dict:
    """A JSON file repro wrote, read as any strict JSON reader would (``NaN`` / ``Infinity`` fail the test)."""
    with open(path, encoding="utf-8") as f:
        return json.loads(f.read(), parse_constant=_not_json)
