"""What a rebase, an apply and an export refuse before they change anything.

A repository in the middle of another git operation, with a stale index lock or with uncommitted
changes is refused (nothing was changed, the message says what to do). A series directory about to
be rewritten must have no uncommitted changes when git tracks it; when git does not (a copy, an
unpacked release) its previous contents are kept in a timestamped backup.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

from sglang_dsv4_ext.errors import RebaseError

from .gitcmd import run_git_in
from .gitrepo import GitRepo

Progress = Callable[[str], None]

_BUSY_MARKERS = {
    "rebase-merge": "a git rebase",
    "rebase-apply": "a git am or rebase",
    "MERGE_HEAD": "a merge",
    "CHERRY_PICK_HEAD": "a cherry-pick",
    "REVERT_HEAD": "a revert",
    "BISECT_LOG": "a bisect",
}


def refuse_busy_or_dirty(repo: GitRepo) -> None:
    if repo.bare:
        raise RebaseError(f"{repo.path} is a bare repository; the rebase needs a work tree (a checkout of SGLang)")
    for marker, what in _BUSY_MARKERS.items():
        if (repo.git_dir / marker).exists():
            raise RebaseError(f"{repo.path} is in the middle of {what}; finish or abort it first (nothing was changed)")
    lock = repo.git_dir / "index.lock"
    if lock.exists():
        raise RebaseError(
            f"{lock} exists: another git process is using {repo.path}, or one died and left its lock. If no git "
            "command is running there, remove that file; nothing was changed."
        )
    dirty = repo.dirty_paths()
    if dirty:
        shown = ", ".join(dirty[:10]) + (f" and {len(dirty) - 10} more" if len(dirty) > 10 else "")
        raise RebaseError(
            f"{repo.path} has uncommitted changes in: {shown}. Commit or stash them first; nothing was changed."
        )


def series_dir_changes(series_dir: Path) -> list[str] | None:
    """Uncommitted changes (untracked included) under the series directory when it is in a git
    work tree; None when it is not version-controlled."""
    status, out, _ = run_git_in(
        series_dir, ["rev-parse", "--show-toplevel"], check=False, env={"GIT_CEILING_DIRECTORIES": ""}
    )
    if status != 0:
        return None
    top = GitRepo(out.strip())
    out = top.run("status", "--porcelain=v1", "--untracked-files=all", "-z", "--", str(Path(series_dir).resolve()))[1]
    return [entry[3:] for entry in out.split("\0") if entry]


def protect_series_dir(series_dir: Path, progress: Progress, rewritten: list[str] | None = None) -> Path | None:
    """Before the series directory is rewritten: refuse uncommitted changes when git tracks it;
    when git does not (a copy, an unpacked release), keep a timestamped backup and say where.

    ``rewritten``: the files about to change (None: any may); no backup is needed when none of
    them exists yet. Returns the backup directory, if one was made."""
    changes = series_dir_changes(series_dir)
    if changes is None:
        if rewritten is not None and not any((Path(series_dir) / name).exists() for name in rewritten):
            return None
        backup = _free_backup_name(Path(series_dir))
        shutil.copytree(series_dir, backup)
        progress(f"{series_dir} is not tracked by git: its previous contents are kept in {backup}")
        return backup
    if changes:
        shown = ", ".join(changes[:10]) + (f" and {len(changes) - 10} more" if len(changes) > 10 else "")
        raise RebaseError(
            f"the series directory {series_dir} has uncommitted changes ({shown}); it would be "
            "rewritten. Commit them first; nothing was changed."
        )
    return None


def _free_backup_name(series_dir: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate = series_dir.with_name(f"{series_dir.name}.backup-{stamp}")
    n = 2
    while candidate.exists():
        candidate = series_dir.with_name(f"{series_dir.name}.backup-{stamp}-{n}")
        n += 1
    return candidate
