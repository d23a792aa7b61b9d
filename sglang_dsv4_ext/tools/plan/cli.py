"""``sglang-dsv4 plan``: SGLang's real DSV4 pool configurator, fp8 vs bf16 vs fp4 index-K.

For a model config (default: the bundled DeepSeek-V4-Flash config) and a KV budget per
rank, run ``DSV4PoolConfigurator.calculate_pool_sizes`` once per index-K dtype, with the
extension active (so the budget is what a server with that dtype would use), and print
tokens, per-pool sizes and bytes per token side by side. Nothing is allocated at the budget's
size (for DeepSeek-V4.1's ratio-1/2 layers, :mod:`.plan_low_ratio` reads PD and HiCache item
lengths off a real pool of 16 full pages).

Beside capacity, the other two numbers of the choice: the KV bytes one decode step reads per
request at each ``--context`` (:mod:`sglang_dsv4_ext.tools.plan.decode_reads`; the indexer reads every c4
index-K row, so this is where the dtype costs speed), and the top-k recall of each format when
``--recall-json`` gives the output of ``sglang-dsv4 recall DIR --json`` on a capture (without one,
recall is reported as not measured: the model config cannot tell it).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys

from sglang_dsv4_ext.config import ENV_FP4_BUDGET, ExtConfig, Fp4Budget, IndexKDtype, configured, load_config
from sglang_dsv4_ext.errors import Dsv4ExtError, InputFileError, PlanInputError
from sglang_dsv4_ext.tools import exit_codes, input_files
from sglang_dsv4_ext.tools.cli import _SUMMARIES
from sglang_dsv4_ext.tools.plan import decode_reads
from sglang_dsv4_ext.tools.plan import low_ratio as plan_low_ratio
from sglang_dsv4_ext.tools.sglang_cpu import dsv4_model
from sglang_dsv4_ext.tools.tool_support.arg_types import finite_float, int_at_least, whole_number

GIB = 1 << 30
RECALL_JSON_LIMIT = 64 * input_files.MIB  # recall --json is one row per layer, format and k: kilobytes


def plan_one(
    model: dsv4_model.Dsv4Model,
    config: ExtConfig,
    *,
    kv_budget_bytes: int,
    max_running_requests: int,
    swa_full_tokens_ratio: float | None,
    chunked_prefill_size: int,
    mtp: bool,
    start_layer: int,
    end_layer: int,
) -> dict[str, object]:
    """Size the pools as a server with ``config`` would (its index-K dtype and fp4 budget reach the sizing hooks)."""
    from sglang.srt.mem_cache.deepseek_v4_memory_pool import _num_dsv4_physical_kv_pages

    dtype = config.index_k_dtype
    fields = dict(max_running_requests=max_running_requests, chunked_prefill_size=chunked_prefill_size)
    if swa_full_tokens_ratio is not None:
        # What SGLang's arg hook records when the operator passes --swa-full-tokens-ratio.
        fields.update(swa_full_tokens_ratio=swa_full_tokens_ratio, _swa_full_tokens_ratio_explicitly_set=True)
    if dtype == IndexKDtype.FP4:
        fields["enable_deepseek_v4_fp4_indexer"] = True
    speculative = None
    if mtp:
        speculative = "EAGLE"
        fields.update(
            speculative_algorithm="EAGLE",
            speculative_num_draft_tokens=2,
            speculative_num_steps=1,
            speculative_eagle_topk=1,
        )
    with configured(config), dsv4_model.cpu_server_args(**fields):
        kvc = dsv4_model.kv_cache_configurator_stub(
            model, start_layer=start_layer, end_layer=end_layer, speculative=speculative
        )
        configurator = dsv4_model.make_configurator(kvc)
        try:
            pool = configurator.calculate_pool_sizes(kv_budget_bytes, dsv4_model.PAGE_SIZE)
        except (RuntimeError, ValueError) as exc:  # SGLang's own refusal (e.g. the budget is too small)
            raise PlanInputError(
                f"SGLang's DSV4PoolConfigurator refuses a {kv_budget_bytes / GIB:g} GiB budget ({dtype}): {exc}"
            ) from None
        low_ratio = plan_low_ratio.plan_entries(model, kvc, configurator, pool, start=start_layer, end=end_layer)
    c4_layers = configurator.num_layers(4)
    index_page = dsv4_model.PAGE_SIZE // 4
    c4_logical = pool.c128_max_total_num_tokens * 32  # the pool's indexer size (DeepSeekV4TokenToKVPool.__init__)
    index_pages = _num_dsv4_physical_kv_pages(c4_logical, index_page, dsv4_model.PAGE_SIZE)
    index_k_bytes = c4_layers * index_pages * index_page * configurator.indexer_bytes_per_token
    return {
        "index_k_dtype": dtype,
        "indexer_bytes_per_token": configurator.indexer_bytes_per_token,
        "bytes_per_full_token": configurator.bytes_per_full_token,
        "index_k_bytes_per_full_token": c4_layers * configurator.indexer_bytes_per_token / 4,
        "full_tokens": pool.full_max_total_num_tokens,
        "swa_tokens": pool.swa_max_total_num_tokens,
        "c4_tokens": pool.c4_max_total_num_tokens,
        "c128_tokens": pool.c128_max_total_num_tokens,
        "c4_state_slots": pool.c4_state_pool_size,
        "c128_state_slots": pool.c128_state_pool_size,
        "index_k_pool_bytes": index_k_bytes,
        "c4_index_layers": c4_layers,
        "swa_cap_mode": configurator.swa_cap_tokens is not None,
        **low_ratio,  # DeepSeek-V4.1's ratio-1/2 pools; nothing for a model without them
    }


def _load_model(args: argparse.Namespace) -> dsv4_model.Dsv4Model:
    if args.model is not None and args.model_config is not None:
        raise PlanInputError(f"--model {args.model} and --model-config {args.model_config!r}: give one of them")
    return dsv4_model.load_model(args.model_config, bundled=args.model or "v4-flash")


def build_pool_plan(args: argparse.Namespace) -> dict[str, object]:
    from sglang_dsv4_ext.runtime import activation

    model = _load_model(args)
    end_layer = model.num_hidden_layers if args.end_layer is None else args.end_layer
    if not 0 <= args.start_layer < end_layer <= model.num_hidden_layers:
        raise PlanInputError(
            f"--start-layer {args.start_layer} / --end-layer {end_layer}: need 0 <= start < end <= "
            f"{model.num_hidden_layers}"
        )
    plan_low_ratio.refuse_unsupported(model, mtp=args.mtp, stage=(args.start_layer, end_layer))
    _check_contexts(args.context, model)
    activation.activate()
    budget = int(args.kv_budget_gib * GIB)
    results = {}
    sizing = dict(
        kv_budget_bytes=budget,
        max_running_requests=args.max_running_requests,
        swa_full_tokens_ratio=None if args.cap_mode else args.swa_full_tokens_ratio,
        chunked_prefill_size=args.chunked_prefill_size,
        mtp=args.mtp,
        start_layer=args.start_layer,
        end_layer=end_layer,
    )
    shell = load_config()  # the other settings as this shell sets them
    for dtype in args.dtypes:
        results[dtype] = plan_one(model, dataclasses.replace(shell, index_k_dtype=dtype), **sizing)
    if IndexKDtype.FP4 in results:
        # What SGLang budgets for its fp4 indexer without the extension (its deliberate fp8 estimate),
        # beside what the extension budgets (the 68 B allocated): capacity an operator did not ask to change.
        stock_budget = dataclasses.replace(shell, index_k_dtype=IndexKDtype.FP4, fp4_budget=Fp4Budget.STOCK)
        stock = plan_one(model, stock_budget, **sizing)
        results[IndexKDtype.FP4]["stock_estimate"] = {k: stock[k] for k in ("indexer_bytes_per_token", "full_tokens")}
    return {
        "model": model.name,
        "layers": model.layer_counts(args.start_layer, end_layer),
        "stage": [args.start_layer, end_layer],
        "kv_budget_bytes": budget,
        "max_running_requests": args.max_running_requests,
        "swa_mode": "cap" if args.cap_mode else f"ratio {args.swa_full_tokens_ratio}",
        "mtp": args.mtp,
        "dtypes": results,
        # added after the 0.3.0 fields (after them, which keep their order and values)
        "decode_reads": decode_reads.decode_reads_table(
            model, args.context, args.dtypes, start_layer=args.start_layer, end_layer=end_layer
        ),
        "recall": recall_by_format(args.recall_json, model.index_topk, args.dtypes),
    }


def recall_by_format(path: str | None, k: int, dtypes: list[str]) -> dict[str, object]:
    """Mean top-``k`` recall per format (rows-weighted over layers) from ``sglang-dsv4 recall --json``
    output; ``None`` for a format with no measured rows. Without ``path``: not measured."""
    if path is None:
        return {"source": None, "k": k, "by_format": {d: None for d in dtypes}}
    try:
        text = input_files.read_text(path, limit=RECALL_JSON_LIMIT)
    except InputFileError as exc:
        raise PlanInputError(
            f"--recall-json {path!r}: not the output of `sglang-dsv4 recall DIR --json` ({exc})"
        ) from None
    try:
        rows = json.loads(text)["rows"]
        measured = {
            d: [
                (r["rows"], r["recall"])
                for r in rows
                if r["format"] == d and r["k"] == k and r["recall"] is not None and r["rows"]
            ]
            for d in dtypes
        }
        for pairs in measured.values():
            for count, value in pairs:
                _check_recall_row(count, value)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PlanInputError(
            f"--recall-json {path!r}: not the output of `sglang-dsv4 recall DIR --json` ({type(exc).__name__}: {exc})"
        ) from None
    by_format = {d: (sum(n * r for n, r in m) / sum(n for n, _ in m) if m else None) for d, m in measured.items()}
    return {
        "source": path,
        "k": k,
        "by_format": by_format,
        "rows": {d: sum(n for n, _ in m) for d, m in measured.items()},
    }


def _check_recall_row(count, value) -> None:
    """A recall is a fraction of k (a number in [0, 1]) over a whole number of rows; anything else was not
    written by ``recall --json`` (json also reads ``NaN``)."""
    if type(count) is not int or count < 0:
        raise ValueError(f"rows = {count!r}: allowed: a whole number >= 0")
    if type(value) not in (int, float) or not 0.0 <= value <= 1.0:  # also refuses NaN
        raise ValueError(f"recall = {value!r}: allowed: a number in [0, 1]")


def _print_table(plan: dict[str, object]) -> None:
    dtypes = list(plan["dtypes"])
    rows = [
        ("index-K B/token/layer", "indexer_bytes_per_token", "{:d}"),
        ("index-K B/full token", "index_k_bytes_per_full_token", "{:.2f}"),
        ("bytes/full token", "bytes_per_full_token", "{:.2f}"),
        ("full tokens", "full_tokens", "{:,}"),
        ("SWA tokens", "swa_tokens", "{:,}"),
        ("c4 tokens", "c4_tokens", "{:,}"),
        ("c128 tokens", "c128_tokens", "{:,}"),
        ("c4 state slots", "c4_state_slots", "{:,}"),
        ("index-K pool GiB", "index_k_pool_bytes", None),
    ]
    layers = ", ".join(f"{count} x r{ratio}" for ratio, count in plan["layers"].items())
    print(f"{plan['model']}: layers [{plan['stage'][0]}, {plan['stage'][1]}) = {layers}")
    print(
        f"KV budget {plan['kv_budget_bytes'] / GIB:.2f} GiB per rank, max running requests "
        f"{plan['max_running_requests']}, SWA {plan['swa_mode']}, MTP {'on' if plan['mtp'] else 'off'}"
    )
    print()
    print(f"{'':<24}" + "".join(f"{d:>16}" for d in dtypes))
    for label, key, fmt in rows:
        cells = []
        for d in dtypes:
            value = plan["dtypes"][d][key]
            cells.append(f"{value / GIB:.3f}" if fmt is None else fmt.format(value))
        print(f"{label:<24}" + "".join(f"{c:>16}" for c in cells))
    fp4 = plan["dtypes"].get(IndexKDtype.FP4, {})
    stock = fp4.get("stock_estimate")
    if stock:
        print(
            f"fp4: budgeted at {fp4['indexer_bytes_per_token']} B per index-K token (what the pool "
            f"allocates); SGLang's stock estimate of {stock['indexer_bytes_per_token']} B gives "
            f"{stock['full_tokens']:,} full tokens ({ENV_FP4_BUDGET}=stock keeps it)"
        )
    if IndexKDtype.FP8 in plan["dtypes"] and len(dtypes) > 1:
        base = plan["dtypes"][IndexKDtype.FP8]["full_tokens"]
        print(f"{'tokens vs fp8':<24}" + "".join(f"{plan['dtypes'][d]['full_tokens'] / base:>16.4f}" for d in dtypes))
    plan_low_ratio.print_low_ratio(plan)
    _print_decode_reads(plan, dtypes)
    _print_recall(plan["recall"], dtypes)


def _print_decode_reads(plan: dict[str, object], dtypes: list[str]) -> None:
    print()
    if "not_modelled" in plan["decode_reads"]:
        print(f"decode: KV bytes one step reads per request: not modelled ({plan['decode_reads']['not_modelled']})")
        return
    print("decode: KV bytes one step reads per request, MB (indexer share; vs fp8)")
    print(f"{'':<24}" + "".join(f"{d:>24}" for d in dtypes))
    for context, per in plan["decode_reads"].items():
        cells = [
            f"{per[d]['total'] / 1e6:.1f} ({100 * per[d]['indexer_share']:.0f}%; {per[d]['vs_fp8']:.3f})"
            for d in dtypes
        ]
        print(f"{'context ' + f'{int(context):,}':<24}" + "".join(f"{c:>24}" for c in cells))
    for card, rows in decode_reads.MEASURED_INDEXER_TIME.items():
        print(
            f"indexer logits time, measured on an {card} (not SM120; kernels_sm120/NOTES.md): "
            + "; ".join(f"{label} {low:.2f}-{high:.2f}x" for label, low, high in rows)
        )


def _print_recall(recall: dict[str, object], dtypes: list[str]) -> None:
    if recall["source"] is None:
        print(
            f"top-{recall['k']} recall: not measured (the config cannot tell it): run `sglang-dsv4 recall DIR "
            f"--json > recall.json` on a capture and pass --recall-json recall.json"
        )
        return
    cells = ["n/a" if recall["by_format"][d] is None else f"{recall['by_format'][d]:.4f}" for d in dtypes]
    print(
        f"{'top-' + str(recall['k']) + ' recall':<24}"
        + "".join(f"{c:>16}" for c in cells)
        + f"   ({recall['source']}; n/a: no captured row with more than {recall['k']} keys)"
    )


def run(args: argparse.Namespace) -> int:
    logging.getLogger("sglang").setLevel(logging.WARNING)
    logging.getLogger("sglang_dsv4_ext").setLevel(logging.WARNING)
    try:
        plan = build_pool_plan(args)
    except Dsv4ExtError as exc:  # a refusal naming the input (flag, config field, environment variable)
        print(f"sglang-dsv4 plan: error: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    if args.json:
        json.dump(plan, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _print_table(plan)
    return exit_codes.OK


def _context_list(text: str) -> list[int]:
    """Comma-separated token counts, each a whole number >= 1 in ASCII digits (the commands' one number rule,
    :func:`~sglang_dsv4_ext.tools.tool_support.arg_types.whole_number`), optionally with K (x1024) or M (x1024^2).
    The model's own limit is checked once the model is known (:func:`_check_contexts`)."""
    values = []
    for item in text.split(","):  # as written: no spaces around the items (the one rule)
        scale = {"K": 1 << 10, "M": 1 << 20}.get(item[-1:].upper(), 1)
        count = whole_number(item[:-1] if scale > 1 else item)
        if count is None or count * scale < 1:
            raise argparse.ArgumentTypeError(
                f"{text!r}: allowed: comma-separated context lengths in tokens >= 1, e.g. 8192,128K,1M"
            )
        values.append(count * scale)
    return values


