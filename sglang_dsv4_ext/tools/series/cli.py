"""``sglang-dsv4 patches``: apply, check, rebase, export and report on the source patch series.

Exit codes: 0 done / everything applies; 1 needs a human (a conflict, a patch already
upstream, a target gone, a rebase stopped, an export that would change files under --check);
2 bad input (arguments, a corrupt patch file, a dirty work tree, a missing repository).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from sglang_dsv4_ext.errors import Dsv4ExtError
from sglang_dsv4_ext.tools import exit_codes

from .classify import APPLIED_KINDS, UPSTREAM_KINDS, Kind, Result
from .gitrepo import GitRepo
from .paths import ENV_SERIES_DIR, default_series_dir, series_origin
from .releases import ChosenSeries, choose_series_dir
from .series import SeriesError, load_series, read_tombstones, unlisted_patch_files

EXIT_OK, EXIT_ATTENTION, EXIT_INPUT = exit_codes.OK, exit_codes.ATTENTION, exit_codes.USAGE


def _series_dir(args) -> Path:
    """--series-dir, else the default series directory (see :mod:`.paths`)."""
    return args.series_dir if args.series_dir is not None else default_series_dir()


def _target_version(args) -> str | None:
    """The sglang version of the target of check / status / apply (None: it cannot be read)."""
    from .releases import package_version, ref_version

    if getattr(args, "sglang_version", None):
        return args.sglang_version
    if args.repo:
        return ref_version(GitRepo(args.repo), getattr(args, "onto", None) or "HEAD")
    if args.sglang_dir:
        return package_version(args.sglang_dir)
    from .package_dir import installed_sglang_dir

    return package_version(installed_sglang_dir())


def _chosen_series(args) -> ChosenSeries:
    """The series for the target's sglang version, unless --series-dir or $SGLANG_DSV4_PATCHES_DIR names one."""
    if args.series_dir is not None:
        return choose_series_dir(None, args.series_dir)
    return choose_series_dir(_target_version(args))


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _drops(args) -> dict[str, str]:
    names, reasons = args.drop or [], args.reason or []
    if len(names) != len(reasons):
        raise SeriesError(
            f"every --drop NAME needs its own --reason TEXT (got {len(names)} --drop and {len(reasons)} --reason)"
        )
    return dict(zip(names, reasons))


def _results_table(results: list[Result]) -> str:
    from .rangediff import summary_table

    return summary_table(results)


def _print_results(results: list[Result], as_json: bool, extra: dict | None = None) -> None:
    if as_json:
        print(json.dumps({**(extra or {}), "patches": [r.to_json() for r in results]}, indent=1))
    else:
        print(_results_table(results), end="")


# ---- target selection shared by check / status ----------------------------------------------


def _add_target_args(p: argparse.ArgumentParser, default_help: str) -> None:
    g = p.add_argument_group("target (one of; " + default_help + ")")
    g.add_argument("--repo", type=Path, help="an SGLang git checkout (or a history from upstream-history)")
    g.add_argument("--onto", metavar="REF", help="with --repo: the upstream ref to check against (default: HEAD)")
    g.add_argument("--sglang-dir", type=Path, help="an sglang package directory, e.g. .../site-packages/sglang")
    g.add_argument("--sglang-version", metavar="X.Y.Z", help="the sglang==X.Y.Z wheel from PyPI (cached)")
    g.add_argument(
        "--wheel-cache",
        type=Path,
        help="wheel cache directory (default: $SGLANG_DSV4_WHEEL_CACHE or ~/.cache/sglang-dsv4-ext/wheels)",
    )


def _classify_target(args, series) -> tuple[str, list[Result]]:
    chosen = [x for x in (args.repo, args.sglang_dir, args.sglang_version) if x]
    if len(chosen) > 1:
        raise SeriesError("give only one of --repo, --sglang-dir, --sglang-version")
    if args.onto and not args.repo:
        raise SeriesError("--onto needs --repo")
    if args.repo:
        from .checkrepo import classify_in_scratch_worktree

        onto = args.onto or "HEAD"
        return f"{args.repo} at {onto}", classify_in_scratch_worktree(args.repo, series, onto, _progress)
    from .package_dir import classify_against_package, installed_sglang_dir

    if args.sglang_version:
        from .upstream_history import extract_package, fetch_wheel

        wheel = fetch_wheel(args.sglang_version, args.wheel_cache, _progress)
        from .package_dir import TREE_PREFIX, touched_files

        only = [f[len(TREE_PREFIX) :] for f in touched_files(series.patches) if f.startswith(TREE_PREFIX)]
        with tempfile.TemporaryDirectory() as tmp:
            pkg = extract_package(wheel, tmp, only)
            (pkg / "srt").mkdir(exist_ok=True)
            return f"sglang {args.sglang_version} (PyPI wheel)", classify_against_package(series, pkg, _progress)
    sglang_dir = args.sglang_dir or installed_sglang_dir()
    return f"sglang package at {sglang_dir}", classify_against_package(series, sglang_dir, _progress)


