"""``sglang-dsv4 repro``: run, A/B, compare and re-parse (see :mod:`sglang_dsv4_ext.tools.repro`).

Every user mistake ends with one line naming the input and exit code 2 (``exit_codes.USAGE``),
before anything is written; a finished run is never overwritten.
"""

from __future__ import annotations

import argparse
import os
import sys

from sglang_dsv4_ext.config import IndexKDtype
from sglang_dsv4_ext.errors import PairingError, ReproInputError
from sglang_dsv4_ext.tools import exit_codes
from sglang_dsv4_ext.tools.repro import rundir
from sglang_dsv4_ext.tools.repro.verdict import CLASSES
from sglang_dsv4_ext.tools.tool_support import arg_types, stop_signals, urls

_EPILOG = """\
examples:
  # 80 concurrent 8-round agentic sessions against a PD router, one hour at most
  sglang-dsv4 repro run --endpoint http://127.0.0.1:8000 --sessions 80 --rounds 8 \\
      --concurrency 80 --time-limit 3600 --out runs/bf16-hicache --label bf16+hicache
  # a concurrency ladder
  sglang-dsv4 repro run --endpoint http://127.0.0.1:8000 --concurrency 8,32,80 --out runs/ladder
  # compare two runs made with the same settings (paired on identical prompts)
  sglang-dsv4 repro compare runs/fp8-hicache runs/bf16-hicache
  # run the same workload against two stacks and compare
  sglang-dsv4 repro ab --endpoint-a http://127.0.0.1:8000 --endpoint-b http://127.0.0.1:9000 --out runs/ab
  # re-parse the raw output of failures offline
  sglang-dsv4 repro reparse runs/bf16-hicache --detokenize-url http://127.0.0.1:30000

before the first request every server named by --server-metrics (default: the endpoint) is read once: its
/metrics counters become the "before" of the summary's server evidence, and --expect-extension on (the
default) refuses a server whose schedulers do not report sglang-dsv4-ext active in its /server_info (the
sglang:dsv4_ext_active gauge and the activation line in --serve-logs DIR are checked against that launch, never
enough alone), a record with fewer active ranks than ranks, or servers that disagree on the index-K dtype;
--expect-index-k-dtype D refuses a server whose records do not report a D pool built; one server named twice
is refused; nothing is written then. After the run the records are read again: a changed launch or process
(or a counter that went down) marks the server "restarted during the run: deltas not comparable".
`ab` reads each side's servers (--server-metrics-a/-b, else its sglang-router's GET /workers, else the
endpoint) and needs all their records whatever --expect-extension says (--expect-extension-a/-b: per side,
e.g. `-a off -b on` for a stock baseline against the extension); compare/ab/report print first what
each side ran and flag "not comparable as asked" (--fail-if-not-comparable: exit 4).

exit codes: 0 done; 2 bad input or a refused extension check (nothing written); 3 a finding asked for
with --fail-on-corruption or --fail-if-significant; 4 an A/B not comparable as asked
(--fail-if-not-comparable); 128 + N stopped by signal N (129 SIGHUP, 130 SIGINT,
143 SIGTERM, ...: the summary of what finished is written; before the first request nothing is).
"""


