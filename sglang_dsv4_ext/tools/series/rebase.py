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
the pin is moved to REF, and a report (table + range-diff) is printed. ``--into DIR`` writes
the new series there instead, next to the old one, which stays as it is (one series per
release). At every stop the commit message of the patch is in the state directory's
``MESSAGE`` file: an edit there is the resolved commit's message (say what the patch does
differently on this release).

``--resolutions DIR`` keeps a resolution record (:mod:`.resolutions`): git rerere (off
otherwise) records each conflict resolved here and replays each one recorded there, and the
resolution's edits beyond the conflicted files and its message are recorded too. A patch whose
stop the record resolves completely goes through without stopping, so the same rebase
replays on a fresh clone.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sglang_dsv4_ext.errors import RebaseError
from sglang_dsv4_ext.tools.tool_support import stop_signals

from . import export as export_mod
from . import rangediff, resolutions, stops
from .classify import APPLIED_KINDS, STOP_KINDS, UPSTREAM_KINDS, Kind, Result, classify_and_apply
from .gitcmd import RERERE_CONFIG
from .gitrepo import GitRepo
from .guards import protect_series_dir, refuse_busy_or_dirty
from .layout import refuse_foreign_tree
from .pin import pin_for, pin_report, updated_pin
from .series import (
    PIN_FILE,
    SERIES_FILE,
    PatchFile,
    Series,
    format_tombstone,
    load_series,
    series_header,
    tombstone_path,
)

STATE_DIRNAME = "dsv4-patches-rebase"
STATE_VERSION = 2
Progress = Callable[[str], None]


@dataclass
class State:
    repo: str
    series_dir: str
    onto: str
    onto_sha: str
    old_base: str | None
    old_base_sha: str | None
    orig_head_ref: str | None
    orig_head_sha: str
    names: list[str]
    drops: dict[str, str] = field(default_factory=dict)
    results: list[dict] = field(default_factory=list)
    stop_index: int | None = None
    stop_head: str | None = None
    into: str = ""  # where the new series is written (the series directory itself by default)
    edit_names: list[str] = field(default_factory=list)  # --edit: stop after these apply, to change them
    record: str | None = None  # the resolution record directory (--resolutions), if any
    merge_tree: str | None = None  # at a conflict stop with a record: the merge's tree (resolutions.merge_tree)
    stop_conflicts: list[str] = field(default_factory=list)  # the files that conflicted at the stop
    guarded: dict[str, dict[str, str]] = field(default_factory=dict)  # directory -> file -> sha256 at the start
    # HEAD when the state was last saved between patches: a step killed before its save is rolled back to it
    step_head: str | None = None
    version: int = STATE_VERSION


@dataclass
class Outcome:
    finished: bool
    results: list[Result]
    stopped: Result | None = None
    message: str = ""
    report: str = ""
    changed_files: list[str] = field(default_factory=list)


def _state_dir(repo: GitRepo) -> Path:
    return repo.git_dir / STATE_DIRNAME


def in_progress(repo: GitRepo) -> bool:
    return (_state_dir(repo) / "state.json").exists()


def open_repo(repo_path: Path) -> GitRepo:
    """The repository of a rebase in progress, with git rerere on when the rebase keeps a record."""
    repo = GitRepo(repo_path)
    if in_progress(repo) and load_state(repo).record:
        return GitRepo(repo_path, config=RERERE_CONFIG)
    return repo


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


def _validate_drops(drops: dict[str, str], names: list[str], series_dir: Path) -> None:
    for name, reason in drops.items():
        if name not in names:
            raise RebaseError(
                f"--drop {name!r}: no such patch in {series_dir / SERIES_FILE}; patches: {', '.join(names) or '(none)'}"
            )
        if not reason or not reason.strip():
            raise RebaseError(f"--drop {name!r} needs --reason TEXT saying why it leaves the series")


# ---- start / continue / abort -----------------------------------------------------------------


