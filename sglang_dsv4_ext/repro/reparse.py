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
from typing import Callable, Dict, List, Optional

from sglang_dsv4_ext.repro import dsml
from sglang_dsv4_ext.repro.verdict import Observation, RepetitionRule, classify, reference_origin


def reference_verdict(
    raw: str,
    finish_reason: Optional[str],
    step: str,
    expected_tool: Optional[str],
    expected_args: Optional[dict],
    tools_by_name: Dict[str, dict],
    repetition: RepetitionRule = RepetitionRule(),
    exact_args: bool = True,
) -> dict:
    reasoning, answer = dsml.split_reasoning(raw)
    parsed = dsml.parse(answer)
    obs = Observation(finish_reason=finish_reason, reasoning=reasoning)
    if parsed.well_formed:
        obs.content = parsed.prose_before + parsed.trailing_text
        obs.tool_calls = [{"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)} for c in parsed.calls]
    else:
        # Keep the markup in content so classify() reports it as malformed.
        obs.content = answer
    cls, detail = classify(obs, step, expected_tool, expected_args, tools_by_name, repetition, exact_args)
    return {"reference_class": cls, "reference_detail": detail, "dsml": parsed.as_dict()}


def attach_reference(record: dict, raw: Optional[str], raw_source: str, tools_by_name, repetition, exact_args) -> None:
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


def local_tokenizer_decoder(path: str) -> Callable[[List[int]], str]:
    """Decoder from a local tokenizer directory (transformers; offline only)."""
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:  # pragma: no cover - transformers ships with SGLang
        raise SystemExit(f"--tokenizer needs the 'transformers' package: {exc}")
    tok = AutoTokenizer.from_pretrained(path, trust_remote_code=True, local_files_only=True)
    return lambda ids: tok.decode(ids, skip_special_tokens=False)


def http_detokenizer(url: str, timeout: float = 30.0) -> Callable[[List[int]], str]:
    """Synchronous decoder through a server's ``/detokenize`` endpoint (stdlib HTTP)."""
    import urllib.request

    endpoint = url.rstrip("/")
    if not endpoint.endswith("/detokenize"):
        endpoint += "/detokenize"

    def decode(ids: List[int]) -> str:
        body = json.dumps({"tokens": ids, "skip_special_tokens": False}).encode()
        req = urllib.request.Request(endpoint, data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())["text"]

    return decode


def reparse_run(run_dir: str, decode: Optional[Callable[[List[int]], str]], out_name: str = "reparsed.jsonl") -> dict:
    """Re-parse every failure in ``run_dir/requests.jsonl``; write ``out_name`` and return counts."""
    import os

    from sglang_dsv4_ext.repro.scenario import TOOLS_BY_NAME

    src = os.path.join(run_dir, "requests.jsonl")
    if not os.path.exists(src):
        raise FileNotFoundError(f"{src} not found: is {run_dir!r} a repro run directory?")
    with open(os.path.join(run_dir, "summary.json")) as f:
        cfg = json.load(f).get("config", {})
    rep = RepetitionRule(**cfg.get("repetition", {}))
    exact = cfg.get("exact_args", True)
    table: Dict[str, Dict[str, int]] = {}
    n_failures = 0
    with open(src) as fin, open(os.path.join(run_dir, out_name), "w") as fout:
        for line in fin:
            rec = json.loads(line)
            if rec["verdict"] != "ok":
                n_failures += 1
                raw, source = None, "none"
                ids = (rec.get("raw") or {}).get("response_token_ids")
                if ids is not None and decode is not None:
                    try:
                        raw, source = decode(ids), "token_ids"
                    except Exception as exc:  # keep going; say why in the record
                        source = f"decode failed: {exc}"
                elif ids is None and rec.get("raw"):
                    raw, source = raw_from_visible(rec["raw"])
                attach_reference(rec, raw, source, TOOLS_BY_NAME, rep, exact)
                row = table.setdefault(rec["verdict"], {})
                origin = rec["reference"]["origin"]
                row[origin] = row.get(origin, 0) + 1
            fout.write(json.dumps(rec, ensure_ascii=False) + "\n")
    return {"failures": n_failures, "origin_by_verdict": table}