# ---- subcommands -------------------------------------------------------------------------------


def cmd_check(args) -> int:
    chosen = _chosen_series(args)
    series = load_series(chosen.directory)
    problems = []
    for patch in series.patches:
        missing = patch.missing_fields()
        if missing:
            problems.append(f"{patch.path}: DEP-3 header lacks {', '.join(missing)}")
    for name in unlisted_patch_files(series):
        problems.append(f"{series.directory / name}: not listed in the series file")
    label, results = _classify_target(args, series)
    if args.json:
        _print_results(
            results,
            True,
            {
                "target": label,
                "series_dir": str(series.directory),
                "series_choice": chosen.why,
                "header_problems": problems,
            },
        )
    else:
        print(f"series {series.directory} ({chosen.why}) against {label}:")
        _print_results(results, False)
        for line in problems:
            print(f"warning: {line}")
    attention = any(r.kind not in APPLIED_KINDS and r.kind is not Kind.ALREADY_APPLIED for r in results)
    return EXIT_ATTENTION if attention or (problems and args.strict_headers) else EXIT_OK


def _rebase_state(repo_path: Path | None) -> dict | None:
    """A patch-series rebase in progress in ``repo_path`` (status --repo), or None."""
    if not repo_path:
        return None
    from . import rebase as rebase_mod

    repo = GitRepo(repo_path)
    if not rebase_mod.in_progress(repo):
        return None
    state = rebase_mod.load_state(repo)
    stopped_at = state.names[state.stop_index] if state.stop_index is not None else None
    return {"onto": state.onto, "stopped_at": stopped_at, "done": len(state.results), "total": len(state.names)}


def _status_rows(series, results: list[Result]) -> list[dict]:
    from .upstream import verdicts_from_results

    return [
        {
            "name": v.patch,
            "subject": v.subject,
            "mirrors": list(v.mirrors),
            "targets": list(v.targets),
            "upstream": v.upstream,
            "result": v.result,
            "detail": v.detail,
            "forwarded": series.get(v.patch).fields.get("Forwarded", ""),
        }
        for v in verdicts_from_results(series, results)
    ]


_VERDICTS = {Kind.APPLIES.value: "needed", Kind.ALREADY_APPLIED.value: "already applied"}  # (the rest: the kind)


def _print_status(
    series, chosen: ChosenSeries, label: str, rows: list[dict], tombstones: list[dict], rebase_state: dict | None
) -> None:
    pin = series.pin
    sha = f" [wheel sha256 {pin['wheel_sha256'][:16]}...]" if pin.get("wheel_sha256") else ""
    print(
        f"series: {series.directory} ({series_origin(series.directory)}, {len(series.patches)} patches), "
        f"pinned to {pin.get('tag', '(no pin)')}{sha}"
    )
    print(f"chosen: {chosen.why}")
    print(f"target: {label}")
    width = max([len(r["name"]) for r in rows] + [5])
    for row in rows:
        verdict = "already upstream" if row["upstream"] else _VERDICTS.get(row["result"], row["result"])
        detail = f"  ({row['detail']})" if row["detail"] and not row["upstream"] else ""
        print(f"  {row['name']:<{width}}  {verdict:<17} mirrors {', '.join(row['mirrors']) or '-'}{detail}")
    for stone in tombstones:
        print(f"  dropped: {stone.get('Tombstone')} on {stone.get('Dropped-On')}: {stone.get('Reason')}")
    if rebase_state:
        print(
            f"rebase in progress onto {rebase_state['onto']}: {rebase_state['done']}/{rebase_state['total']} "
            f"patches, stopped at {rebase_state['stopped_at']}"
        )