def start(
    repo_path: Path,
    series_dir: Path,
    onto: str,
    drops: dict[str, str] | None = None,
    progress: Progress = print,
    *,
    into: Path | None = None,
    record: Path | None = None,
    edits: Sequence[str] = (),
) -> Outcome:
    """Rebase the series in ``series_dir`` onto ``onto``; write the new series to ``into`` (default:
    ``series_dir`` itself) and, with ``record``, keep and replay a resolution record there.
    ``edits``: patches to stop after, once they applied, to change them (``--edit``)."""
    repo = GitRepo(repo_path)
    if in_progress(repo):
        raise RebaseError(f"a patch-series rebase is already in progress in {repo.path}; use --continue or --abort")
    refuse_busy_or_dirty(repo)
    series_dir = Path(series_dir).resolve()
    series = load_series(series_dir)  # a corrupt patch stops us here, before anything changes
    into = Path(into).resolve() if into is not None else series_dir
    record = resolutions.check_record_dir(record) if record is not None else None
    drops = dict(drops or {})
    _validate_drops(drops, series.names, series_dir)
    _validate_edits(list(edits), series.names, drops, series_dir)
    onto_sha = repo.rev_parse(onto)
    if onto_sha is None:
        tags = ", ".join(repo.tags()[-8:]) or "(none)"
        raise RebaseError(f"--onto {onto!r} does not name a commit in {repo.path}; tags: {tags}")
    refuse_foreign_tree(repo, onto_sha, onto)
    if repo.head_state()[1] is None:
        raise RebaseError(f"{repo.path} has no commits yet")
    _protect_outputs(series_dir, into, record, progress)  # last: a refusal above leaves no backup behind

    with _signals_held():  # the setup is done whole (state saved, HEAD detached) before a signal ends it
        state = _begin(repo, series, series_dir, onto, onto_sha, drops, into, record, edits, progress)
    return _run(GitRepo(repo.path, config=RERERE_CONFIG) if record is not None else repo, state, 0, progress)


def _begin(repo, series, series_dir, onto, onto_sha, drops, into, record, edits, progress) -> State:
    """The state directory, the series' snapshot, the saved state and HEAD detached at the new base."""
    old_base = series.pin.get("tag") or None
    old_base_sha = repo.rev_parse(old_base) if old_base else None
    head_ref, head_sha = repo.head_state()
    state_dir = _state_dir(repo)
    snapshot = _snapshot_dir(repo)
    snapshot.mkdir(parents=True)
    try:
        for name in [*series.names, SERIES_FILE, PIN_FILE]:
            if (series_dir / name).exists():
                shutil.copy2(series_dir / name, snapshot / name)
        state = State(
            repo=str(repo.path),
            series_dir=str(series_dir),
            onto=onto,
            onto_sha=onto_sha,
            old_base=old_base,
            old_base_sha=old_base_sha,
            orig_head_ref=head_ref,
            orig_head_sha=head_sha,
            names=series.names,
            drops=drops,
            into=str(into),
            record=str(record) if record else None,
            edit_names=list(edits),
            guarded={str(d): _digests(d) for d in {into, record} - {None, series_dir}},
            step_head=onto_sha,
        )
        _save_state(repo, state)
        if record is not None:
            resolutions.begin(repo, record, state_dir)
            repo = GitRepo(repo.path, config=RERERE_CONFIG)
        progress(
            f"rebasing {len(series.names)} patches from {old_base or '(no pin)'} onto {onto} ({onto_sha[:12]})"
            + (f"; new series in {into}" if into != series_dir else "")
            + (f"; resolution record {record}" if record else "")
        )
        repo.run("checkout", "-q", "--detach", onto_sha)
    except Exception:
        if record is not None:
            resolutions.end(repo, state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)
        raise
    return state


def _validate_edits(edits: list[str], names: list[str], drops: dict[str, str], series_dir: Path) -> None:
    for name in edits:
        if name not in names:
            raise RebaseError(
                f"--edit {name!r}: no such patch in {series_dir / SERIES_FILE}; patches: {', '.join(names) or '(none)'}"
            )
        if name in drops:
            raise RebaseError(f"--edit {name!r} and --drop {name!r}: a dropped patch cannot be edited")


def _protect_outputs(series_dir: Path, into: Path, record: Path | None, progress: Progress) -> None:
    """The directories the rebase writes when it finishes: no uncommitted changes in any (a backup of
    one git does not track); the old series is written only when it is the one rewritten."""
    for directory in dict.fromkeys([into, record]):
        if directory is not None and directory.exists():
            protect_series_dir(directory, progress)


def _digests(directory: Path | None) -> dict[str, str]:
    if directory is None or not directory.is_dir():
        return {}
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def continue_(repo_path: Path, drops: dict[str, str] | None = None, progress: Progress = print) -> Outcome:
    repo = open_repo(repo_path)
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
    with _signals_held():  # the stop is taken (committed or dropped) and saved whole
        first = _resume(repo, state, progress)
    return _run(repo, state, first, progress)