# ----- argument types (checks shared with the settings table) ----------------------------------
def _arg_type(check):
    def parse(text: str):
        try:
            return check(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(urls.redact(str(exc))) from None

    parse.__name__ = check.__name__.strip("_")
    return parse


def _url(text: str) -> str:
    from sglang_dsv4_ext.tools.repro.settings import url_check

    url_check(text)
    return text


def _server_urls(text: str) -> tuple[str, ...]:
    from sglang_dsv4_ext.tools.repro.settings import SETTINGS_BY_NAME

    setting = SETTINGS_BY_NAME["server_metrics"]
    urls = setting.parse(text)
    setting.check(urls)
    return urls


def _alpha(text: str) -> float:
    alpha = arg_types.parse_float(text)  # the commands' one number rule; NaN where the text spells no number
    if not 0 < alpha < 1:  # also refuses NaN
        raise ValueError(f"must be a number in (0, 1), got {text!r}")
    return alpha


def _error(action: str, exc: object) -> int:
    print(urls.redact(f"sglang-dsv4 repro {action}: {exc}"), file=sys.stderr)
    return exit_codes.USAGE


def _stopped_before_start(
    action: str, stop: stop_signals.Stopped, what: str = "before the first request: nothing was sent or written"
) -> int:
    print(f"sglang-dsv4 repro {action}: stopped by {stop} {what}", file=sys.stderr)
    return exit_codes.for_signal(stop.signum)


# ----- actions ---------------------------------------------------------------------------------
def _do_run(args) -> int:
    from sglang_dsv4_ext.tools.repro.runner import Runner, format_summary
    from sglang_dsv4_ext.tools.repro.settings import run_config_from_args

    try:
        cfg = run_config_from_args(args, args.endpoint, args.out or rundir.default_out("run"), args.label)
        runner = Runner(cfg, out_given=args.out is not None)
        summary = runner.run()
    except (ReproInputError, ValueError) as exc:
        return _error("run", exc)
    except stop_signals.Stopped as stop:
        return _stopped_before_start("run", stop)
    print(urls.redact(format_summary(summary)))
    print(f"results: {os.path.join(cfg.out, rundir.REQUESTS)}, {os.path.join(cfg.out, rundir.SUMMARY)}")
    if runner.signal is not None:
        return exit_codes.for_signal(runner.signal)
    if args.fail_on_corruption and summary["overall"]["corruption"]["count"] > 0:
        return exit_codes.FINDING
    return exit_codes.OK


_AB_ONE_STACK_FLAGS = {
    "--server-metrics": "--server-metrics-a / --server-metrics-b",
    "--serve-logs": "`repro run ... --serve-logs` per stack, compared with `repro compare`",
    "--expect-index-k-dtype": "--expect-index-k-dtype-a / --expect-index-k-dtype-b",
}


def _refuse_one_stack_flags(args) -> None:
    for flag, instead in _AB_ONE_STACK_FLAGS.items():
        if getattr(args, flag[2:].replace("-", "_")) is not None:
            raise ReproInputError(f"{flag} names one stack's servers or dtype, and `repro ab` runs two: use {instead}")


def _side_servers(endpoint: str, named) -> tuple[str, ...]:
    """A side's servers: those named, else the workers its sglang-router lists, else the endpoint itself."""
    from sglang_dsv4_ext.tools.repro.client import base_url
    from sglang_dsv4_ext.tools.repro.server_info import UnreadableWorkersError, router_workers

    if named:
        return tuple(named)
    try:
        with stop_signals.raising():
            workers = router_workers(base_url(endpoint))
    except UnreadableWorkersError as exc:  # a router whose workers cannot be checked: never its /server_info instead
        raise ReproInputError(
            f"{endpoint} is a router whose GET /workers lists {exc}; name that side's servers with "
            "--server-metrics-a / --server-metrics-b URL[,URL...]"
        ) from None
    return tuple(workers) if workers else (base_url(endpoint),)


def _refuse_one_endpoint(args) -> None:
    from sglang_dsv4_ext.tools.repro.server_info import address_key

    if address_key(args.endpoint_a) == address_key(args.endpoint_b):
        raise ReproInputError(
            f"--endpoint-a {args.endpoint_a} and --endpoint-b {args.endpoint_b} are one server: an A/B of one stack "
            "against itself shows no difference whatever the stacks do. Give the two stacks' endpoints"
        )


def _refuse_one_server(states_a, states_b) -> None:
    from sglang_dsv4_ext.tools.repro.extension_check import refuse_one_server_twice

    why = refuse_one_server_twice(states_a + states_b, "--endpoint-a/--endpoint-b")
    if why:
        raise ReproInputError(f"A and B share a server: {why}")


def _ab_preflight(args) -> list[tuple[str, ...]]:
    """Both stacks' servers, checked before anything runs; each side's servers must answer with records."""
    from sglang_dsv4_ext.tools.repro.runner import preflight

    _refuse_one_stack_flags(args)
    _refuse_one_endpoint(args)  # before any read: one server under two spellings
    sides = []
    for endpoint, named, dtype, expect in (
        (args.endpoint_a, args.server_metrics_a, args.expect_index_k_dtype_a, side_expect(args, "a")),
        (args.endpoint_b, args.server_metrics_b, args.expect_index_k_dtype_b, side_expect(args, "b")),
    ):
        servers = _side_servers(endpoint, named)
        sides.append((servers, preflight(servers, None, expect, dtype, require_records=True)[1]))
    _refuse_one_server(sides[0][1], sides[1][1])
    return [servers for servers, _ in sides]


def side_expect(args, side: str) -> str:
    """What one side of an A/B must show: its own --expect-extension-a/-b, else the --expect-extension of both."""
    return getattr(args, f"expect_extension_{side}") or args.expect_extension


def _ab_configs(args):
    import dataclasses

    from sglang_dsv4_ext.tools.repro.runner import auth_headers
    from sglang_dsv4_ext.tools.repro.settings import run_config_from_args

    auth_headers(args.api_key_env)  # refuse before the directory is claimed
    servers = _ab_preflight(args)
    out = rundir.claim(args.out or rundir.default_out("ab"), explicit=args.out is not None)
    sides = zip(
        rundir.AB_SIDES,
        (args.endpoint_a, args.endpoint_b),
        (args.label_a, args.label_b),
        servers,
        (args.expect_index_k_dtype_a, args.expect_index_k_dtype_b),
        (side_expect(args, "a"), side_expect(args, "b")),
    )
    return out, [
        dataclasses.replace(
            run_config_from_args(args, ep, os.path.join(out, side), label),
            server_metrics=urls,
            expect_index_k_dtype=dtype,
            expect_extension=expect,
        )
        for side, ep, label, urls, dtype, expect in sides
    ]


def _ab_kept(out: str, done: list) -> str:
    """What a stopped or refused ``repro ab`` leaves behind, and where."""
    if not done:
        return f"nothing was sent to either stack; {out} holds nothing"
    cfg, summary = done[0]
    return (
        f"side A's run is kept in {cfg.out} ({summary['requests_done']} of {summary['requests_planned']} "
        f"requests, its summary written); nothing was sent to B and no comparison was written (run B with "
        f"`repro run` and compare the two with `sglang-dsv4 repro compare {cfg.out} B_DIR`)"
    )


def _do_ab(args) -> int:
    from sglang_dsv4_ext.tools.repro.compare import compare_runs, format_comparison
    from sglang_dsv4_ext.tools.repro.runner import Runner, format_summary

    try:
        out, cfgs = _ab_configs(args)
    except (ReproInputError, ValueError) as exc:
        return _error("ab", exc)
    except stop_signals.Stopped as stop:
        return _stopped_before_start("ab", stop)
    done: list = []  # (RunConfig, summary) of each side that ran
    for side, cfg in zip(("A", "B"), cfgs):  # one after the other, so neither stack loads the other's run
        runner = Runner(cfg, require_records=True)
        try:
            summary = runner.run()  # checks its stack again: B may have changed while A ran
        except ReproInputError as exc:
            return _error("ab", f"side {side} ({cfg.endpoint}): {exc}. Kept: {_ab_kept(out, done)}")
        except stop_signals.Stopped as stop:
            return _stopped_before_start("ab", stop, f"before side {side}'s first request: {_ab_kept(out, done)}")
        print(urls.redact(format_summary(summary)))
        if runner.signal is not None:
            print(f"results so far: {cfg.out} (no comparison: stopped by {stop_signals.signal_name(runner.signal)})")
            return exit_codes.for_signal(runner.signal)
        done.append((cfg, summary))
    try:  # both sides ran with the same settings; this only refuses what cannot be compared at all
        result = compare_runs(cfgs[0].out, cfgs[1].out, args.alpha)
    except PairingError as exc:
        return _error("ab", exc)
    rundir.write_json_new(os.path.join(out, rundir.AB), result)
    print(format_comparison(result))
    print(f"results: {cfgs[0].out}, {cfgs[1].out}, {os.path.join(out, rundir.AB)}")
    return comparison_exit(args, result)


def comparison_exit(args, result: dict) -> int:
    """A comparison's exit code: not comparable as asked first (its finding would not mean what it says)."""
    if getattr(args, "fail_if_not_comparable", False) and not result.get("comparable", True):
        return exit_codes.NOT_COMPARABLE
    if getattr(args, "fail_if_significant", False) and result["significant"]:
        return exit_codes.FINDING
    return exit_codes.OK


def _check_json_out(path: str) -> None:
    if os.path.exists(path):
        raise ReproInputError(f"--json {path}: exists; comparisons are never overwritten (choose a new name)")
    parent = os.path.dirname(path) or "."
    if not os.path.isdir(parent):
        raise ReproInputError(f"--json {path}: directory {parent} does not exist")


def _do_compare(args) -> int:
    from sglang_dsv4_ext.tools.repro.compare import compare_runs, format_comparison

    try:
        if args.json:
            _check_json_out(args.json)
        result = compare_runs(args.run_a, args.run_b, args.alpha, args.allow_different_settings)
    except (PairingError, ReproInputError, ValueError) as exc:
        return _error("compare", exc)
    if args.json:
        rundir.write_json_new(args.json, result)
    print(format_comparison(result))
    return comparison_exit(args, result)


def _decoder(args):
    from sglang_dsv4_ext.tools.repro.client import Detokenizer
    from sglang_dsv4_ext.tools.repro.reparse import local_tokenizer_decoder

    if args.tokenizer and args.detokenize_url:
        raise ReproInputError("give --tokenizer or --detokenize-url, not both")
    if args.tokenizer:
        return local_tokenizer_decoder(args.tokenizer)
    if args.detokenize_url:
        return Detokenizer(args.detokenize_url).decode_blocking
    return None


def _do_reparse(args) -> int:
    from sglang_dsv4_ext.tools.repro.reparse import format_origin_table, reparse_run

    try:
        rundir.requests_path(args.run_dir)  # a wrong directory is named before a tokenizer loads
        result = reparse_run(args.run_dir, _decoder(args))
    except ReproInputError as exc:
        return _error("reparse", exc)
    print(f"re-parsed {result['failures']} failures -> {result['path']}")
    for line in format_origin_table(result["origin_by_verdict"]):
        print(line)
    return exit_codes.OK


# ----- parsers ---------------------------------------------------------------------------------
def _add_workload_args(p: argparse.ArgumentParser) -> None:
    from sglang_dsv4_ext.tools.repro.settings import add_flags

    add_flags(p.add_argument_group("workload"))


def add_allow_different_settings(p: argparse.ArgumentParser) -> None:
    """The one override of the settings check (``repro compare`` and ``report``)."""
    from sglang_dsv4_ext.tools.repro.pairing import ALLOW_FLAG

    p.add_argument(
        ALLOW_FLAG,
        dest="allow_different_settings",
        action="store_true",
        help="compare runs whose settings differ (sessions, rounds, seed, concurrency, max tokens, "
        "temperature, stream, ...): refused by default; the output then says so at the top",
    )


def add_not_comparable(p: argparse.ArgumentParser) -> None:
    from sglang_dsv4_ext.tools.repro.pairing import NOT_COMPARABLE_FLAG

    p.add_argument(
        NOT_COMPARABLE_FLAG,
        action="store_true",
        help=f"exit {exit_codes.NOT_COMPARABLE} when the evidence does not show the A/B compared what it was asked "
        "(both sides report the same index-K dtype, a side's state or built dtype unknown, a side running a mix "
        "of pools, a label naming another dtype than its side built, a server restarted during the run or not "
        "re-read after it, one side failing in transport far more often, the sides parse through different "
        "paths); the output says so at the top and in the verdict line either way",
    )


def _add_significance_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--alpha", type=_arg_type(_alpha), default=0.05, help="significance level in (0, 1) (default 0.05)")
    p.add_argument(
        "--fail-if-significant", action="store_true", help=f"exit {exit_codes.FINDING} on a significant difference"
    )
    add_not_comparable(p)


def _add_run(sub) -> None:
    run = sub.add_parser(
        "run",
        help="run the sessions against one endpoint",
        description="Run N sessions x R rounds at each concurrency level against one endpoint.",
    )
    run.add_argument(
        "--endpoint",
        required=True,
        type=_arg_type(_url),
        help="base URL, e.g. http://127.0.0.1:8000 (the router, or a server)",
    )
    run.add_argument(
        "--out", default=None, help="output directory; must be new or empty (default repro-runs/run-<time>)"
    )
    run.add_argument("--label", default="", help="a name for this run in tables, e.g. 'bf16+hicache'")
    _add_workload_args(run)
    run.add_argument(
        "--fail-on-corruption", action="store_true", help=f"exit {exit_codes.FINDING} when any request is corrupted"
    )
    run.set_defaults(func=_do_run)


def _add_ab(sub) -> None:
    from sglang_dsv4_ext.tools.repro.extension_check import EXPECT_CHOICES

    ab = sub.add_parser(
        "ab",
        help="run the same workload against two endpoints and compare",
        description="Run the identical workload against A then B, then compare paired requests.",
    )
    ab.add_argument("--endpoint-a", required=True, type=_arg_type(_url), help="base URL of stack A")
    ab.add_argument("--endpoint-b", required=True, type=_arg_type(_url), help="base URL of stack B")
    ab.add_argument("--label-a", default="A")
    ab.add_argument("--label-b", default="B")
    for side in ("a", "b"):
        ab.add_argument(
            f"--server-metrics-{side}",
            type=_arg_type(_server_urls),
            default=None,
            metavar="URL[,URL...]",
            help=f"stack {side.upper()}'s prefill and decode servers, whose records are required (default: the "
            "workers its sglang-router lists in GET /workers, else the endpoint itself)",
        )
        ab.add_argument(
            f"--expect-extension-{side}",
            choices=EXPECT_CHOICES,
            default=None,
            help=f"what stack {side.upper()}'s servers must show (on, off: a stock baseline, any: only record; "
            "default --expect-extension); a stock-vs-extension A/B: --expect-extension-a off --expect-extension-b on",
        )
        ab.add_argument(
            f"--expect-index-k-dtype-{side}",
            choices=IndexKDtype.values(),
            default=None,
            help=f"refuse unless every server of stack {side.upper()} reports this index-K dtype built",
        )
    ab.add_argument("--out", default=None, help="output directory; must be new or empty (default repro-runs/ab-<time>)")
    _add_significance_args(ab)
    _add_workload_args(ab)
    ab.set_defaults(func=_do_ab)


def _add_compare(sub) -> None:
    cmp_ = sub.add_parser("compare", help="compare two finished runs (paired on identical prompts)")
    cmp_.add_argument("run_a")
    cmp_.add_argument("run_b")
    cmp_.add_argument("--json", default=None, help="also write the comparison as JSON to this new file")
    add_allow_different_settings(cmp_)
    _add_significance_args(cmp_)
    cmp_.set_defaults(func=_do_compare)


def _add_reparse(sub) -> None:
    rep = sub.add_parser(
        "reparse",
        help="re-parse failures' raw output with the reference DSML parser",
        description=f"Writes {rundir.REPARSED} into the run directory (a new timestamped name when one exists).",
    )
    rep.add_argument("run_dir")
    rep.add_argument(
        "--detokenize-url",
        default=None,
        type=_arg_type(_url),
        help="an SGLang server (prefill or decode) with /detokenize",
    )
    rep.add_argument("--tokenizer", default=None, help="local tokenizer directory (e.g. the model checkpoint)")
    rep.set_defaults(func=_do_reparse)


def add_subparser(subparsers) -> None:
    from sglang_dsv4_ext.tools.cli import _SUMMARIES  # the one-line summary, written once for both --help levels

    repro = subparsers.add_parser(
        "repro",
        help=_SUMMARIES["repro"],
        description=f"{_SUMMARIES['repro'][0].upper()}{_SUMMARIES['repro'][1:]}. "
        f"Each request gets one verdict: {', '.join(CLASSES)}.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = repro.add_subparsers(dest="repro_command", metavar="ACTION")
    repro.set_defaults(func=lambda args: (repro.print_help(), exit_codes.USAGE)[1])
    for add in (_add_run, _add_ab, _add_compare, _add_reparse):
        add(sub)