def cmd_status(args) -> int:
    chosen = _chosen_series(args)
    series = load_series(chosen.directory)
    label, results = _classify_target(args, series)
    rebase_state = _rebase_state(args.repo)
    rows = _status_rows(series, results)
    tombstones = read_tombstones(series.directory)
    if args.json:
        print(
            json.dumps(
                {
                    "target": label,
                    "series_dir": str(series.directory),
                    "series_choice": chosen.why,
                    "pin": series.pin,
                    "patches": rows,
                    "rebase": rebase_state,
                    "dropped": tombstones,
                },
                indent=1,
            )
        )
    else:
        _print_status(series, chosen, label, rows, tombstones, rebase_state)
    return EXIT_OK


def cmd_apply(args) -> int:
    if bool(args.repo) == bool(args.sglang_dir):
        raise SeriesError(
            "give exactly one of --repo (a git checkout: git am -3) or --sglang-dir DIR (an sglang package directory)"
        )
    chosen = _chosen_series(args)
    _progress(f"series {chosen.directory} ({chosen.why})")
    series = load_series(chosen.directory)
    if args.sglang_dir:
        from .package_dir import apply_to_package

        results = apply_to_package(series, args.sglang_dir, _progress)
        print(
            f"applied {sum(r.kind is Kind.APPLIES for r in results)} patches to {args.sglang_dir}, "
            f"{sum(r.kind in UPSTREAM_KINDS for r in results)} already present"
        )
        return EXIT_OK
    from .checkrepo import apply_to_checkout

    results, stop_message = apply_to_checkout(args.repo, series, _progress)
    _print_results(results, False)
    if stop_message:
        print(stop_message)
        return EXIT_ATTENTION
    return EXIT_OK


def cmd_rebase(args) -> int:
    """``patches rebase``; a stop signal ends it between steps, the state saved (:func:`_rebase_stopped`)."""
    from sglang_dsv4_ext.tools.tool_support.stop_signals import Stopped

    try:
        return _rebase(args)
    except Stopped as stop:
        return _rebase_stopped(args, stop)


def _rebase_stopped(args, stop) -> int:
    from . import rebase as rebase_mod

    where = ""
    repo = rebase_mod.open_repo(args.repo)
    if rebase_mod.in_progress(repo):
        state = rebase_mod.load_state(repo)
        done = len(state.results) - (state.stop_index is not None)
        where = (
            f" after {done} of {len(state.names)} patches; the saved state and the commits agree: "
            "`sglang-dsv4 patches rebase --continue` goes on, `--abort` restores everything"
        )
    print(f"sglang-dsv4 patches rebase: stopped by {stop}{where}", file=sys.stderr)
    return exit_codes.for_signal(stop.signum)


def _rebase(args) -> int:
    from . import rebase as rebase_mod

    drops = _drops(args)
    started_with = [
        f"--{n}" for n, v in (("into", args.into), ("resolutions", args.resolutions), ("edit", args.edit)) if v
    ]
    if args.abort:
        if args.onto or args.continue_ or drops or started_with:
            raise SeriesError("--abort takes no --onto, --continue, --drop, --into, --resolutions or --edit")
        print(rebase_mod.abort(args.repo, _progress))
        return EXIT_OK
    if args.continue_:
        if args.onto or started_with:
            raise SeriesError(
                f"--continue takes no {' or '.join(['--onto'] + started_with)} "
                "(the rebase remembers how it was started)"
            )
        outcome = rebase_mod.continue_(args.repo, drops, _progress)
    else:
        if not args.onto:
            raise SeriesError("rebase needs --onto REF (or --continue / --abort)")
        outcome = rebase_mod.start(
            args.repo,
            _series_dir(args),
            args.onto,
            drops,
            _progress,
            into=args.into,
            record=args.resolutions,
            edits=args.edit or [],
        )
    if not outcome.finished:
        print(outcome.message)
        return EXIT_ATTENTION
    print(outcome.report)
    print(outcome.message)
    if args.report:
        Path(args.report).write_text(outcome.report)
    return EXIT_OK


def cmd_export(args) -> int:
    from .checkrepo import export_range
    from .pin import pin_report

    exported = export_range(
        args.repo,
        _series_dir(args),
        args.base,
        args.head,
        _drops(args),
        check_only=args.check,
        progress=_progress,
        wheel=args.wheel,
        wheel_sha256=args.wheel_sha256,
    )
    changed = exported.changed
    if args.check and not changed:
        print("series is up to date (re-export is a zero diff)")
    elif args.check:
        print("export would change: " + ", ".join(changed))
    else:
        print(f"exported; {len(changed)} files changed" + (": " + ", ".join(changed) if changed else ""))
    for line in pin_report(exported.pin_changes):
        print(line)
    return EXIT_ATTENTION if args.check and changed else EXIT_OK


