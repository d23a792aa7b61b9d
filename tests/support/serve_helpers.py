"""Shared helpers for the serve tests (one SGLang parser per test process)."""

from __future__ import annotations

import argparse
import functools
import os
import shlex
import socket

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.lru_cache(maxsize=1)
def sglang_args():
    """The tool's validator (imports SGLang once: several seconds)."""
    from sglang_dsv4_ext.tools.serving.validate import SGLangArgs

    return SGLangArgs()


def parse_like_sglang(argv: list[str]) -> argparse.Namespace:
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
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def dry_run_children(text: str) -> list[tuple[list[str], dict, list[str]]]:
    """(unset, env, argv) of every command line printed by ``serve --dry-run``.

    Each line reads ``env [-u NAME]... [NAME=VALUE]... argv``, what env(1) would run.
    """
    out = []
    for line in text.splitlines():
        if not line.startswith("env "):
            continue
        words = shlex.split(line)[1:]
        unset, env = [], {}
        while words and words[0] == "-u":
            unset.append(words[1])
            words = words[2:]
        while words and "=" in words[0] and not words[0].startswith("-"):
            k, v = words.pop(0).split("=", 1)
            env[k] = v
        out.append((unset, env, words))
    return out


def commands_from_dry_run(text: str) -> list[tuple[dict, list[str]]]:
    """(env, argv) of every command line printed by ``serve --dry-run``."""
    return [(env, argv) for _, env, argv in dry_run_children(text)]


def environment_from_dry_run(unset: list[str], env: dict, inherited: dict) -> dict:
    """What env(1) gives the child when the printed line runs in a shell with ``inherited``."""
    out = {k: v for k, v in inherited.items() if k not in unset}
    out.update(env)
    return out