def _resume(repo: GitRepo, state: State, progress: Progress) -> int:
    """Take the stop (or an interruption between patches) and save; the index of the next patch to run."""
    if state.stop_index is None:  # interrupted between patches (a signal, or killed): go on from the last save
        _roll_back_unsaved_step(repo, state, progress)
        _save_state(repo, state)
        return len(state.results)
    index = state.stop_index
    name = state.names[index]
    stopped = Result.from_json(state.results[index])
    patch = _snapshot_series(repo).get(name)
    if name in state.drops:
        if repo.am_in_progress():
            repo.run("am", "--abort")
        # An --edit stop is after the patch's commit: dropping it goes back to before that commit.
        edit_stop = stopped.kind in (Kind.APPLIES, Kind.APPLIES_3WAY) and stopped.commit == state.stop_head
        repo.run("reset", "-q", "--hard", f"{state.stop_head}^" if edit_stop else _stop_head(state))
        result = Result(name, Kind.DROPPED, f"was {stopped.kind.value}", reason=state.drops[name])
        progress(f"[{index + 1}/{len(state.names)}] {name}: dropped -- {state.drops[name]}")
    elif repo.am_in_progress():
        result = _continue_conflict(repo, state, patch, stopped)
        progress(f"[{index + 1}/{len(state.names)}] {name}: resolved")
    elif stopped.kind in (Kind.APPLIES, Kind.APPLIES_3WAY):
        result = _continue_edit(repo, state, patch, stopped)
        progress(f"[{index + 1}/{len(state.names)}] {name}: {result.describe()}")
    else:
        result = _continue_hand_port(repo, state, patch, stopped)
        progress(f"[{index + 1}/{len(state.names)}] {name}: ported by hand")
    state.results[index] = result.to_json()
    state.stop_index = None
    state.stop_head = None
    state.merge_tree = None
    state.stop_conflicts = []
    state.step_head = repo.must_rev_parse("HEAD")
    _save_state(repo, state)
    return index + 1


def _roll_back_unsaved_step(repo: GitRepo, state: State, progress: Progress) -> None:
    """A step the process did not live to save (killed by a signal no handler sees) may have left a `git am`
    session or a commit the state does not list: both are undone, so the state and the commits agree and the
    patch is applied again (it would otherwise read "already-applied", its own commit taken for upstream's)."""
    if state.step_head is None:
        return  # a state from before step heads were recorded: nothing to compare with
    if repo.am_in_progress():
        repo.run("am", "--abort")
    head = repo.must_rev_parse("HEAD")
    if head != state.step_head:
        repo.run("reset", "-q", "--hard", state.step_head)
        progress(
            f"the step in progress when the rebase was interrupted was not saved: HEAD {head[:12]} reset to "
            f"{state.step_head[:12]}, where the state left off"
        )


def _continue_conflict(repo: GitRepo, state: State, patch: PatchFile, stopped: Result) -> Result:
    """A conflict the human resolved: commit it (with the edited message), and record it."""
    unresolved = repo.unmerged_paths()
    if unresolved:
        raise RebaseError(
            f"{patch.name}: conflicts are still unresolved in {', '.join(unresolved)}; edit them, `git add` "
            f"them in {repo.path}, then --continue (or --continue --drop {patch.name} --reason TEXT, or --abort)"
        )
    message = stops.edited_message(_state_dir(repo), repo, patch)
    commit = stops.am_continue(repo, patch)
    if message is not None:
        commit = stops.amend(repo, patch, message)
    detail = f"conflict resolved by hand (was {stopped.kind.value})"
    if state.record and state.merge_tree:
        edits = resolutions.edits_since_merge(repo, state.merge_tree, commit, state.stop_conflicts)
        resolutions.keep_pending(_state_dir(repo), patch.name, edits, message)
        detail += "; recorded"
    return Result(patch.name, Kind.RESOLVED, detail, commit)


def _stop_head(state: State) -> str:
    """The HEAD the rebase stopped at (every stop records it; a state file without it is not one we wrote)."""
    if state.stop_head is None:
        raise RebaseError(
            "the rebase state has a stop without its HEAD (not written by sglang-dsv4 patches?); "
            "--abort and start again"
        )
    return state.stop_head


