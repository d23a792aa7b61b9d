"""The resolution record of a rebase: how each stop was resolved, so the same rebase replays.

Why: a rebase across a real upstream delta stops at conflicts that a human resolves by
understanding both sides. Done once, the same step must replay on a fresh clone without the
human (to check it, to redo it after a fix to an earlier patch, to review it). ``git rerere``
is git's tool for that, but it remembers only the files that conflicted, and a resolution
that is right for the older release often edits more: a file the merge took cleanly (a call
of a function the older release does not have), another file (the older release's channel
for the same fix), the commit message (the patch describes what it does on that release).

Layout of a record directory (``rebase --resolutions DIR``)::

    DIR/rr-cache/<id>/preimage, postimage   git rerere's own cache: each conflicted file as it
                                            conflicted, and as it was resolved
    DIR/<patch file name>.edits             the resolution's changes to files that did not
                                            conflict (a `git diff` from the merge's result);
                                            for a patch edited after it applied (``--edit``),
                                            the changes to the applied patch
    DIR/<patch file name>.message           the resolved commit's message, where it is not
                                            the patch's own

How: for the rebase the repository's ``rr-cache`` is exactly the record's (the repository's
own is kept aside and put back at the end or on ``--abort``), so only recorded resolutions
replay, and every conflict resolved in this rebase is in it at the end. At a stop the tree
the three-way merge made of the files that did not conflict is remembered; at ``--continue``
the resolved commit's difference from it, outside the conflicted files, is the ``.edits``.
Replaying, a patch whose conflicts rerere resolved completely gets its ``.edits`` applied and
its ``.message``, and the rebase goes on without stopping; so does a patch that applied and has
``.edits`` or a ``.message`` recorded (it was edited with ``--edit``). The record is written
when the rebase finishes, next to the series it produced.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from sglang_dsv4_ext.errors import RebaseError

from .gitrepo import GitRepo

RR_CACHE = "rr-cache"
EDITS_SUFFIX = ".edits"
MESSAGE_SUFFIX = ".message"
_SAVED_RR_CACHE = "rr-cache.of-the-repository"  # in the rebase's state directory
_PENDING = "record"  # in the rebase's state directory: .edits / .message until the rebase finishes
_RERERE_FILES = ("preimage", "postimage")


def rr_cache_of(repo: GitRepo) -> Path:
    """The repository's rerere cache (in the common git directory, shared by its worktrees)."""
    rel = Path(repo.out("rev-parse", "--git-path", RR_CACHE))
    return rel if rel.is_absolute() else (repo.work_tree or repo.git_dir) / rel


def check_record_dir(record_dir: Path) -> Path:
    """A record directory to read from and write to: absent (a new record) or a directory."""
    record_dir = Path(record_dir).resolve()
    if record_dir.exists() and not record_dir.is_dir():
        raise RebaseError(f"--resolutions {record_dir}: not a directory (a resolution record directory, or a new one)")
    cache = record_dir / RR_CACHE
    if cache.exists() and not cache.is_dir():
        raise RebaseError(f"{cache}: not a directory (git rerere's cache of the record)")
    return record_dir


def _copy_entries(source: Path, dest: Path) -> None:
    for entry in sorted(source.iterdir()) if source.is_dir() else []:
        if entry.is_dir():
            for file in entry.iterdir():
                if file.name.startswith(_RERERE_FILES):
                    (dest / entry.name).mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(file, dest / entry.name / file.name)


def begin(repo: GitRepo, record_dir: Path, state_dir: Path) -> None:
    """Make the repository's rr-cache exactly the record's for the rebase (its own is kept aside)."""
    live = rr_cache_of(repo)
    saved = state_dir / _SAVED_RR_CACHE
    if live.exists():
        shutil.move(str(live), str(saved))
    live.mkdir(parents=True, exist_ok=True)
    _copy_entries(Path(record_dir) / RR_CACHE, live)


def end(repo: GitRepo, state_dir: Path) -> None:
    """Put the repository's own rr-cache back (finish and abort)."""
    live = rr_cache_of(repo)
    shutil.rmtree(live, ignore_errors=True)
    saved = state_dir / _SAVED_RR_CACHE
    if saved.exists():
        shutil.move(str(saved), str(live))


