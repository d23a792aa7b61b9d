"""Shared helpers for the serve tests (one SGLang parser per test process)."""

from __future__ import annotations

import argparse
import functools
import os
import shlex
import socket
from typing import List, Tuple

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.lru_cache(maxsize=1)
def sglang_args():
    """The tool's validator (imports SGLang once: several seconds)."""
    from sglang_dsv4_ext.serving.validate import SGLangArgs

    return SGLangArgs()


def parse_like_sglang(argv: List[str]) -> argparse.Namespace:
    """Parse a server command line exactly as SGLang 0.5.23's prepare_server_args does.

    A fresh ``argparse.ArgumentParser`` with ``ServerArgs.add_cli_args`` and
    ``parse_args``; independent of the tool's own validator.
    """
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser.parse_args(argv)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pid_alive(pid: int) -> bool:
    """False for a missing process or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def commands_from_dry_run(text: str) -> List[Tuple[dict, List[str]]]:
    """(env, argv) of every command line printed by ``serve --dry-run``."""
    out = []
    for line in text.splitlines():
        if not line.startswith("env "):
            continue
        words = shlex.split(line)[1:]
        env = {}
        while words and "=" in words[0] and not words[0].startswith("-"):
            k, v = words.pop(0).split("=", 1)
            env[k] = v
        out.append((env, words))
    return out
