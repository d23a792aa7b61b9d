"""What one patch does against one upstream work tree.

The classifications, checked in this order (the first that holds wins):

``already-applied``           a commit since the old base carries this patch of the series (its
                              subject and its DEP-3 header field names, which `git am` copies
                              from the patch file) and the patch does not apply forward: a
                              second ``apply``, or a checkout made from the series. Never
                              reported as upstream: our own commit is not upstream's.
``upstream-reverse-applies``  the patch reverse-applies cleanly: its change is already there.
``upstream-patch-id``         an upstream commit since the old base made the same change
                              (``git patch-id --stable``, restricted to the patch's files) and
                              the patch no longer applies (upstream has moved on since).
``applies``                   ``git apply --check`` succeeds (offsets allowed, no fuzz).
``applies-3way``              only ``git am -3`` applies it (a clean three-way merge).
``upstream-absorbed``         ``git am -3`` merges to *no change*: upstream holds the content.
``target-gone``               ``git am -3`` fails and files the patch modifies no longer exist.
``conflict``                  ``git am -3`` fails; the failing hunks and conflict regions are
                              recorded. ``git am`` is left in progress for a human to resolve.

Two more appear in a rebase: ``resolved`` (a human finished a conflict or ported the patch)
and ``dropped`` (removed with ``--drop NAME --reason TEXT``).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Protocol

from .gitrepo import GitRepo
from .series import PatchFile, parse_dep3


class Kind(str, Enum):
    ALREADY_APPLIED = "already-applied"
    APPLIES = "applies"
    APPLIES_3WAY = "applies-3way"
    UPSTREAM_PATCH_ID = "upstream-patch-id"
    UPSTREAM_REVERSE = "upstream-reverse-applies"
    UPSTREAM_ABSORBED = "upstream-absorbed"
    CONFLICT = "conflict"
    TARGET_GONE = "target-gone"
    RESOLVED = "resolved"
    DROPPED = "dropped"

    def __str__(self) -> str:  # argparse/f-strings print the value
        return self.value


UPSTREAM_KINDS = frozenset({Kind.UPSTREAM_PATCH_ID, Kind.UPSTREAM_REVERSE, Kind.UPSTREAM_ABSORBED})
APPLIED_KINDS = frozenset({Kind.APPLIES, Kind.APPLIES_3WAY, Kind.RESOLVED})
# Kinds that stop a rebase until a human decides (resolve, port, or drop with a reason).
# (A rebase onto a ref that already holds a patch of the series stops too: it would export nothing for it.)
STOP_KINDS = frozenset(UPSTREAM_KINDS | {Kind.CONFLICT, Kind.TARGET_GONE, Kind.ALREADY_APPLIED})


@dataclass
class Result:
    name: str
    kind: Kind
    detail: str = ""
    commit: str | None = None  # the commit holding the patch after it applied
    missing_files: list[str] = field(default_factory=list)
    failing_hunks: list[str] = field(default_factory=list)
    conflict_regions: list[str] = field(default_factory=list)
    conflicted_files: list[str] = field(default_factory=list)
    reason: str = ""  # why a dropped patch left the series (--reason)

    def to_json(self) -> dict:
        data = asdict(self)
        data["kind"] = self.kind.value
        return data

    @classmethod
    def from_json(cls, data: dict) -> Result:
        data = dict(data)
        data["kind"] = Kind(data["kind"])
        return cls(**data)

    def describe(self) -> str:
        parts = [self.kind.value]
        if self.detail:
            parts.append(f"({self.detail})")
        if self.reason:
            parts.append(f"-- {self.reason}")
        return " ".join(parts)


# ---- individual checks ----------------------------------------------------------------------


def patch_id(repo: GitRepo, text: str) -> str | None:
    out = repo.out("patch-id", "--stable", stdin=text)
    return out.split()[0] if out else None


def upstream_commit_with_same_change(
    repo: GitRepo, patch: PatchFile, base: str | None, head: str = "HEAD"
) -> str | None:
    """The upstream commit in base..head whose change to the patch's files equals the patch."""
    own = patch_id(repo, patch.text)
    if own is None:
        return None
    revs = [f"{base}..{head}"] if base else [head, "--max-count=500"]
    status, log, _ = repo.run(
        "log",
        "-p",
        "--no-color",
        "--no-renames",
        "--no-merges",
        "--pretty=medium",
        *revs,
        "--",
        *patch.files,
        check=False,
    )
    if status != 0 or not log.strip():
        return None
    for line in repo.out("patch-id", "--stable", stdin=log).splitlines():
        pid, commit = line.split()[:2]
        if pid == own:
            return commit
    return None


