"""Old-versus-new series report: a summary table plus ``git range-diff``.

The old series is turned into commits on its old base without touching any work tree:
each patch is applied with ``git apply --cached`` to a private index file, and the tree is
committed with ``git commit-tree`` using the patch's own author, date and message (from
``git mailinfo``). ``git range-diff`` then pairs old and new commits and diffs their diffs.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

from .classify import Result
from .gitrepo import GitError, GitRepo
from .series import PatchFile


def commit_patch_on(repo: GitRepo, parent: str, patch: PatchFile, index_file: Path) -> str:
    """Commit ``patch`` on ``parent`` (no work tree involved); return the new commit id."""
    env = {"GIT_INDEX_FILE": str(index_file)}
    repo.run("read-tree", parent, env=env)
    status, _, err = repo.run("apply", "--cached", str(patch.path), env=env, check=False)
    if status != 0:
        raise GitError(f"{patch.path}: does not apply to {parent[:12]}: {err.strip()}")
    tree = repo.out("write-tree", env=env)
    with tempfile.TemporaryDirectory() as tmp:
        msg, body_patch = Path(tmp) / "msg", Path(tmp) / "patch"
        info = repo.run("mailinfo", str(msg), str(body_patch), stdin=patch.text)[1]
        meta = dict(line.split(": ", 1) for line in info.splitlines() if ": " in line)
        message = meta.get("Subject", patch.subject) + "\n\n" + msg.read_text()
    author_env = {
        "GIT_AUTHOR_NAME": meta.get("Author", "unknown"),
        "GIT_AUTHOR_EMAIL": meta.get("Email", "unknown@localhost"),
        "GIT_AUTHOR_DATE": meta.get("Date", "1970-01-01T00:00:00Z"),
        "GIT_COMMITTER_DATE": meta.get("Date", "1970-01-01T00:00:00Z"),
    }
    return repo.out("commit-tree", tree, "-p", parent, stdin=message.rstrip() + "\n", env=author_env)


def commit_series_on(repo: GitRepo, base: str, patches: Sequence[PatchFile]) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        index_file = Path(tmp) / "index"
        tip = base
        for patch in patches:
            tip = commit_patch_on(repo, tip, patch, index_file)
    return tip


def range_diff(repo: GitRepo, old_base: str, old_tip: str, new_base: str, new_tip: str) -> str:
    return repo.run(
        "range-diff", "--no-color", "--creation-factor=60", f"{old_base}..{old_tip}", f"{new_base}..{new_tip}"
    )[1]


def summary_table(results: Sequence[Result]) -> str:
    width = max([len(r.name) for r in results] + [5])
    lines = [f"{'patch':<{width}}  result", f"{'-' * width}  {'-' * 40}"]
    for r in results:
        lines.append(f"{r.name:<{width}}  {r.describe()}")
        for item in r.failing_hunks:
            lines.append(f"{'':<{width}}    hunk: {item}")
        for item in r.conflict_regions:
            lines.append(f"{'':<{width}}    conflict: {item}")
    counts: dict[str, int] = {}
    for r in results:
        counts[r.kind.value] = counts.get(r.kind.value, 0) + 1
    lines.append("")
    lines.append("totals: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return "\n".join(lines) + "\n"


def report(
    repo: GitRepo,
    results: Sequence[Result],
    *,
    old_label: str,
    new_label: str,
    old_base: str | None,
    old_patches: Sequence[PatchFile],
    new_base: str,
    new_tip: str,
) -> str:
    """Markdown-ish text: classification table, then the range-diff (or why it is missing)."""
    parts = [f"# Patch series: {old_label} -> {new_label}\n", summary_table(results)]
    parts.append("## range-diff (old series on the old base vs new series on the new base)\n")
    if old_base is None:
        parts.append(f"(no range-diff: the old base {old_label} is not in this repository)\n")
    else:
        try:
            old_tip = commit_series_on(repo, old_base, old_patches)
            parts.append(range_diff(repo, old_base, old_tip, new_base, new_tip) or "(no commits on either side)\n")
        except GitError as exc:
            parts.append(f"(no range-diff: {exc})\n")
    return "\n".join(parts)