def merge_tree(repo: GitRepo) -> str:
    """The tree of HEAD with the index's merged (stage 0) entries: what the three-way merge made of
    every file that did not conflict (a conflicted file keeps HEAD's content here)."""
    index_file = repo.git_dir / "dsv4-merge-tree.index"
    env = {"GIT_INDEX_FILE": str(index_file)}
    try:
        repo.run("read-tree", "HEAD", env=env)
        staged = [e for e in repo.run("ls-files", "--stage", "-z")[1].split("\0") if e]
        merged = [e for e in staged if e.split("\t", 1)[0].split()[2] == "0"]
        in_index = {e.split("\t", 1)[1] for e in staged}
        gone = [
            p for p in repo.run("ls-tree", "-r", "-z", "--name-only", "HEAD")[1].split("\0") if p and p not in in_index
        ]  # the merge deleted them
        lines = merged + [f"0 {'0' * 40}\t{p}" for p in gone]
        if lines:
            repo.run("update-index", "-z", "--index-info", stdin="\0".join(lines) + "\0", env=env)
        return repo.out("write-tree", env=env)
    finally:
        index_file.unlink(missing_ok=True)


def edits_since_merge(repo: GitRepo, tree: str, commit: str, conflicted: Sequence[str]) -> str:
    """The resolved commit's difference from the merge's tree, outside the conflicted files."""
    excluded = [f":(top,exclude,literal){path}" for path in conflicted]
    return repo.run(
        "diff",
        "--binary",
        "--full-index",
        "--no-renames",
        "--no-color",
        "--no-ext-diff",
        tree,
        commit,
        "--",
        ":(top)",
        *excluded,
    )[1]


def pending_dir(state_dir: Path) -> Path:
    return state_dir / _PENDING


def keep_pending(state_dir: Path, name: str, edits: str, message: str | None) -> None:
    """Hold a resolution's edits and message in the state directory until the rebase finishes."""
    pending = pending_dir(state_dir)
    pending.mkdir(exist_ok=True)
    for suffix, text in ((EDITS_SUFFIX, edits), (MESSAGE_SUFFIX, message)):
        path = pending / (name + suffix)
        if text:
            path.write_text(text)
        else:
            path.unlink(missing_ok=True)


def recorded(record_dir: Path, name: str, suffix: str) -> str | None:
    path = Path(record_dir) / (name + suffix)
    return path.read_text() if path.is_file() else None


def has_entry(record_dir: Path, name: str) -> bool:
    """The record holds edits or a message for ``name``."""
    return any((Path(record_dir) / (name + s)).is_file() for s in (EDITS_SUFFIX, MESSAGE_SUFFIX))


def replay_edits(repo: GitRepo, record_dir: Path, name: str) -> str | None:
    """Apply the recorded ``.edits`` of ``name`` to the index and work tree; None, or why they do not apply."""
    path = Path(record_dir) / (name + EDITS_SUFFIX)
    if not path.is_file():
        return None
    status, _, err = repo.run("apply", "--index", "--binary", str(path), check=False)
    return None if status == 0 else f"{path} does not apply: {err.strip()}"


def record_files(repo: GitRepo, record_dir: Path, state_dir: Path) -> dict[str, bytes]:
    """Every file the record should hold after this rebase: the resolved entries of the rr-cache,
    the record's own .edits / .message, and this rebase's new ones."""
    files: dict[str, bytes] = {}
    record_dir = Path(record_dir)
    for path in sorted(record_dir.glob("*")) if record_dir.is_dir() else []:
        if path.is_file() and path.name.endswith((EDITS_SUFFIX, MESSAGE_SUFFIX)):
            files[path.name] = path.read_bytes()
    pending = pending_dir(state_dir)
    for path in sorted(pending.glob("*")) if pending.is_dir() else []:
        files[path.name] = path.read_bytes()
    live = rr_cache_of(repo)
    for entry in sorted(live.iterdir()) if live.is_dir() else []:
        if entry.is_dir() and (entry / "postimage").is_file():
            for file in sorted(entry.iterdir()):
                if file.name.startswith(_RERERE_FILES):
                    files[f"{RR_CACHE}/{entry.name}/{file.name}"] = file.read_bytes()
    return files


def write_record(record_dir: Path, files: dict[str, bytes]) -> list[str]:
    """Write the record (only files that change); return the changed ones, relative to ``record_dir``."""
    changed = []
    for rel, data in sorted(files.items()):
        path = Path(record_dir) / rel
        if path.is_file() and path.read_bytes() == data:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
        changed.append(rel)
    return changed