def _continue_edit(repo: GitRepo, state: State, patch: PatchFile, stopped: Result) -> Result:
    """An ``--edit`` stop: the applied patch, amended with what was staged and the edited message."""
    message = stops.edited_message(_state_dir(repo), repo, patch)
    commit = stops.take_edit(repo, _stop_head(state), patch, message)
    if commit == state.stop_head:
        return Result(patch.name, stopped.kind, stopped.detail, commit, failing_hunks=stopped.failing_hunks)
    if state.record:
        edits = resolutions.edits_since_merge(repo, _stop_head(state), commit, [])
        resolutions.keep_pending(_state_dir(repo), patch.name, edits, message)
    return Result(
        patch.name,
        Kind.RESOLVED,
        f"edited after it applied (was {stopped.kind.value})" + ("; recorded" if state.record else ""),
        commit,
    )


def _continue_hand_port(repo: GitRepo, state: State, patch: PatchFile, stopped: Result) -> Result:
    message = stops.edited_message(_state_dir(repo), repo, patch)
    commit = stops.take_hand_port(repo, _stop_head(state), patch, message)
    if commit is None:
        name = patch.name
        hint = (
            f"drop it: --continue --drop {name} --reason TEXT"
            if stopped.kind in UPSTREAM_KINDS
            else "port it by hand (edit, `git add`, then --continue) or drop it: "
            f"--continue --drop {name} --reason TEXT"
        )
        raise RebaseError(f"{name} stopped as {stopped.describe()}; nothing to continue with: {hint}")
    return Result(patch.name, Kind.RESOLVED, f"ported by hand (was {stopped.kind.value})", commit)


def abort(repo_path: Path, progress: Progress = print) -> str:
    repo = open_repo(repo_path)
    state = load_state(repo)
    if repo.am_in_progress():
        repo.run("am", "--abort")
    if state.orig_head_ref:
        branch = state.orig_head_ref
        if branch.startswith("refs/heads/"):
            branch = branch[len("refs/heads/") :]
        repo.run("checkout", "-q", "-f", branch)
    else:
        repo.run("checkout", "-q", "-f", "--detach", state.orig_head_sha)
    if repo.head_state()[1] != state.orig_head_sha:  # the branch moved during the stop: put it back
        repo.run("reset", "-q", "--hard", state.orig_head_sha)
    changed = _series_dir_drift(repo, state)
    if state.record:
        resolutions.end(repo, _state_dir(repo))
    shutil.rmtree(_state_dir(repo))
    where = state.orig_head_ref or f"detached HEAD {state.orig_head_sha[:12]}"
    message = f"rebase aborted; {repo.path} is back on {where} ({state.orig_head_sha[:12]})"
    if changed:
        message += (
            f"; note: {', '.join(changed)} in {state.series_dir} changed during the rebase and were left as they are"
        )
    if state.record:
        message += f"; the resolution record {state.record} was not written"
    progress(message)
    return message


def _series_dir_drift(repo: GitRepo, state: State) -> list[str]:
    snapshot = _snapshot_dir(repo)
    series_dir = Path(state.series_dir)
    drift = []
    for path in sorted(snapshot.iterdir()):
        live = series_dir / path.name
        if not live.exists() or live.read_bytes() != path.read_bytes():
            drift.append(path.name)
    for directory, digests in state.guarded.items():
        if _digests(Path(directory)) != digests:
            drift.append(directory)
    return drift


# ---- the loop and the finish ------------------------------------------------------------------


def _run(repo: GitRepo, state: State, first: int, progress: Progress) -> Outcome:
    series = _snapshot_series(repo)
    total = len(state.names)
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(first, total):
            with _one_step(repo, state):
                patch = series.get(state.names[index])
                result = _apply_one(repo, state, patch, Path(tmp))
                _record(state, index, result)
                progress(f"[{index + 1}/{total}] {patch.name}: {result.describe()}")
                if result.kind in STOP_KINDS or _stops_to_edit(state, result):
                    return _stop(repo, state, index, patch, result)
                state.step_head = repo.must_rev_parse("HEAD")
                _save_state(repo, state)
    return _finish(repo, state, progress)


def _apply_one(repo: GitRepo, state: State, patch: PatchFile, tmp: Path) -> Result:
    if patch.name in state.drops:
        probe = classify_and_apply(repo, patch, patch.path, state.old_base_sha, tmp, keep=False)
        if repo.am_in_progress():
            repo.run("am", "--abort")
        return Result(patch.name, Kind.DROPPED, f"was {probe.kind.value}", reason=state.drops[patch.name])
    result = classify_and_apply(repo, patch, patch.path, state.old_base_sha, tmp)
    return _with_record(repo, state, patch, result)


