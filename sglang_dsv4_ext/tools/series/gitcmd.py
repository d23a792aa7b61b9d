"""Plain ``git`` invocations (subprocess, no GitPython) with a fixed, deterministic configuration.

Why a module of its own: reading the series (``git apply --numstat`` validates each patch) and
checking it against a package directory (``git apply --check``) need only the ``git`` program.
``sglang-dsv4 doctor`` and ``sglang-dsv4 patches status|check|apply --sglang-dir`` use this path,
so they work in a serving image without the ``[series]`` extra (GitPython); only commands that
drive a git repository go through :mod:`.gitrepo`.

Determinism: the series must export byte-identically on any machine, so no user or system git
configuration may leak into the output (``diff.noprefix``, ``format.signature``, ``core.abbrev``,
``diff.algorithm`` ...): every call passes :data:`FORCED_CONFIG` as ``-c key=value``. Commits
made while applying patches need a committer even on a bare CI box without ``user.name``. A failed
call says which command failed, where and why.

``git rerere`` is off in :data:`FORCED_CONFIG`: a resolution that git remembered from some earlier
work in the user's repository must never change what a rebase produces. The one way to turn it on
is explicit: a rebase given a resolution record (``rebase --resolutions DIR``, see
:mod:`.resolutions`) opens its repository with :data:`RERERE_CONFIG` on top, and replays only the
resolutions that record holds.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sglang_dsv4_ext.errors import GitError

# The identity used for commits this tool creates locally (rebase, apply, history).
# Author identity of the series' patches is preserved from the patch files by `git am`.
TOOL_NAME = "sglang-dsv4 patches"
TOOL_EMAIL = "sglang-dsv4-patches@localhost"

# Configuration forced on every call so output does not depend on ~/.gitconfig or the
# repository's own config. Passed as `-c key=value` (highest precedence after the CLI).
FORCED_CONFIG: dict[str, str] = {
    "core.abbrev": "12",
    "core.autocrlf": "false",
    "core.quotePath": "true",
    "diff.noprefix": "false",
    "diff.mnemonicPrefix": "false",
    "diff.renames": "false",
    "diff.algorithm": "myers",
    "diff.relative": "false",
    "diff.suppressBlankEmpty": "false",
    "diff.context": "3",
    "diff.interHunkContext": "0",
    "format.signature": "",
    "format.coverLetter": "false",
    "format.numbered": "false",
    "format.thread": "false",
    "format.signOff": "false",
    "format.useAutoBase": "false",
    "am.keepcr": "false",
    "am.threeWay": "false",
    "apply.whitespace": "nowarn",
    "commit.gpgSign": "false",
    "tag.gpgSign": "false",
    "i18n.commitEncoding": "UTF-8",
    "i18n.logOutputEncoding": "UTF-8",
    "rerere.enabled": "false",
    "advice.detachedHead": "false",
    "merge.conflictStyle": "merge",
    "gc.auto": "0",
    "core.hooksPath": "/dev/null",  # no repository hooks run inside our am/commit calls
}

# On top of FORCED_CONFIG for a rebase that uses a resolution record: git rerere records each
# resolved conflict and replays a recorded one, staging the result (autoUpdate).
RERERE_CONFIG: dict[str, str] = {"rerere.enabled": "true", "rerere.autoUpdate": "true"}

# (status, stdout, stderr); stdout is bytes only when binary=True (callers know which they asked for).
GitResult = tuple[int, Any, str]


def git_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The variables every git call gets on top of the caller's environment."""
    env = {
        "GIT_COMMITTER_NAME": TOOL_NAME,
        "GIT_COMMITTER_EMAIL": TOOL_EMAIL,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_EDITOR": "true",
        "GIT_PAGER": "cat",
        "LC_ALL": "C",
        "LANG": "C",
    }
    if extra:
        env.update(extra)
    return env


def git_config_args(overrides: dict[str, str] | None = None) -> list[str]:
    """``-c key=value`` for :data:`FORCED_CONFIG`, with ``overrides`` (e.g. :data:`RERERE_CONFIG`) on top."""
    args: list[str] = []
    for key, value in {**FORCED_CONFIG, **(overrides or {})}.items():
        args += ["-c", f"{key}={value}"]
    return args


def git_command(args: Sequence[str], overrides: dict[str, str] | None = None) -> list[str]:
    return ["git", *git_config_args(overrides), *args]


def git_result(
    args: Sequence[str],
    status: int,
    stdout: bytes | None,
    stderr: None | bytes | str,
    *,
    check: bool,
    binary: bool,
    where: str,
) -> GitResult:
    """Decode one finished git call; with ``check``, a failure raises naming the command and place."""
    stdout = stdout or b""
    err = stderr.decode("utf-8", "replace") if isinstance(stderr, bytes) else (stderr or "")
    out: str | bytes = stdout if binary else stdout.decode("utf-8", "replace")
    if check and status != 0:
        detail = err.strip() or (out.strip() if isinstance(out, str) else "")
        shown = " ".join(args[:3]) + (" ..." if len(args) > 3 else "")
        raise GitError(f"git {shown} failed in {where} (exit {status}): {detail}")
    return status, out, err


def run_git_in(
    directory: str | Path,
    args: Sequence[str],
    *,
    stdin: None | bytes | str = None,
    check: bool = True,
    env: dict[str, str] | None = None,
    binary: bool = False,
) -> GitResult:
    """Run ``git ARGS`` in a plain directory that need not be a repository (e.g. ``git apply``).

    GIT_CEILING_DIRECTORIES stops git from discovering a repository *above* the directory, so
    ``git apply`` patches files relative to ``directory`` and nothing else (a caller may pass
    its own value to allow the search).
    """
    directory = Path(directory).resolve()
    extra = {"GIT_CEILING_DIRECTORIES": str(directory.parent), **(env or {})}
    if not directory.is_dir():
        raise GitError(f"{directory}: not a directory")
    data = stdin.encode() if isinstance(stdin, str) else stdin
    try:
        proc = subprocess.run(
            git_command(args),
            cwd=directory,
            input=data,
            capture_output=True,
            env={**os.environ, **git_env(extra)},
        )
    except FileNotFoundError:
        raise GitError(
            "the git program is not installed (or not on PATH); the patch series tooling runs "
            "`git apply` to read and check patches"
        ) from None
    return git_result(args, proc.returncode, proc.stdout, proc.stderr, check=check, binary=binary, where=str(directory))
