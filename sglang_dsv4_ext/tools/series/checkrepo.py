"""The series against a git checkout: check in a scratch worktree, apply onto HEAD, export.

``check`` never touches the user's work tree: it adds a temporary, sparse ``git worktree``
(only the files the series touches) detached at the ref, classifies every patch there
(conflicting patches are skipped so the rest can still be classified) and removes the worktree
again.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sglang_dsv4_ext.errors import RebaseError

from . import export as export_mod
from .classify import Kind, Result, classify_and_apply
from .gitrepo import GitRepo
from .guards import protect_series_dir, refuse_busy_or_dirty
from .layout import refuse_foreign_tree
from .pin import given_wheel, pin_for, updated_pin
from .series import Series, SeriesError, format_tombstone, load_series, tombstone_path

Progress = Callable[[str], None]


def classify_in_scratch_worktree(repo_path: Path, series: Series, onto: str, progress: Progress) -> list[Result]:
    repo = GitRepo(repo_path)
    sha = repo.rev_parse(onto)
    if sha is None:
        raise RebaseError(f"{onto!r} does not name a commit in {repo.path}")
    refuse_foreign_tree(repo, sha, onto)
    base = repo.rev_parse(series.pin["tag"]) if series.pin.get("tag") else None
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="dsv4-patches-check-") as tmp:
        scratch = Path(tmp) / "worktree"
        progress(f"checking {len(series.patches)} patches against {onto} ({sha[:12]}) in a scratch worktree")
        repo.run("worktree", "add", "--quiet", "--no-checkout", "--detach", str(scratch), sha)
        try:
            work = GitRepo(scratch)
            # Only the files the series touches are checked out (a sparse checkout): SGLang has
            # thousands of files and the checks read a handful. The pattern file is private to
            # this worktree and core.sparseCheckout is given on the command line only, so the
            # user's repository configuration is not changed.
            paths = sorted({f for p in series.patches for f in p.files})
            sparse = scratch / work.out("rev-parse", "--git-path", "info/sparse-checkout")
            sparse.parent.mkdir(parents=True, exist_ok=True)
            sparse.write_text("".join(f"/{p}\n" for p in paths))
            work.run("-c", "core.sparseCheckout=true", "read-tree", "-mu", "HEAD")
            for n, patch in enumerate(series.patches, 1):
                result = classify_and_apply(work, patch, patch.path, base, Path(tmp))
                if work.am_in_progress():  # conflict: skip it so later patches are still checked
                    work.run("am", "--abort")
                progress(f"[{n}/{len(series.patches)}] {patch.name}: {result.describe()}")
                results.append(result)
        finally:
            repo.run("worktree", "remove", "--force", str(scratch), check=False)
            shutil.rmtree(scratch, ignore_errors=True)
            repo.run("worktree", "prune", check=False)
    return results


def apply_to_checkout(repo_path: Path, series: Series, progress: Progress) -> tuple[list[Result], str | None]:
    """`git am -3` each patch onto the checked-out branch; patches already present are skipped.

    Returns (results, message when it stopped). A conflict leaves `git am` in progress."""
    repo = GitRepo(repo_path)
    refuse_busy_or_dirty(repo)
    head_ref, head = refuse_detached_or_unborn(repo, *repo.head_state())
    refuse_foreign_tree(repo, head, "HEAD")
    try:
        return _apply_each(repo, series, progress)
    except Exception:
        _restore(repo, head_ref, head)  # an unexpected failure leaves the repository as it was
        raise


def refuse_detached_or_unborn(repo: GitRepo, head_ref: str | None, head: str | None) -> tuple[str, str]:
    """`apply` commits onto the checked-out branch: a detached HEAD would get the commits on no
    branch (lost at the next checkout), so it is refused with the way to make a branch there."""
    if head is None:
        raise RebaseError(f"{repo.path} has no commits yet; check out SGLang there first (nothing was changed)")
    if head_ref is None:
        where = repo.out("describe", "--tags", "--always", head)
        raise RebaseError(
            f"HEAD of {repo.path} is detached at {where} ({head[:12]}): apply commits each patch onto the checked-out "
            f"branch, and commits on a detached HEAD belong to no branch. Make a branch there first: "
            f"`git -C {repo.path} switch -c NAME` (or go back to a branch: `git -C {repo.path} switch -`), then "
            "apply again; nothing was changed."
        )
    return head_ref, head


def _restore(repo: GitRepo, head_ref: str | None, head: str) -> None:
    if repo.am_in_progress():
        repo.run("am", "--abort", check=False)
    repo.run("reset", "-q", "--hard", head, check=False)
    if head_ref:
        repo.run("symbolic-ref", "HEAD", head_ref, check=False)


def _apply_each(repo: GitRepo, series: Series, progress: Progress) -> tuple[list[Result], str | None]:
    base = repo.rev_parse(series.pin["tag"]) if series.pin.get("tag") else None
    results: list[Result] = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, patch in enumerate(series.patches, 1):
            result = classify_and_apply(repo, patch, patch.path, base, Path(tmp))
            progress(f"[{n}/{len(series.patches)}] {patch.name}: {result.describe()}")
            results.append(result)
            if result.kind in (Kind.CONFLICT, Kind.TARGET_GONE):
                lines = [f"stopped at {patch.path}: {result.describe()}"]
                lines += [f"  hunk that does not apply: {h}" for h in result.failing_hunks]
                lines += [f"  conflict region: {r}" for r in result.conflict_regions]
                if result.kind is Kind.CONFLICT:
                    lines.append(
                        f"`git am` is in progress in {repo.path}: resolve, `git add`, `git am --continue`, "
                        "then run `sglang-dsv4 patches apply` again (patches already present are "
                        "skipped); or `git am --abort`"
                    )
                else:
                    lines.append("the series needs a rebase onto this tree: `sglang-dsv4 patches rebase`")
                return results, "\n".join(lines)
    return results, None


@dataclass
class Exported:
    changed: list[str]  # series files that changed (or would, with check_only)
    pin_changes: list[str]  # per UPSTREAM_PIN field: changed, kept or left out, and why


def export_range(
    repo_path: Path,
    series_dir: Path,
    base: str | None,
    head: str,
    drops: dict[str, str],
    *,
    check_only: bool = False,
    progress: Progress = print,
    wheel: str | None = None,
    wheel_sha256: str | None = None,
) -> Exported:
    """Write commits base..head as the series; say which files changed (or would) and how the pin did.

    ``wheel`` / ``wheel_sha256``: the pin's wheel lines where the repository does not record them."""
    given = given_wheel(wheel, wheel_sha256)
    repo = GitRepo(repo_path)
    series = load_series(series_dir)
    base = base or series.pin.get("tag")
    if not base:
        raise SeriesError(f"{series_dir}: no UPSTREAM_PIN tag; give --base REF")
    base_sha = repo.must_rev_parse(base)
    head_sha = repo.must_rev_parse(head)
    refuse_foreign_tree(repo, base_sha, base)
    merges = repo.out("rev-list", "--merges", f"{base_sha}..{head_sha}")
    if merges:
        first = merges.split()[0][:12]
        raise SeriesError(f"{base}..{head} contains merge commits ({first} ...); a series must be linear")
    commits = repo.commits_between(base_sha, head_sha)
    names, unmatched = export_mod.name_commits_by_subject(repo, commits, series)
    for name, reason in drops.items():
        series.get(name)  # raises, naming the allowed patches
        if not reason.strip():
            raise SeriesError(f"--drop {name!r} needs --reason TEXT")
        if name in names:
            raise SeriesError(f"--drop {name!r}: that patch is still among the exported commits")
    silent = [n for n in unmatched if n not in drops]
    if silent:
        raise SeriesError(
            f"{', '.join(silent)} would leave the series: no commit in {base}..{head} has its subject. "
            "A patch is dropped only with --drop NAME --reason TEXT (or keep its subject unchanged)"
        )
    progress(f"exporting {len(commits)} commits of {base}..{head} ({head_sha[:12]})")
    rendered = export_mod.render_series(repo, commits, names)
    tombstones = {
        str(tombstone_path(series.directory, name).relative_to(series.directory)): format_tombstone(
            series.get(name), reason, f"export of {base}..{head}", "not exported"
        )
        for name, reason in drops.items()
    }
    pin = updated_pin(series.pin, pin_for(repo, base, base_sha), given)  # as a rebase onto `base` does
    files = export_mod.series_files(series.directory, rendered, pin.pin, tombstones)
    removed = list(drops)
    planned = export_mod.planned_changes(series.directory, files, removed)
    if check_only:
        return Exported(planned, pin.changes)
    protect_series_dir(series.directory, progress, planned)
    return Exported(export_mod.write_files(series.directory, files, removed), pin.changes)
