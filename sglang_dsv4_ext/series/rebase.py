"""Rebase the series onto a new upstream ref, stopping for a human where one is needed.

Start: ``rebase --onto REF``. The SGLang work tree must be clean (tracked files), and the
series directory must have no uncommitted changes, because the rebase rewrites it. The
series is copied into the state directory (``.git/dsv4-patches-rebase/`` of the SGLang
repository), HEAD is detached at REF and each patch is classified (:mod:`.classify`) and
committed in order.

It stops at the first patch that needs a decision: a conflict (``git am -3`` left in
progress), a patch already upstream, or a patch whose target files are gone. Then:

- ``--continue``: after resolving and ``git add``-ing a conflict (or staging/committing a
  hand port of a gone target), carry on with the next patch;
- ``--continue --drop NAME --reason TEXT``: drop the stopped patch (or any later one) and
  record a tombstone ``patches/dropped/NAME.tombstone``; nothing is ever dropped otherwise;
- ``--abort``: restore the repository's original HEAD, index and work tree exactly; the
  series directory was not written and stays as it was.

When every patch is through, the new series is exported deterministically (:mod:`.export`),
the pin is moved to REF, and a report (table + range-diff) is printed.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

from sglang_dsv4_ext.errors import RebaseError

from . import export as export_mod
from . import rangediff
from .classify import APPLIED_KINDS, STOP_KINDS, UPSTREAM_KINDS, Kind, Result, classify_and_apply
from .gitcmd import run_git_in
from .gitrepo import GitRepo
from .layout import refuse_foreign_tree
from .pin import pin_for, pin_report, updated_pin
from .series import (
    PIN_FILE,
    SERIES_FILE,
    PatchFile,
    Series,
    format_tombstone,
    load_series,
    tombstone_path,
)

STATE_DIRNAME = "dsv4-patches-rebase"
STATE_VERSION = 1
Progress = Callable[[str], None]



@dataclass
class State:
    repo: str
    series_dir: str
    onto: str
    onto_sha: str
    old_base: Optional[str]
    old_base_sha: Optional[str]
    orig_head_ref: Optional[str]
    orig_head_sha: str
    names: List[str]
    drops: Dict[str, str] = field(default_factory=dict)
    results: List[Dict] = field(default_factory=list)
    stop_index: Optional[int] = None
    stop_head: Optional[str] = None
    version: int = STATE_VERSION


@dataclass
class Outcome:
    finished: bool
    results: List[Result]
    stopped: Optional[Result] = None
    message: str = ""
    report: str = ""
    changed_files: List[str] = field(default_factory=list)


def _state_dir(repo: GitRepo) -> Path:
    return repo.git_dir / STATE_DIRNAME


def in_progress(repo: GitRepo) -> bool:
    return (_state_dir(repo) / "state.json").exists()


def load_state(repo: GitRepo) -> State:
    path = _state_dir(repo) / "state.json"
    if not path.exists():
        raise RebaseError(f"no patch-series rebase is in progress in {repo.path}")
    data = json.loads(path.read_text())
    if data.get("version") != STATE_VERSION:
        raise RebaseError(
            f"{path}: written by an incompatible version of this tool (state version {data.get('version')})"
        )
    return State(**data)


def _save_state(repo: GitRepo, state: State) -> None:
    path = _state_dir(repo) / "state.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state.__dict__, indent=1, sort_keys=True))
    tmp.replace(path)


def _snapshot_dir(repo: GitRepo) -> Path:
    return _state_dir(repo) / "series"


def _snapshot_series(repo: GitRepo) -> Series:
    return load_series(_snapshot_dir(repo))


# ---- guards ---------------------------------------------------------------------------------

_BUSY_MARKERS = {
    "rebase-merge": "a git rebase", "rebase-apply": "a git am or rebase", "MERGE_HEAD": "a merge",
    "CHERRY_PICK_HEAD": "a cherry-pick", "REVERT_HEAD": "a revert", "BISECT_LOG": "a bisect",
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
            f"{repo.path} has uncommitted changes in: {shown}. Commit or stash them first; "
            "nothing was changed."
        )


def series_dir_changes(series_dir: Path) -> Optional[List[str]]:
    """Uncommitted changes (untracked included) under the series directory when it is in a git
    work tree; None when it is not version-controlled."""
    status, out, _ = run_git_in(series_dir, ["rev-parse", "--show-toplevel"], check=False,
                                env={"GIT_CEILING_DIRECTORIES": ""})
    if status != 0:
        return None
    top = GitRepo(out.strip())
    out = top.run("status", "--porcelain=v1", "--untracked-files=all", "-z", "--", str(Path(series_dir).resolve()))[1]
    return [entry[3:] for entry in out.split("\0") if entry]


def protect_series_dir(series_dir: Path, progress: Progress, rewritten: Optional[List[str]] = None) -> Optional[Path]:
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


def _validate_drops(drops: Dict[str, str], names: List[str], series_dir: Path) -> None:
    for name, reason in drops.items():
        if name not in names:
            raise RebaseError(
                f"--drop {name!r}: no such patch in {series_dir / SERIES_FILE}; patches: {', '.join(names) or '(none)'}"
            )
        if not reason or not reason.strip():
            raise RebaseError(f"--drop {name!r} needs --reason TEXT saying why it leaves the series")


# ---- start / continue / abort -----------------------------------------------------------------


def start(
    repo_path: Path, series_dir: Path, onto: str, drops: Optional[Dict[str, str]] = None, progress: Progress = print
) -> Outcome:
    repo = GitRepo(repo_path)
    if in_progress(repo):
        raise RebaseError(
            f"a patch-series rebase is already in progress in {repo.path}; use --continue or --abort"
        )
    refuse_busy_or_dirty(repo)
    series_dir = Path(series_dir).resolve()
    series = load_series(series_dir)  # a corrupt patch stops us here, before anything changes
    drops = dict(drops or {})
    _validate_drops(drops, series.names, series_dir)
    onto_sha = repo.rev_parse(onto)
    if onto_sha is None:
        tags = ", ".join(repo.tags()[-8:]) or "(none)"
        raise RebaseError(f"--onto {onto!r} does not name a commit in {repo.path}; tags: {tags}")
    refuse_foreign_tree(repo, onto_sha, onto)
    old_base = series.pin.get("tag") or None
    old_base_sha = repo.rev_parse(old_base) if old_base else None
    head_ref, head_sha = repo.head_state()
    if head_sha is None:
        raise RebaseError(f"{repo.path} has no commits yet")
    protect_series_dir(series_dir, progress)  # last: a refusal above leaves no backup behind

    state_dir = _state_dir(repo)
    snapshot = _snapshot_dir(repo)
    snapshot.mkdir(parents=True)
    try:
        for name in [*series.names, SERIES_FILE, PIN_FILE]:
            if (series_dir / name).exists():
                shutil.copy2(series_dir / name, snapshot / name)
        state = State(
            repo=str(repo.path), series_dir=str(series_dir), onto=onto, onto_sha=onto_sha,
            old_base=old_base, old_base_sha=old_base_sha, orig_head_ref=head_ref, orig_head_sha=head_sha,
            names=series.names, drops=drops,
        )
        _save_state(repo, state)
        progress(f"rebasing {len(series.names)} patches from {old_base or '(no pin)'} onto {onto} ({onto_sha[:12]})")
        repo.run("checkout", "-q", "--detach", onto_sha)
    except Exception:
        shutil.rmtree(state_dir, ignore_errors=True)
        raise
    return _run(repo, state, 0, progress)


def continue_(repo_path: Path, drops: Optional[Dict[str, str]] = None, progress: Progress = print) -> Outcome:
    repo = GitRepo(repo_path)
    state = load_state(repo)
    drops = dict(drops or {})
    _validate_drops(drops, state.names, Path(state.series_dir))
    stop = state.stop_index if state.stop_index is not None else len(state.results)
    done = {r["name"] for r in state.results[:stop]}
    late = sorted(set(drops) & done)
    if late:
        raise RebaseError(
            f"--drop {', '.join(late)}: already handled earlier in this rebase; --abort and start again with the drop"
        )
    state.drops.update(drops)
    if state.stop_index is None:  # interrupted between patches (e.g. killed): just go on
        _save_state(repo, state)
        return _run(repo, state, len(state.results), progress)
    index = state.stop_index
    name = state.names[index]
    stopped = Result.from_json(state.results[index])
    patch = _snapshot_series(repo).get(name)
    if name in state.drops:
        if repo.am_in_progress():
            repo.run("am", "--abort")
        repo.run("reset", "-q", "--hard", state.stop_head)
        state.results[index] = Result(name, Kind.DROPPED, f"was {stopped.kind.value}",
                                      reason=state.drops[name]).to_json()
        progress(f"[{index + 1}/{len(state.names)}] {name}: dropped -- {state.drops[name]}")
    elif repo.am_in_progress():
        unresolved = repo.unmerged_paths()
        if unresolved:
            raise RebaseError(
                f"{name}: conflicts are still unresolved in {', '.join(unresolved)}; edit them, `git add` "
                f"them in {repo.path}, then --continue (or --continue --drop {name} --reason TEXT, or --abort)"
            )
        status, out, err = repo.run("am", "--continue", check=False)
        if status != 0:
            message = (out + err).strip()
            if re.search(r"No changes", message):
                raise RebaseError(
                    f"{name}: the resolution leaves no change, so upstream absorbed this patch (or the "
                    f"resolution dropped it). Check why; if upstream has it, drop it: --continue --drop {name} "
                    "--reason TEXT"
                )
            raise RebaseError(f"{name}: git am --continue failed: {message}")
        state.results[index] = Result(name, Kind.RESOLVED, f"conflict resolved by hand (was {stopped.kind.value})",
                                      repo.must_rev_parse("HEAD")).to_json()
        progress(f"[{index + 1}/{len(state.names)}] {name}: resolved")
    else:
        commit = _take_hand_port(repo, state, patch)
        if commit is None:
            hint = (
                f"drop it: --continue --drop {name} --reason TEXT"
                if stopped.kind in UPSTREAM_KINDS
                else "port it by hand (edit, `git add`, then --continue) or drop it: "
                f"--continue --drop {name} --reason TEXT"
            )
            raise RebaseError(f"{name} stopped as {stopped.describe()}; nothing to continue with: {hint}")
        state.results[index] = Result(name, Kind.RESOLVED, f"ported by hand (was {stopped.kind.value})",
                                      commit).to_json()
        progress(f"[{index + 1}/{len(state.names)}] {name}: ported by hand")
    state.stop_index = None
    state.stop_head = None
    _save_state(repo, state)
    return _run(repo, state, index + 1, progress)


def _take_hand_port(repo: GitRepo, state: State, patch: PatchFile) -> Optional[str]:
    """A hand port of a stopped patch: one commit made by the user, or staged changes that we
    commit with the patch's author, date and message."""
    head = repo.must_rev_parse("HEAD")
    if head != state.stop_head:
        new = repo.commits_between(state.stop_head, head)
        if len(new) != 1 or repo.dirty_paths():
            raise RebaseError(
                f"{patch.name}: expected exactly one new commit (the port) on top of {state.stop_head[:12]} "
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
    with tempfile.TemporaryDirectory() as tmp:
        msg, body = Path(tmp) / "msg", Path(tmp) / "patch"
        info = repo.run("mailinfo", str(msg), str(body), stdin=patch.text)[1]
        meta = dict(line.split(": ", 1) for line in info.splitlines() if ": " in line)
        message = meta.get("Subject", patch.subject) + "\n\n" + msg.read_text()
        repo.run(
            "commit", "-q", "--no-verify", "-F", "-", stdin=message,
            env={
                "GIT_AUTHOR_NAME": meta.get("Author", ""), "GIT_AUTHOR_EMAIL": meta.get("Email", ""),
                "GIT_AUTHOR_DATE": meta.get("Date", ""), "GIT_COMMITTER_DATE": meta.get("Date", ""),
            },
        )
    return repo.must_rev_parse("HEAD")


def abort(repo_path: Path, progress: Progress = print) -> str:
    repo = GitRepo(repo_path)
    state = load_state(repo)
    if repo.am_in_progress():
        repo.run("am", "--abort")
    if state.orig_head_ref:
        branch = state.orig_head_ref
        if branch.startswith("refs/heads/"):
            branch = branch[len("refs/heads/"):]
        repo.run("checkout", "-q", "-f", branch)
    else:
        repo.run("checkout", "-q", "-f", "--detach", state.orig_head_sha)
    if repo.head_state()[1] != state.orig_head_sha:  # the branch moved during the stop: put it back
        repo.run("reset", "-q", "--hard", state.orig_head_sha)
    changed = _series_dir_drift(repo, state)
    shutil.rmtree(_state_dir(repo))
    where = state.orig_head_ref or f"detached HEAD {state.orig_head_sha[:12]}"
    message = f"rebase aborted; {repo.path} is back on {where} ({state.orig_head_sha[:12]})"
    if changed:
        message += (f"; note: {', '.join(changed)} in {state.series_dir} changed during the rebase "
                    "and were left as they are")
    progress(message)
    return message


def _series_dir_drift(repo: GitRepo, state: State) -> List[str]:
    snapshot = _snapshot_dir(repo)
    series_dir = Path(state.series_dir)
    drift = []
    for path in sorted(snapshot.iterdir()):
        live = series_dir / path.name
        if not live.exists() or live.read_bytes() != path.read_bytes():
            drift.append(path.name)
    return drift


# ---- the loop and the finish ------------------------------------------------------------------


def _run(repo: GitRepo, state: State, first: int, progress: Progress) -> Outcome:
    series = _snapshot_series(repo)
    total = len(state.names)
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(first, total):
            name = state.names[index]
            patch = series.get(name)
            if name in state.drops:
                probe = classify_and_apply(repo, patch, patch.path, state.old_base_sha, Path(tmp), keep=False)
                if repo.am_in_progress():
                    repo.run("am", "--abort")
                result = Result(name, Kind.DROPPED, f"was {probe.kind.value}", reason=state.drops[name])
            else:
                result = classify_and_apply(repo, patch, patch.path, state.old_base_sha, Path(tmp))
            _record(state, index, result)
            progress(f"[{index + 1}/{total}] {name}: {result.describe()}")
            if result.kind in STOP_KINDS:
                state.stop_index = index
                state.stop_head = repo.must_rev_parse("HEAD")
                _save_state(repo, state)
                results = [Result.from_json(r) for r in state.results]
                return Outcome(False, results, result, stop_message(repo, result))
            _save_state(repo, state)
    return _finish(repo, state, progress)


def _record(state: State, index: int, result: Result) -> None:
    if index < len(state.results):
        state.results[index] = result.to_json()
    else:
        state.results.append(result.to_json())


def stop_message(repo: GitRepo, result: Result) -> str:
    name = result.name
    lines = [f"stopped at {name}: {result.describe()}"]
    for hunk in result.failing_hunks:
        lines.append(f"  hunk that does not apply: {hunk}")
    for region in result.conflict_regions:
        lines.append(f"  conflict region: {region}")
    if result.kind is Kind.CONFLICT:
        lines.append(
            f"resolve the conflicts in {repo.path}, `git add` the files, then "
            "`sglang-dsv4 patches rebase --continue`"
        )
    elif result.kind is Kind.TARGET_GONE:
        lines.append(
            f"port the change by hand in {repo.path} (edit, `git add`), then "
            "`sglang-dsv4 patches rebase --continue`"
        )
    if result.kind is Kind.ALREADY_APPLIED:
        lines.append(
            "the ref to rebase onto already holds this patch of the series, so the rebase would export nothing "
            "for it: abort (below), then rebase onto the upstream release (`--onto <upstream tag>`)"
        )
    elif result.kind in UPSTREAM_KINDS:
        lines.append(
            f"upstream already has this change; retire the patch, saying where upstream took it: "
            f"`sglang-dsv4 patches rebase --continue --drop {name} --reason TEXT`"
        )
    else:
        lines.append(f"or drop it: `sglang-dsv4 patches rebase --continue --drop {name} --reason TEXT`")
    lines.append("or give up and restore everything: `sglang-dsv4 patches rebase --abort`")
    return "\n".join(lines)


def _finish(repo: GitRepo, state: State, progress: Progress) -> Outcome:
    results = [Result.from_json(r) for r in state.results]
    snapshot = _snapshot_series(repo)
    series_dir = Path(state.series_dir)
    kept = [r for r in results if r.kind in APPLIED_KINDS]
    head = repo.must_rev_parse("HEAD")
    commits = repo.commits_between(state.onto_sha, head)
    if commits != [r.commit for r in kept]:
        raise RebaseError(
            f"HEAD of {repo.path} does not hold exactly the rebased patches (expected {len(kept)} commits "
            f"on {state.onto_sha[:12]}, found {len(commits)}); fix HEAD or --abort"
        )
    progress(f"exporting {len(kept)} patches to {series_dir}")
    rendered = export_mod.render_series(repo, commits, [r.name for r in kept])
    tombstones = {}
    dropped_on = f"{state.onto} ({state.onto_sha[:12]})"
    for r in results:
        if r.kind is Kind.DROPPED:
            stone = tombstone_path(series_dir, r.name).relative_to(series_dir)
            was = r.detail[len("was "):] if r.detail.startswith("was ") else r.detail
            tombstones[str(stone)] = format_tombstone(snapshot.get(r.name), state.drops[r.name], dropped_on, was)
    removed = [r.name for r in results if r.kind is Kind.DROPPED]
    pin = updated_pin(snapshot.pin, pin_for(repo, state.onto, state.onto_sha), {})
    files = export_mod.series_files(series_dir, rendered, pin.pin, tombstones)
    drift = _series_dir_drift(repo, state)
    if drift:
        raise RebaseError(
            f"{', '.join(drift)} in {series_dir} changed while the rebase was stopped; refusing to overwrite "
            "them. Commit or revert those edits, then --continue again (or --abort)"
        )
    text = rangediff.report(
        repo, results, old_label=state.old_base or "(unpinned)", new_label=state.onto,
        old_base=state.old_base_sha, old_patches=snapshot.patches, new_base=state.onto_sha, new_tip=head,
    )
    changed = export_mod.write_files(series_dir, files, removed)
    repo.run("update-ref", "-m", "sglang-dsv4 patches rebase", "refs/dsv4-patches/last-rebase", head)
    shutil.rmtree(_state_dir(repo))
    message = (
        f"rebase done: {len(kept)} patches on {state.onto} ({state.onto_sha[:12]}), "
        f"{len(removed)} dropped; HEAD of {repo.path} is the patched tree ({head[:12]}, detached); "
        f"{len(changed)} files changed in {series_dir}"
    ) + _way_back(repo, state) + "".join(f"\n{line}" for line in pin_report(pin.changes))
    return Outcome(True, results, None, message, text, changed)


def _way_back(repo: GitRepo, state: State) -> str:
    """How to keep the detached, patched HEAD on a branch, and how to return to where the rebase started."""
    ref = state.orig_head_ref
    back = ref[len("refs/heads/"):] if ref and ref.startswith("refs/heads/") else f"--detach {state.orig_head_sha[:12]}"
    return f"\nto keep it on a branch: `git -C {repo.path} switch -c NAME`; back to where you were: " \
           f"`git -C {repo.path} switch {back}`"