def series_commit(repo: GitRepo, patch: PatchFile, base: str | None, head: str = "HEAD") -> str | None:
    """The newest commit in base..head that carries ``patch`` of the series: its subject, and
    every DEP-3 field name the patch has (`git am` copies the header from the patch file;
    upstream commits carry none). The values may have been edited since; the names stay."""
    revs = [f"{base}..{head}"] if base else [head, "--max-count=500"]
    status, log, _ = repo.run(
        "log", "--no-merges", "--format=%H%x00%s%x00%b%x00", *revs, "--", *patch.files, check=False
    )
    if status != 0:
        return None
    fields = log.split("\0")
    for commit, subject, body in zip(fields[0::3], fields[1::3], fields[2::3]):
        if subject.strip() == patch.subject and set(patch.fields) <= set(parse_dep3(body)):
            return commit.strip()
    return None


class Applies(Protocol):
    """What ``git apply --check`` needs: a repository (:class:`GitRepo`) or a plain directory (``PlainTree``)."""

    def run(self, *args: str, check: bool = True) -> tuple[int, str, str]: ...


def apply_check(repo: Applies, patch_path: Path, *, reverse: bool = False) -> bool:
    args = ["apply", "--check"] + (["-R"] if reverse else []) + [str(patch_path)]
    return repo.run(*args, check=False)[0] == 0


def failing_hunks(repo: Applies, patch: PatchFile, tmp_dir: Path) -> list[str]:
    """Each hunk checked alone against the work tree: which ones do not apply."""
    failing = []
    for path, header, hunks in patch.hunks():
        for hunk in hunks:
            mini = tmp_dir / "hunk.patch"
            mini.write_text(header + hunk.text)
            if not apply_check(repo, mini):
                failing.append(f"{path} hunk #{hunk.index} {hunk.header.split(' @@')[0]} @@")
    return failing


def conflict_regions(repo: GitRepo, paths: list[str]) -> list[str]:
    regions = []
    for rel in paths:
        assert repo.work_tree is not None, "a conflict is in a work tree (git am does not run in a bare repository)"
        file = repo.work_tree / rel
        if not file.exists():
            regions.append(f"{rel}: (deleted on one side)")
            continue
        start = None
        for lineno, line in enumerate(file.read_text(errors="replace").splitlines(), 1):
            if line.startswith("<<<<<<<"):
                start = lineno
            elif line.startswith(">>>>>>>") and start is not None:
                regions.append(f"{rel}:{start}-{lineno}")
                start = None
    return regions


_NO_CHANGES = re.compile(r"No changes|Patch already applied|patch does not have a valid e-mail", re.I)


# ---- the classifier -------------------------------------------------------------------------


