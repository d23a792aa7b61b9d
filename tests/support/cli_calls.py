"""The CLI as the tests call it: ``sglang-dsv4 patches ...`` in this process, and a refused call's shape."""

from __future__ import annotations

from sglang_dsv4_ext.tools.cli import main as cli_main


def run_patches(*argv: str) -> int:
    """``sglang-dsv4 patches ARGV`` in this process; its exit code."""
    return cli_main(["patches", *argv])


def assert_refused_once(capsys, code: int, needle: str) -> str:
    """A user mistake: exit 2, one ``error:`` line that names ``needle``, no traceback. Returns stdout."""
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and needle in errors[0], err  # one line, naming the input
    assert "Traceback" not in err
    return out
