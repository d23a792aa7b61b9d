"""``sglang-dsv4 repro``: run, A/B, compare and re-parse (see :mod:`sglang_dsv4_ext.repro`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

EXIT_FINDING = 3  # --fail-on-corruption / --fail-if-significant triggered
EXIT_USAGE = 2

_EPILOG = """\
examples:
  # the incident: 80 concurrent 8-round agentic sessions against a PD router
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
"""


def _int_list(text: str):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 8,32,80, got {text!r}")
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"concurrency levels must be integers >= 1, got {text!r}")
    return values


def _repetition(text: str):
    from sglang_dsv4_ext.repro.verdict import RepetitionRule

    try:
        repeats, chars, period = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MIN_REPEATS,MIN_CHARS,MAX_PERIOD like 8,160,200, got {text!r}")
    if repeats < 2 or chars < 1 or period < 1:
        raise argparse.ArgumentTypeError(f"need MIN_REPEATS >= 2, MIN_CHARS >= 1, MAX_PERIOD >= 1, got {text!r}")
    return RepetitionRule(repeats, chars, period)


def _json_object(text: str):
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}")
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def _add_workload_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("workload")
    g.add_argument("--sessions", type=int, default=8, help="concurrent agentic sessions per level (default 8)")
    g.add_argument("--rounds", type=int, default=4, help="user turns per session; each asks for one tool call (default 4)")
    g.add_argument("--no-answer-step", action="store_true", help="skip the request that follows each tool result")
    g.add_argument("--concurrency", type=_int_list, default=[8], metavar="N[,N...]",
                   help="sessions in flight; a comma list runs a ladder, one level after another (default 8)")
    g.add_argument("--seed", type=int, default=0, help="decides every prompt and per-request sampling seed (default 0)")
    g.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (default 0.0)")
    g.add_argument("--max-tokens", type=int, default=2048, help="max_tokens per request (default 2048)")
    g.add_argument("--request-timeout", type=float, default=300.0, help="seconds per request before it counts as a timeout (default 300)")
    g.add_argument("--time-limit", type=float, default=None, help="total seconds; in-flight requests are abandoned and the run summarised")
    g.add_argument("--system-prompt-chars", type=int, default=4000, help="size of the shared system prompt (default 4000)")
    g.add_argument("--tool-result-chars", type=int, default=1500, help="size of each scripted tool result (default 1500)")
    g.add_argument("--model", default=None, help="model name to send (default: first id of GET /v1/models)")
    g.add_argument("--stream", action="store_true", help="use streaming responses (exercises the streaming parser; no token ids)")
    g.add_argument("--no-token-ids", action="store_true", help="do not ask SGLang for response_token_ids")
    g.add_argument("--detokenize-url", default=None, help="server whose /detokenize decodes failures' token ids (default: the endpoint)")
    g.add_argument("--thinking", choices=["on", "off"], default=None, help="send chat_template_kwargs.thinking (default: server default)")
    g.add_argument("--extra-body", type=_json_object, default={}, help="JSON object merged into every request body")
    g.add_argument("--no-exact-args", action="store_true", help="do not require the requested argument values, only schema-valid ones")
    g.add_argument("--repetition", type=_repetition, default=None, metavar="REPEATS,CHARS,PERIOD",
                   help="degenerate-repetition rule (default 8,160,200)")
    g.add_argument("--api-key-env", default=None, help="environment variable holding a bearer token")
    g.add_argument("--no-progress", action="store_true", help="no progress output")
    g.add_argument("--fail-on-corruption", action="store_true", help=f"exit {EXIT_FINDING} when any request is corrupted")


def _run_config(args, endpoint: str, out: str, label: str):
    from sglang_dsv4_ext.repro.runner import RunConfig
    from sglang_dsv4_ext.repro.scenario import ScenarioConfig
    from sglang_dsv4_ext.repro.verdict import RepetitionRule

    scenario = ScenarioConfig(
        seed=args.seed,
        sessions=args.sessions,
        rounds=args.rounds,
        answer_step=not args.no_answer_step,
        system_prompt_chars=args.system_prompt_chars,
        tool_result_chars=args.tool_result_chars,
    )
    return RunConfig(
        endpoint=endpoint,
        out=out,
        model=args.model,
        label=label,
        scenario=scenario,
        concurrency=args.concurrency,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        request_timeout=args.request_timeout,
        time_limit=args.time_limit,
        stream=args.stream,
        token_ids=not args.no_token_ids,
        detokenize_url=args.detokenize_url,
        thinking=None if args.thinking is None else args.thinking == "on",
        extra_body=args.extra_body,
        exact_args=not args.no_exact_args,
        repetition=args.repetition or RepetitionRule(),
        api_key_env=args.api_key_env,
        progress=not args.no_progress,
    )


def _default_out(prefix: str) -> str:
    return os.path.join("repro-runs", time.strftime(f"{prefix}-%Y%m%d-%H%M%S"))


def _do_run(args) -> int:
    from sglang_dsv4_ext.repro.runner import Runner, format_summary

    try:
        cfg = _run_config(args, args.endpoint, args.out or _default_out("run"), args.label)
    except ValueError as exc:
        print(f"sglang-dsv4 repro run: {exc}", file=sys.stderr)
        return EXIT_USAGE
    summary = Runner(cfg).run()
    print(format_summary(summary))
    print(f"results: {cfg.out}/requests.jsonl, {cfg.out}/summary.json")
    if args.fail_on_corruption and summary["overall"]["corruption"]["count"] > 0:
        return EXIT_FINDING
    return 0


def _do_ab(args) -> int:
    from sglang_dsv4_ext.repro.compare import compare_runs, format_comparison
    from sglang_dsv4_ext.repro.runner import Runner, format_summary

    out = args.out or _default_out("ab")
    try:
        cfgs = [
            _run_config(args, args.endpoint_a, os.path.join(out, "a"), args.label_a),
            _run_config(args, args.endpoint_b, os.path.join(out, "b"), args.label_b),
        ]
    except ValueError as exc:
        print(f"sglang-dsv4 repro ab: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for cfg in cfgs:  # one after the other, so neither stack loads the other's run
        print(format_summary(Runner(cfg).run()))
    result = compare_runs(cfgs[0].out, cfgs[1].out, args.alpha)
    with open(os.path.join(out, "ab.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(format_comparison(result))
    print(f"results: {out}/a, {out}/b, {out}/ab.json")
    return EXIT_FINDING if (args.fail_if_significant and result["significant"]) else 0


def _do_compare(args) -> int:
    from sglang_dsv4_ext.repro.compare import PairingError, compare_runs, format_comparison

    try:
        result = compare_runs(args.run_a, args.run_b, args.alpha)
    except (PairingError, FileNotFoundError, ValueError) as exc:
        print(f"sglang-dsv4 repro compare: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    print(format_comparison(result))
    return EXIT_FINDING if (args.fail_if_significant and result["significant"]) else 0


def _do_reparse(args) -> int:
    from sglang_dsv4_ext.repro.reparse import http_detokenizer, local_tokenizer_decoder, reparse_run

    if args.tokenizer and args.detokenize_url:
        print("sglang-dsv4 repro reparse: give --tokenizer or --detokenize-url, not both", file=sys.stderr)
        return EXIT_USAGE
    decode = None
    if args.tokenizer:
        decode = local_tokenizer_decoder(args.tokenizer)
    elif args.detokenize_url:
        decode = http_detokenizer(args.detokenize_url)
    try:
        result = reparse_run(args.run_dir, decode)
    except FileNotFoundError as exc:
        print(f"sglang-dsv4 repro reparse: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"re-parsed {result['failures']} failures -> {os.path.join(args.run_dir, 'reparsed.jsonl')}")
    for verdict, row in result["origin_by_verdict"].items():
        print(f"  {verdict:<24} " + ", ".join(f"{k} {n}" for k, n in sorted(row.items())))
    return 0


def add_subparser(subparsers) -> None:
    repro = subparsers.add_parser(
        "repro",
        help="multi-turn agentic tool-call corruption harness against an OpenAI-compatible endpoint",
        description="Multi-turn agentic tool-call corruption harness. Each request gets one verdict: "
        "ok, dsml_in_content, malformed_dsml, tool_call_in_reasoning, invalid_arguments, wrong_tool, "
        "degenerate_repetition, truncated_length, http_error, timeout.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = repro.add_subparsers(dest="repro_command", metavar="ACTION")
    repro.set_defaults(func=lambda args: (repro.print_help(), EXIT_USAGE)[1])

    run = sub.add_parser("run", help="run the sessions against one endpoint",
                         description="Run N sessions x R rounds at each concurrency level against one endpoint.")
    run.add_argument("--endpoint", required=True, help="base URL, e.g. http://127.0.0.1:8000 (the router, or a server)")
    run.add_argument("--out", default=None, help="output directory (default repro-runs/run-<time>)")
    run.add_argument("--label", default="", help="a name for this run in tables, e.g. 'bf16+hicache'")
    _add_workload_args(run)
    run.set_defaults(func=_do_run)

    ab = sub.add_parser("ab", help="run the same workload against two endpoints and compare",
                        description="Run the identical workload against A then B, then compare paired requests.")
    ab.add_argument("--endpoint-a", required=True)
    ab.add_argument("--endpoint-b", required=True)
    ab.add_argument("--label-a", default="A")
    ab.add_argument("--label-b", default="B")
    ab.add_argument("--out", default=None, help="output directory (default repro-runs/ab-<time>)")
    ab.add_argument("--alpha", type=float, default=0.05, help="significance level (default 0.05)")
    ab.add_argument("--fail-if-significant", action="store_true", help=f"exit {EXIT_FINDING} on a significant difference")
    _add_workload_args(ab)
    ab.set_defaults(func=_do_ab)

    cmp_ = sub.add_parser("compare", help="compare two finished runs (paired on identical prompts)")
    cmp_.add_argument("run_a")
    cmp_.add_argument("run_b")
    cmp_.add_argument("--alpha", type=float, default=0.05, help="significance level (default 0.05)")
    cmp_.add_argument("--json", default=None, help="also write the comparison as JSON here")
    cmp_.add_argument("--fail-if-significant", action="store_true", help=f"exit {EXIT_FINDING} on a significant difference")
    cmp_.set_defaults(func=_do_compare)

    rep = sub.add_parser("reparse", help="re-parse failures' raw output with the reference DSML parser")
    rep.add_argument("run_dir")
    rep.add_argument("--detokenize-url", default=None, help="an SGLang server (prefill or decode) with /detokenize")
    rep.add_argument("--tokenizer", default=None, help="local tokenizer directory (e.g. the model checkpoint)")
    rep.set_defaults(func=_do_reparse)
