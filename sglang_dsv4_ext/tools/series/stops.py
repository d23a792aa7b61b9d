"""What a rebase does at a stop: the editable commit message, committing a resolution, hand ports,
and resolving a stop from a resolution record (:mod:`.resolutions`).

Commits made here are deterministic: the committer date is the patch's own date (as
``git am --committer-date-is-author-date`` makes it for a patch that applies), and the
committer is the tool's (:mod:`.gitcmd`), so the same resolution gives the same commit id.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from sglang_dsv4_ext.errors import RebaseError

from . import resolutions
from .gitrepo import GitRepo
from .series import PatchFile

MESSAGE_FILE = "MESSAGE"  # in the rebase's state directory


def _mailinfo(repo: GitRepo, patch: PatchFile) -> tuple[str, dict[str, str]]:
    """(the commit message `git am` makes of the patch, its mail fields: Author, Email, Date)."""
    with tempfile.TemporaryDirectory() as tmp:
        msg, body = Path(tmp) / "msg", Path(tmp) / "patch"
        info = repo.run("mailinfo", str(msg), str(body), stdin=patch.text)[1]
        meta = dict(line.split(": ", 1) for line in info.splitlines() if ": " in line)
        return meta.get("Subject", patch.subject) + "\n\n" + msg.read_text(), meta


def patch_message(repo: GitRepo, patch: PatchFile) -> str:
    return _mailinfo(repo, patch)[0]


def commit_date_env(repo: GitRepo, patch: PatchFile) -> dict[str, str]:
    date = _mailinfo(repo, patch)[1].get("Date", "")
    return {"GIT_COMMITTER_DATE": date} if date else {}


def write_message_file(state_dir: Path, repo: GitRepo, patch: PatchFile) -> Path:
    path = state_dir / MESSAGE_FILE
    path.write_text(patch_message(repo, patch))
    return path


def edited_message(state_dir: Path, repo: GitRepo, patch: PatchFile) -> str | None:
    """The MESSAGE file when it was edited at the stop (None: the patch's own message stands)."""
    path = state_dir / MESSAGE_FILE
    if not path.is_file():
        return None
    text = path.read_text()
    if not text.strip():
        raise RebaseError(f"{path} is empty: write the commit message there, or put the patch's back")
    return None if _normal(text) == _normal(patch_message(repo, patch)) else text


def _normal(message: str) -> str:
    return message.rstrip() + "\n"


def amend(repo: GitRepo, patch: PatchFile, message: str | None) -> str:
    """Amend HEAD with what is staged, and with ``message`` (None: the commit keeps its own)."""
    how = ["-F", "-"] if message is not None else ["--no-edit"]
    repo.run(
        "commit",
        "-q",
        "--amend",
        "--allow-empty",
        "--no-verify",
        *how,
        stdin=_normal(message) if message is not None else None,
        env=commit_date_env(repo, patch),
    )
    return repo.must_rev_parse("HEAD")


def am_continue(repo: GitRepo, patch: PatchFile) -> str:
    """`git am --continue` for a resolved conflict; the commit, or why it cannot be made."""
    status, out, err = repo.run("am", "--continue", check=False, env=commit_date_env(repo, patch))
    if status != 0:
        message = (out + err).strip()
        if re.search(r"No changes", message):
            raise RebaseError(
                f"{patch.name}: the resolution leaves no change, so upstream absorbed this patch (or the "
                f"resolution dropped it). Check why; if upstream has it, drop it: --continue --drop {patch.name} "
                "--reason TEXT"
            )
        raise RebaseError(f"{patch.name}: git am --continue failed: {message}")
    return repo.must_rev_parse("HEAD")


def take_hand_port(repo: GitRepo, stop_head: str, patch: PatchFile, message: str | None) -> str | None:
    """A hand port of a stopped patch: one commit made by the user, or staged changes that we
    commit with the patch's author and date, and its message (or the edited one)."""
    head = repo.must_rev_parse("HEAD")
    if head != stop_head:
        new = repo.commits_between(stop_head, head)
        if len(new) != 1 or repo.dirty_paths():
            raise RebaseError(
                f"{patch.name}: expected exactly one new commit (the port) on top of {stop_head[:12]} "
                f"and a clean tree, found {len(new)} commits"
                + (" and uncommitted changes" if repo.dirty_paths() else "")
            )
        return head
    staged = repo.out("diff", "--cached", "--name-only")
    if not staged:
        return None
    unstaged = repo.out("diff", "--name-only")
    if unstaged:
        files = unstaged.replace(chr(10), ", ")
        raise RebaseError(f"{patch.name}: unstaged changes in {files}; `git add` or discard them")
    own, meta = _mailinfo(repo, patch)
    repo.run(
        "commit",
        "-q",
        "--no-verify",
        "-F",
        "-",
        stdin=_normal(message or own),
        env={
            "GIT_AUTHOR_NAME": meta.get("Author", ""),
            "GIT_AUTHOR_EMAIL": meta.get("Email", ""),
            "GIT_AUTHOR_DATE": meta.get("Date", ""),
            "GIT_COMMITTER_DATE": meta.get("Date", ""),
        },
    )
    return repo.must_rev_parse("HEAD")


def fully_resolved_by_rerere(repo: GitRepo) -> bool:
    """`git am -3` stopped, and rerere resolved and staged every conflicted file from the record."""
    return repo.am_in_progress() and not repo.unmerged_paths() and bool(repo.out("diff", "--cached", "--name-only"))


def resolve_from_record(repo: GitRepo, record_dir: Path, patch: PatchFile) -> tuple[str | None, str]:
    """(the resolved commit, what the record supplied) for a stop rerere resolved from the record;
    (None, why not) where the recorded edits do not apply (the stop stays for a human)."""
    failed = resolutions.replay_edits(repo, record_dir, patch.name)
    if failed:
        return None, failed
    used = ["git rerere"]
    if resolutions.recorded(record_dir, patch.name, resolutions.EDITS_SUFFIX) is not None:
        used.append("recorded edits")
    commit = am_continue(repo, patch)
    message = resolutions.recorded(record_dir, patch.name, resolutions.MESSAGE_SUFFIX)
    if message is not None:
        commit = amend(repo, patch, message)
        used.append("recorded message")
    return commit, ", ".join(used)


def edit_from_record(repo: GitRepo, record_dir: Path, patch: PatchFile) -> tuple[str | None, str]:
    """(the amended commit, what the record supplied) for a patch that applied and was edited after
    it applied when the record was made (``--edit``); (None, why not) where the edits do not apply."""
    failed = resolutions.replay_edits(repo, record_dir, patch.name)
    if failed:
        return None, failed
    used = [
        what
        for what, suffix in (
            ("recorded edits", resolutions.EDITS_SUFFIX),
            ("recorded message", resolutions.MESSAGE_SUFFIX),
        )
        if resolutions.recorded(record_dir, patch.name, suffix) is not None
    ]
    message = resolutions.recorded(record_dir, patch.name, resolutions.MESSAGE_SUFFIX)
    return amend(repo, patch, message), ", ".join(used)


def take_edit(repo: GitRepo, stop_head: str, patch: PatchFile, message: str | None) -> str:
    """Amend the applied patch with the staged changes and the edited message (``--edit`` stop)."""
    if repo.must_rev_parse("HEAD") != stop_head:
        raise RebaseError(
            f"{patch.name}: HEAD moved since the stop ({stop_head[:12]}); stage the changes instead of committing "
            "them (the rebase amends the patch's commit), e.g. `git reset --soft " + stop_head[:12] + "`"
        )
    unstaged = repo.out("diff", "--name-only")
    if unstaged:
        files = unstaged.replace(chr(10), ", ")
        raise RebaseError(f"{patch.name}: unstaged changes in {files}; `git add` or discard them")
    if not repo.out("diff", "--cached", "--name-only") and message is None:
        return stop_head
    return amend(repo, patch, message)