def classify_and_apply(
    repo: GitRepo, patch: PatchFile, patch_path: Path, base: str | None, tmp_dir: Path, *, keep: bool = True
) -> Result:
    """Classify ``patch`` against the work tree at HEAD and (if it applies) commit it with `git am`.

    The work tree must be clean. On return it is clean again, except for ``conflict``, where
    ``git am`` stays in progress. With ``keep=False`` an applied patch is undone again
    (used to classify a patch that is being dropped).
    """
    head = repo.must_rev_parse("HEAD")
    reverse = apply_check(repo, patch_path, reverse=True)
    forward = not reverse and apply_check(repo, patch_path)
    ours = series_commit(repo, patch, base)
    if ours and not forward:
        return Result(patch.name, Kind.ALREADY_APPLIED, _applied_detail(repo, patch, ours, reverse), ours)
    same = upstream_commit_with_same_change(repo, patch, base)
    if reverse:
        detail = "its change is already in the tree" + (f"; same change as upstream {same[:12]}" if same else "")
        return Result(patch.name, Kind.UPSTREAM_REVERSE, detail)
    if same and not forward:
        return Result(patch.name, Kind.UPSTREAM_PATCH_ID, f"same change as upstream commit {same[:12]}, changed since")
    missing = [f for f in patch.preexisting if not repo.path_exists("HEAD", f)]
    hunks = [] if forward else failing_hunks(repo, patch, tmp_dir)
    if forward:
        repo.run(*_AM, str(patch_path))
        result = Result(patch.name, Kind.APPLIES, _gone_again(ours, same), repo.must_rev_parse("HEAD"))
    else:
        result = _apply_three_way(repo, patch, patch_path, head, hunks, missing)
        if result.kind is not Kind.APPLIES_3WAY:
            return result
    if not keep:
        repo.run("reset", "-q", "--hard", head)
    return result


_AM = ("am", "--committer-date-is-author-date", "--quiet")


def _applied_detail(repo: GitRepo, patch: PatchFile, ours: str, reverse: bool) -> str:
    """Which commit of the series holds the patch, and (when it no longer reverse-applies) which later
    commits changed its files: usually later patches of the same series."""
    detail = f"from this series: commit {ours[:12]}"
    if reverse:
        return detail
    later = repo.out("rev-list", f"{ours}..HEAD", "--", *patch.files).split()
    shown = ", ".join(c[:12] for c in later[:3]) + (" ..." if len(later) > 3 else "")
    if later:
        return detail + f"; {len(later)} later commits changed its files ({shown})"
    return detail + "; it differs from the patch file (a three-way merge or an edit)"


def _gone_again(ours: str | None, same: str | None) -> str:
    """Detail of a patch that applies although a commit once made its change (reverted since)."""
    if ours:
        return f"commit {ours[:12]} of this series applied it once, but it is not in the tree any more"
    if same:
        return f"upstream {same[:12]} made this change once, but it is not in the tree any more"
    return ""


def _apply_three_way(repo: GitRepo, patch: PatchFile, patch_path: Path, head: str, hunks, missing) -> Result:
    """`git am -3`: applies-3way, or why not (absorbed upstream, target gone, conflict left in progress)."""
    status, out, err = repo.run(*_AM, "--3way", str(patch_path), check=False)
    if status == 0 and repo.must_rev_parse("HEAD") == head:
        # `git am -3` says "No changes -- Patch already applied." and commits nothing.
        return Result(patch.name, Kind.UPSTREAM_ABSORBED, "a three-way merge leaves nothing to change")
    if status == 0:
        return Result(
            patch.name,
            Kind.APPLIES_3WAY,
            f"{len(hunks)} hunks needed the merge" if hunks else "",
            repo.must_rev_parse("HEAD"),
            failing_hunks=hunks,
        )
    unmerged = repo.unmerged_paths()
    message = (out + err).strip()
    if not unmerged and not missing and _NO_CHANGES.search(message) and not repo.dirty_paths():
        repo.run("am", "--abort")
        return Result(patch.name, Kind.UPSTREAM_ABSORBED, "a three-way merge leaves nothing to change")
    if missing:
        if repo.am_in_progress():
            repo.run("am", "--abort")
        return Result(
            patch.name,
            Kind.TARGET_GONE,
            f"no longer in the tree: {', '.join(missing)}",
            missing_files=missing,
            failing_hunks=hunks,
        )
    regions = conflict_regions(repo, unmerged)
    detail = f"conflicts in {', '.join(unmerged)}" if unmerged else _last_error_line(message)
    return Result(
        patch.name, Kind.CONFLICT, detail, failing_hunks=hunks, conflict_regions=regions, conflicted_files=unmerged
    )


def _last_error_line(message: str) -> str:
    lines = [line for line in message.splitlines() if line.strip().startswith(("error:", "fatal:"))]
    return (lines[0] if lines else message.splitlines()[0] if message else "git am failed").strip()