@contextlib.contextmanager
def _signals_held() -> Iterator[list[int]]:
    """Within: a stop signal (Ctrl-C, SIGTERM, SIGHUP ...) is noted, not acted on; after: it ends the command
    with :class:`~sglang_dsv4_ext.tools.tool_support.stop_signals.Stopped`, the work in between done and saved."""
    arrived: list[int] = []
    previous = stop_signals.install(lambda signum, frame: arrived.append(signum))
    try:
        yield arrived
    finally:
        stop_signals.restore(previous)
    if arrived:
        raise stop_signals.Stopped(arrived[0])


@contextlib.contextmanager
def _one_step(repo: GitRepo, state: State) -> Iterator[None]:
    """One patch, applied and saved whole or not at all, whatever signal arrives: state and commits agree
    afterwards, and ``--continue`` or ``--abort`` take it from there. Where the step failed while a signal was
    held (a terminal's Ctrl-C reaches the git child too), it is rolled back to the last save."""
    with _signals_held() as arrived:
        try:
            yield
        except Exception:
            if not arrived:
                raise
            _roll_back_unsaved_step(repo, state, lambda message: None)  # then Stopped, as the step ends


def _with_record(repo: GitRepo, state: State, patch: PatchFile, result: Result) -> Result:
    """What the resolution record (if any) makes of the patch's outcome."""
    if not state.record:
        return result
    if result.kind is Kind.CONFLICT:
        return _from_record(repo, state, Path(state.record), patch, result)
    if result.kind in (Kind.APPLIES, Kind.APPLIES_3WAY) and resolutions.has_entry(Path(state.record), patch.name):
        commit, used = stops.edit_from_record(repo, Path(state.record), patch)
        if commit is None:  # stop there, as --edit would, saying why
            state.edit_names.append(patch.name)
            return Result(patch.name, result.kind, used, result.commit, failing_hunks=result.failing_hunks)
        return Result(
            patch.name, Kind.RESOLVED, f"{result.kind.value}, then edited from the resolution record ({used})", commit
        )
    return result


def _stops_to_edit(state: State, result: Result) -> bool:
    return result.name in state.edit_names and result.kind in (Kind.APPLIES, Kind.APPLIES_3WAY)


def _from_record(repo: GitRepo, state: State, record: Path, patch: PatchFile, result: Result) -> Result:
    """A conflict with a resolution record: resolved from it when rerere resolved every file, else
    the stop (rerere's partial resolution in place), with the merge's tree kept for recording."""
    state.merge_tree = resolutions.merge_tree(repo)
    state.stop_conflicts = repo.unmerged_paths()
    if not stops.fully_resolved_by_rerere(repo):
        return result
    commit, used = stops.resolve_from_record(repo, record, patch)
    if commit is None:
        return Result(patch.name, Kind.CONFLICT, used, failing_hunks=result.failing_hunks)
    state.merge_tree, state.stop_conflicts = None, []
    return Result(patch.name, Kind.RESOLVED, f"conflict resolved from the resolution record ({used})", commit)


def _stop(repo: GitRepo, state: State, index: int, patch: PatchFile, result: Result) -> Outcome:
    state.stop_index = index
    state.stop_head = repo.must_rev_parse("HEAD")
    if result.conflicted_files and not state.stop_conflicts:
        state.stop_conflicts = list(result.conflicted_files)
    message_file = stops.write_message_file(_state_dir(repo), repo, patch)
    _save_state(repo, state)
    results = [Result.from_json(r) for r in state.results]
    return Outcome(False, results, result, stop_message(repo, result, message_file))


def _record(state: State, index: int, result: Result) -> None:
    if index < len(state.results):
        state.results[index] = result.to_json()
    else:
        state.results.append(result.to_json())