def cmd_range_diff(args) -> int:
    from .rangediff import commit_series_on, range_diff

    repo = GitRepo(args.repo)
    old = load_series(args.old_series)
    new = load_series(args.new_series)
    old_base = repo.must_rev_parse(args.old_base or old.pin.get("tag") or "HEAD")
    new_base = repo.must_rev_parse(args.new_base or new.pin.get("tag") or "HEAD")
    old_tip = commit_series_on(repo, old_base, old.patches)
    new_tip = commit_series_on(repo, new_base, new.patches)
    print(range_diff(repo, old_base, old_tip, new_base, new_tip), end="")
    return EXIT_OK


def cmd_upstream_history(args) -> int:
    from .upstream_history import build_history

    repo = build_history(args.repo, args.versions, cache=args.wheel_cache, progress=_progress)
    for version in args.versions:
        print(f"v{version} {repo.must_rev_parse('v' + version)[:12]}")
    return EXIT_OK


# ---- parser --------------------------------------------------------------------------------------


def add_subparser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "patches",
        help="apply, check, rebase and export the source patch series against SGLang",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(func=lambda args: (parser.print_help(), EXIT_INPUT)[1])
    sub = parser.add_subparsers(dest="patches_command", metavar="SUBCOMMAND")

    def add(name, help_text, func, description=None):
        p = sub.add_parser(
            name,
            help=help_text,
            description=description or help_text,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.add_argument(
            "--series-dir",
            type=Path,
            default=None,
            help=f"the series directory (default: ${ENV_SERIES_DIR}, else the checkout's patches/, "
            "else the copy shipped in the installed package; check, status and apply take the series "
            "there that is pinned to the target's sglang version, e.g. patches/sglang-0.5.22/)",
        )
        p.set_defaults(func=_guarded(func))
        return p

    p = add(
        "apply",
        "apply the series onto an SGLang checkout (git am -3) or an sglang package directory",
        cmd_apply,
        "Apply the series in order. With --repo, each patch is committed onto the checked-out branch with "
        "`git am -3`\n(a detached HEAD is refused: make a branch first, `git switch -c NAME`); a conflict leaves "
        "`git am` in progress\n(resolve, `git am --continue`, run apply again: patches already applied from this "
        "series are skipped).\nWith --sglang-dir, patches are applied in place with `git apply`, all or nothing.",
    )
    p.add_argument("--repo", type=Path, help="SGLang git checkout (python/sglang/ layout), clean work tree required")
    p.add_argument("--sglang-dir", type=Path, help="sglang package directory to patch in place")

    p = add(
        "check",
        "does each patch apply cleanly, need a 3-way merge, conflict, or is it already upstream?",
        cmd_check,
        "Classify every patch against a target without changing it (a scratch worktree is used for "
        "--repo).\nAlso reports DEP-3 header fields that are missing. Exit 1 when any patch does not apply.",
    )
    _add_target_args(p, "default: the installed sglang package")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--strict-headers", action="store_true", help="exit 1 when a DEP-3 header field is missing")

    p = add(
        "status",
        "which patches are already upstream for an SGLang version; a rebase in progress",
        cmd_status,
        "Per patch: already upstream or needed, the runtime hook module it mirrors, dropped patches,\n"
        "and the state of a rebase in progress (with --repo). The default target is the installed sglang,\n"
        "the same one `sglang-dsv4 doctor` inspects; the series is the one pinned to the target's version\n"
        "(the `chosen:` line says which and why).",
    )
    _add_target_args(p, "default: the installed sglang package")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = add(
        "rebase",
        "rebase the series onto a new upstream ref; resumable (--continue / --abort)",
        cmd_rebase,
        "Classify and apply each patch onto REF (HEAD of --repo is detached there). Stops at the first conflict,\n"
        "patch already upstream or target gone; resume with --continue, or --abort to restore the original\n"
        "state exactly. A patch leaves the series only with --drop NAME --reason TEXT (a tombstone is written\n"
        "to patches/dropped/). On success the series is re-exported (to --into DIR, or in place), the pin moved\n"
        "to REF, and a report with a range-diff of the old and new series is printed. At a stop the commit\n"
        "message is in the rebase's MESSAGE file (the stop says where): edit it to change the message.\n"
        "--resolutions DIR records every resolution (git rerere and the rest) and replays recorded ones.",
    )
    p.add_argument("--repo", type=Path, required=True, help="SGLang git checkout holding REF (clean work tree)")
    p.add_argument("--onto", metavar="REF", help="upstream tag or commit to rebase onto")
    p.add_argument("--continue", dest="continue_", action="store_true", help="resume a stopped rebase")
    p.add_argument("--abort", action="store_true", help="give up and restore the original state")
    p.add_argument("--drop", action="append", metavar="NAME", help="drop this patch (repeatable; needs --reason)")
    p.add_argument("--reason", action="append", metavar="TEXT", help="why the matching --drop patch goes")
    p.add_argument("--report", type=Path, help="also write the report to this file")
    p.add_argument(
        "--into",
        type=Path,
        metavar="DIR",
        help="write the new series to DIR (e.g. patches/sglang-0.5.22), next to the old one, which "
        "is left as it is (default: rewrite the series directory)",
    )
    p.add_argument(
        "--edit",
        action="append",
        metavar="NAME",
        help="stop after this patch applies, to change it (repeatable): a clean three-way merge can "
        "still be wrong for the release, and its message may need to say how this release differs",
    )
    p.add_argument(
        "--resolutions",
        type=Path,
        metavar="DIR",
        help="keep a resolution record in DIR (git rerere's cache, and each resolution's edits beyond "
        "the conflicted files and its message): recorded stops replay without stopping, new ones are "
        "recorded when the rebase finishes. Without it rerere stays off.",
    )

    p = add(
        "export",
        "write commits BASE..HEAD of a checkout as the series (deterministic)",
        cmd_export,
        "Export commits as format-patch files with stable names (matched by subject), normalised headers,\n"
        "--zero-commit --no-signature --full-index. Re-exporting an unchanged series is a zero diff.\n"
        "UPSTREAM_PIN is recomputed from the base; every field that changes is printed (old -> new), and a\n"
        "field the repository cannot tell (the wheel of a plain SGLang clone) is kept for the same tag.",
    )
    p.add_argument("--repo", type=Path, required=True, help="SGLang git checkout holding the commits")
    p.add_argument("--base", metavar="REF", help="upstream base (default: the pin's tag)")
    p.add_argument("--head", metavar="REV", default="HEAD", help="last commit of the series (default: HEAD)")
    p.add_argument("--drop", action="append", metavar="NAME", help="a series patch that is intentionally not exported")
    p.add_argument("--reason", action="append", metavar="TEXT", help="why the matching --drop patch goes")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if the export would change files")
    p.add_argument(
        "--wheel",
        metavar="NAME",
        help="the pin's wheel file name, where the base tag does not record it "
        "(default: the tag's record, else the pin's own when the base is the pinned tag)",
    )
    p.add_argument("--wheel-sha256", metavar="HEX", help="that wheel's sha256 (with --wheel)")

    p = add("range-diff", "range-diff of two series directories (old on its base vs new on its base)", cmd_range_diff)
    p.add_argument("--repo", type=Path, required=True, help="repository holding both bases")
    p.add_argument("--old-series", type=Path, required=True, help="the old series directory")
    p.add_argument("--new-series", type=Path, required=True, help="the new series directory")
    p.add_argument("--old-base", metavar="REF", help="default: the old pin's tag")
    p.add_argument("--new-base", metavar="REF", help="default: the new pin's tag")

    p = add(
        "upstream-history",
        "build a local SGLang history (tags vX.Y.Z) from PyPI wheels, no git clone needed",
        cmd_upstream_history,
        "Download (once, cached) the sglang wheels of the given releases and commit each release's sglang/ tree\n"
        "as python/sglang/ in a local repository, tagged v<version>. Compiled extensions are left out.",
    )
    p.add_argument("--repo", type=Path, required=True, help="directory for the repository (new, or one to extend)")
    p.add_argument(
        "--versions",
        nargs="+",
        default=["0.5.21", "0.5.22", "0.5.23"],
        metavar="X.Y.Z",
        help="releases, oldest first (default: 0.5.21 0.5.22 0.5.23)",
    )
    p.add_argument(
        "--wheel-cache",
        type=Path,
        help="wheel cache directory (default: $SGLANG_DSV4_WHEEL_CACHE or ~/.cache/sglang-dsv4-ext/wheels)",
    )
    return parser


def _guarded(func):
    """Turn the tool's deliberate errors into one clear line on stderr and exit code 2."""

    def run(args) -> int:
        try:
            return func(args)
        except Dsv4ExtError as exc:
            print(f"sglang-dsv4 patches: error: {exc}", file=sys.stderr)
            return EXIT_INPUT

    return run