def _check_contexts(contexts: list[int], model: dsv4_model.Dsv4Model) -> None:
    """A context past the model's limit (``max_position_embeddings``) is no request SGLang would serve."""
    past = [n for n in contexts if n > model.context_len]
    if past:
        raise PlanInputError(
            f"--context {past[0]:,} tokens is past the model's limit of {model.context_len:,} "
            f"(max_position_embeddings of {model.name}); allowed: 1..{model.context_len}"
        )


def _dtype_list(text: str):
    values = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in values if v not in IndexKDtype.values()]
    if bad or not values:
        raise argparse.ArgumentTypeError(
            f"--dtypes {text!r}: allowed values are {', '.join(IndexKDtype.values())} (comma-separated)"
        )
    return [IndexKDtype(v) for v in values]


_positive_float = finite_float(minimum=0, inclusive=False)
_positive_int = int_at_least(1)
_non_negative_int = int_at_least(0)
_chunk_size = int_at_least(1, also=-1, also_means="chunked prefill off")


def add_subparser(subparsers) -> None:
    parser = subparsers.add_parser(
        "plan",
        help=_SUMMARIES["plan"],
        description="Size DeepSeek-V4 KV pools with SGLang's own DSV4PoolConfigurator (CPU only, nothing "
        "allocated) for each index-K dtype and print tokens, pool sizes and bytes per token.",
    )
    parser.add_argument(
        "--model-config",
        default=None,
        metavar="PATH",
        help="a DeepSeek-V4 or V4.1 config.json (or its directory); default: bundled DeepSeek-V4-Flash",
    )
    parser.add_argument(
        "--model",
        default=None,
        choices=list(dsv4_model.BUNDLED_MODELS),
        help="a bundled architecture config instead of --model-config (default v4-flash)",
    )
    parser.add_argument(
        "--kv-budget-gib",
        type=_positive_float,
        default=12.0,
        help="KV-cache bytes available per rank, GiB (default 12)",
    )
    parser.add_argument(
        "--max-running-requests",
        type=_positive_int,
        default=256,
        help="per rank; sizes the request-scoped c128 state (default 256)",
    )
    parser.add_argument(
        "--swa-full-tokens-ratio",
        type=_positive_float,
        default=0.1,
        help="SWA tokens per full token (SGLang's --swa-full-tokens-ratio, default 0.1)",
    )
    parser.add_argument(
        "--cap-mode", action="store_true", help="size SWA by SGLang's cap mode (ratio not given) instead of the ratio"
    )
    parser.add_argument(
        "--chunked-prefill-size",
        type=_chunk_size,
        default=8192,
        help="SGLang's --chunked-prefill-size; -1 turns chunking off (default 8192)",
    )
    parser.add_argument("--mtp", action="store_true", help="MTP speculative decoding on (EAGLE, 2 draft tokens)")
    parser.add_argument(
        "--start-layer", type=_non_negative_int, default=0, help="pipeline stage start layer (default 0)"
    )
    parser.add_argument("--end-layer", type=_positive_int, default=None, help="pipeline stage end layer (default: all)")
    parser.add_argument(
        "--dtypes",
        type=_dtype_list,
        default=list(IndexKDtype),
        help="comma-separated index-K dtypes to compare (default fp8,bf16,fp4)",
    )
    parser.add_argument(
        "--context",
        type=_context_list,
        default=list(decode_reads.DEFAULT_CONTEXTS),
        help="context lengths (tokens; K/M suffixes) for the decode bytes per request (default 8K,32K,128K,1M)",
    )
    parser.add_argument(
        "--recall-json",
        metavar="PATH",
        default=None,
        help="output of `sglang-dsv4 recall DIR --json` on a capture: show each format's top-k "
        "recall beside tokens and decode bytes",
    )
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.set_defaults(func=run)