def stop_message(repo: GitRepo, result: Result, message_file: Path | None = None) -> str:
    name = result.name
    lines = [f"stopped at {name}: {result.describe()}"]
    for hunk in result.failing_hunks:
        lines.append(f"  hunk that does not apply: {hunk}")
    for region in result.conflict_regions:
        lines.append(f"  conflict region: {region}")
    if result.kind is Kind.CONFLICT:
        lines.append(
            f"resolve the conflicts in {repo.path}, `git add` the files, then `sglang-dsv4 patches rebase --continue`"
        )
    elif result.kind is Kind.TARGET_GONE:
        lines.append(
            f"port the change by hand in {repo.path} (edit, `git add`), then `sglang-dsv4 patches rebase --continue`"
        )
    elif result.kind in (Kind.APPLIES, Kind.APPLIES_3WAY):
        lines.append(
            f"it applied, and the rebase stopped to change it (--edit): edit the files in {repo.path} and "
            "`git add` them (do not commit), then `sglang-dsv4 patches rebase --continue`"
        )
    if message_file is not None and result.kind in (Kind.CONFLICT, Kind.TARGET_GONE, Kind.APPLIES, Kind.APPLIES_3WAY):
        lines.append(f"the commit message is in {message_file}: edit it there to change it")
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
    series_dir, into = Path(state.series_dir), Path(state.into or state.series_dir)
    kept = [r for r in results if r.kind in APPLIED_KINDS]
    head = repo.must_rev_parse("HEAD")
    commits = repo.commits_between(state.onto_sha, head)
    if commits != [r.commit for r in kept]:
        raise RebaseError(
            f"HEAD of {repo.path} does not hold exactly the rebased patches (expected {len(kept)} commits "
            f"on {state.onto_sha[:12]}, found {len(commits)}); fix HEAD or --abort"
        )
    progress(f"exporting {len(kept)} patches to {into}")
    rendered = export_mod.render_series(repo, commits, [r.name for r in kept])
    removed = [r.name for r in results if r.kind is Kind.DROPPED]
    pin = updated_pin(snapshot.pin, pin_for(repo, state.onto, state.onto_sha), {})
    header = series_header(into) or series_header(series_dir)
    files = export_mod.series_files(into, rendered, pin.pin, _tombstones(state, results, snapshot, into), header)
    drift = _series_dir_drift(repo, state)
    if drift:
        raise RebaseError(
            f"{', '.join(drift)} changed while the rebase was stopped; refusing to overwrite "
            "them. Commit or revert those edits, then --continue again (or --abort)"
        )
    text = rangediff.report(
        repo,
        results,
        old_label=state.old_base or "(unpinned)",
        new_label=state.onto,
        old_base=state.old_base_sha,
        old_patches=snapshot.patches,
        new_base=state.onto_sha,
        new_tip=head,
    )
    changed = export_mod.write_files(into, files, removed)
    recorded = _write_record(repo, state)
    repo.run("update-ref", "-m", "sglang-dsv4 patches rebase", "refs/dsv4-patches/last-rebase", head)
    shutil.rmtree(_state_dir(repo))
    message = (
        (
            f"rebase done: {len(kept)} patches on {state.onto} ({state.onto_sha[:12]}), "
            f"{len(removed)} dropped; HEAD of {repo.path} is the patched tree ({head[:12]}, detached); "
            f"{len(changed)} files changed in {into}"
        )
        + recorded
        + _way_back(repo, state)
        + "".join(f"\n{line}" for line in pin_report(pin.changes))
    )
    return Outcome(True, results, None, message, text, changed)


def _tombstones(state: State, results: list[Result], snapshot: Series, into: Path) -> dict[str, str]:
    stones = {}
    dropped_on = f"{state.onto} ({state.onto_sha[:12]})"
    for r in results:
        if r.kind is Kind.DROPPED:
            stone = tombstone_path(into, r.name).relative_to(into)
            was = r.detail[len("was ") :] if r.detail.startswith("was ") else r.detail
            stones[str(stone)] = format_tombstone(snapshot.get(r.name), state.drops[r.name], dropped_on, was)
    return stones


def _write_record(repo: GitRepo, state: State) -> str:
    """Write the resolution record (when the rebase keeps one) and put the repository's rr-cache back."""
    if not state.record:
        return ""
    files = resolutions.record_files(repo, Path(state.record), _state_dir(repo))
    changed = resolutions.write_record(Path(state.record), files)
    resolutions.end(repo, _state_dir(repo))
    return f"; resolution record {state.record}: {len(changed)} files written"


def _way_back(repo: GitRepo, state: State) -> str:
    """How to keep the detached, patched HEAD on a branch, and how to return to where the rebase started."""
    ref = state.orig_head_ref
    back = (
        ref[len("refs/heads/") :] if ref and ref.startswith("refs/heads/") else f"--detach {state.orig_head_sha[:12]}"
    )
    return (
        f"\nto keep it on a branch: `git -C {repo.path} switch -c NAME`; back to where you were: "
        f"`git -C {repo.path} switch {back}`"
    )
