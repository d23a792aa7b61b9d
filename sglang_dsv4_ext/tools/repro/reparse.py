"""Re-parse failed requests from their raw output with the reference DSML parser.

The raw output is the response token ids decoded with special tokens kept: by the
server's ``/detokenize`` endpoint (SGLang has one; a router may not forward it, so a
prefill or decode server URL can be given) or offline with a local tokenizer. The
reference verdict is what a client would have seen had the server parsed that raw text
with the strict reference grammar; comparing it with the observed verdict tells a
parser/serving fault (raw output fine) from model-output corruption (raw output broken).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from typing import cast

from sglang_dsv4_ext.errors import DetokenizeError, ReproInputError
from sglang_dsv4_ext.tools.repro import dsml, rundir
from sglang_dsv4_ext.tools.repro.verdict import Observation, RepetitionRule, classify, reference_origin

Decoder = Callable[[list[int]], str]  # raises DetokenizeError (or OSError ...) when it cannot


def reference_verdict(
    raw: str,
    finish_reason: str | None,
    step: str,
    expected_tool: str | None,
    expected_args: dict | None,
    tools_by_name: dict[str, dict],
    repetition: RepetitionRule = RepetitionRule(),
    exact_args: bool = True,
) -> dict:
    reasoning, answer = dsml.split_reasoning(raw)
    parsed = dsml.parse(answer)
    obs = Observation(finish_reason=finish_reason, reasoning=reasoning)
    if parsed.well_formed:
        obs.content = parsed.prose_before + parsed.trailing_text
        obs.tool_calls = [
            {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)} for c in parsed.calls
        ]
    else:
        # Keep the markup in content so classify() reports it as malformed.
        obs.content = answer
    cls, detail = classify(obs, step, expected_tool, expected_args, tools_by_name, repetition, exact_args)
    return {"reference_class": cls, "reference_detail": detail, "dsml": parsed.as_dict()}


def attach_reference(record: dict, raw: str | None, raw_source: str, tools_by_name, repetition, exact_args) -> None:
    """Fill ``record['reference']`` for a failed request (in place)."""
    ref = {"raw_source": raw_source}
    if raw is not None:
        ref["raw_text"] = raw
        ref.update(
            reference_verdict(
                raw,
                record.get("finish_reason"),
                record["step"],
                record.get("expected_tool"),
                record.get("expected_args"),
                tools_by_name,
                repetition,
                exact_args,
            )
        )
    ref["origin"] = reference_origin(record["verdict"], ref.get("reference_class"))
    record["reference"] = ref


def raw_from_visible(raw: dict):
    """(text, source) rebuilt from what the client saw, when no token ids exist.

    Streaming (or a server without ``return_token_ids``): reasoning + content as
    delivered is the best raw text, unless the server already turned markup into
    tool_calls, which cannot be turned back into the model's exact text.
    """
    if raw.get("tool_calls"):
        return None, "none (no token ids; the output was already parsed into tool_calls)"
    content = raw.get("content") or ""
    reasoning = raw.get("reasoning_content") or ""
    return (f"{reasoning}{dsml.THINK_END}" if reasoning else "") + content, "content_only"


def origin_table(records: Iterable[dict]) -> dict[str, dict[str, int]]:
    """verdict -> {origin: count} over the failed records (the "failure origin" table)."""
    table: dict[str, dict[str, int]] = {}
    for rec in records:
        if rec["verdict"] != "ok":
            origin = (rec.get("reference") or {}).get("origin", "unknown")
            row = table.setdefault(rec["verdict"], {})
            row[origin] = row.get(origin, 0) + 1
    return table


def format_origin_table(table: dict[str, dict[str, int]]) -> list[str]:
    return [
        f"  {verdict:<24} " + ", ".join(f"{k} {n}" for k, n in sorted(row.items())) for verdict, row in table.items()
    ]


def local_tokenizer_decoder(path: str) -> Decoder:
    """Decoder from a local tokenizer directory (transformers; offline only)."""
    if not os.path.isdir(path):
        raise ReproInputError(f"--tokenizer {path}: not a directory (give the model checkpoint directory)")
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:  # transformers ships with SGLang
        raise ReproInputError(f"--tokenizer needs the 'transformers' package: {exc}") from None
    try:
        tok = AutoTokenizer.from_pretrained(path, trust_remote_code=True, local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise ReproInputError(f"--tokenizer {path}: no usable tokenizer there ({str(exc)[:300]})") from None
    # transformers types decode's result as str or a list of them; a flat list of ids decodes to one str
    return lambda ids: cast(str, tok.decode(ids, skip_special_tokens=False))


def _decode_record(rec: dict, decode: Decoder | None):
    """(raw text, source) of a failed record: its token ids decoded, or its visible output."""
    ids = (rec.get("raw") or {}).get("response_token_ids")
    if ids is None:
        return raw_from_visible(rec["raw"]) if rec.get("raw") else (None, "none")
    if decode is None:
        return None, "none (token ids recorded; give --detokenize-url or --tokenizer)"
    try:
        text = decode(ids)
    except (DetokenizeError, OSError, ValueError, LookupError, TypeError) as exc:
        return None, f"decode failed: {exc}"
    return text, "token_ids"


def _verdict_settings(run_dir: str, summary: dict):
    """(repetition rule, exact-args mode) the run was judged with, from its summary."""
    cfg = summary.get("config")
    where = os.path.join(run_dir, rundir.SUMMARY)
    if not isinstance(cfg, dict):
        raise ReproInputError(f"{where}: has no 'config' object (not written by `sglang-dsv4 repro run`?)")
    try:
        rep = RepetitionRule(**(cfg.get("repetition") or {}))
    except TypeError as exc:
        raise ReproInputError(f"{where}: config.repetition is not a repetition rule ({exc})") from None
    exact = cfg.get("exact_args", True)
    if not isinstance(exact, bool):
        raise ReproInputError(f"{where}: config.exact_args must be true or false, got {exact!r}")
    return rep, exact


def reparse_run(run_dir: str, decode: Decoder | None) -> dict:
    """Re-parse every failure of ``run_dir``; write a new reparsed file; return counts and its path."""
    from sglang_dsv4_ext.tools.repro.scenario import TOOLS_BY_NAME

    rundir.requests_path(run_dir)
    summary = rundir.load_summary(run_dir, required=True)
    rep, exact = _verdict_settings(run_dir, summary)
    _, by_key = rundir.load_run_records(run_dir, summary)  # every line checked before anything is written
    records = list(by_key.values())
    for rec in records:
        if rec["verdict"] != "ok":
            raw, source = _decode_record(rec, decode)
            attach_reference(rec, raw, source, TOOLS_BY_NAME, rep, exact)
    out = rundir.free_name(run_dir, rundir.REPARSED)
    with open(out, "x", encoding="utf-8") as fout:
        for rec in records:
            fout.write(json.dumps(rec, ensure_ascii=False) + "\n")
    failures = [r for r in records if r["verdict"] != "ok"]
    return {"failures": len(failures), "origin_by_verdict": origin_table(failures), "path": out}
