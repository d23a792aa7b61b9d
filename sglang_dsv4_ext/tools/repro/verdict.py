"""One verdict class per request, from what the client saw.

Order of the checks (first match wins), and why:
  timeout, http_error,             nothing to judge (transport classes: excluded from the
  protocol_error, stream_cut       corruption rate and from A/B). protocol_error: HTTP 200
                                   with a body that is not a chat completion (not JSON, or
                                   JSON of another shape). stream_cut: a stream that ended
                                   before any chunk carried a finish_reason (the partial
                                   output is kept as evidence, never judged: half the
                                   arguments of a cut call are not the model's arguments)
  aborted                          a finish_reason outside stop/length/tool_calls: SGLang's
                                   graceful abort (scheduler or session-controller abort
                                   without a status code) ends the request with
                                   finish_reason "abort" and its partial output
                                   (serving_chat.py; tokenizer_manager.py
                                   _handle_abort_finish_reason), and a non-streamed reply
                                   whose finish_reason is null (client.py: a request that
                                   did not finish). Transport too: the partial
                                   output is kept raw and never judged, like a cut stream
  finish_reason == "length"        degenerate_repetition if the text loops, else
                                   truncated_length: a cut-off output has unclosed
                                   markup, which must not count as malformed
  tool_call_in_reasoning           DSML anywhere in reasoning_content
  malformed_dsml / dsml_in_content DSML in content: broken per the reference parser
                                   (or a tool name/arguments holding DSML fragments),
                                   or well-formed but left unparsed by the server
  degenerate_repetition            a loop in content, reasoning or arguments
  wrong_tool                       a call of an undeclared tool
  invalid_arguments                a call's arguments: not JSON, not an object, or against
                                   the tool's schema
  wrong_tool                       tool step: anything but exactly one call of the requested
                                   tool (none, another tool, another call alongside, the same
                                   call twice). An answer step may call a declared tool with
                                   valid arguments: its user turn asks for nothing specific,
                                   and a model continuing the task is not corrupt output
  invalid_arguments                tool step, exact mode: the arguments are not exactly the
                                   requested ones (a value changed, one missing, one added)
  ok
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from sglang_dsv4_ext.tools.repro import dsml

CLASSES = (
    "ok",
    "dsml_in_content",
    "malformed_dsml",
    "tool_call_in_reasoning",
    "invalid_arguments",
    "wrong_tool",
    "degenerate_repetition",
    "truncated_length",
    "http_error",
    "protocol_error",
    "stream_cut",
    "aborted",
    "timeout",
)
# Classes that mean the model output (or its parsing) was broken: the incident metric.
CORRUPTION_CLASSES = (
    "dsml_in_content",
    "malformed_dsml",
    "tool_call_in_reasoning",
    "invalid_arguments",
    "wrong_tool",
    "degenerate_repetition",
)
# Classes that say nothing about the output: excluded from paired corruption tests.
TRANSPORT_CLASSES = ("http_error", "protocol_error", "stream_cut", "aborted", "timeout")
# The finish reasons of a choice that ended on its own (OpenAI's, as SGLang sends them); any other
# ("abort", or one this version does not know) ended the request from outside the model.
ENDED_BY_MODEL = ("stop", "length", "tool_calls")


@dataclass
class Observation:
    """What came back for one request."""

    transport: str = "ok"  # "ok" or a transport class
    error: str = ""
    http_status: int | None = None
    finish_reason: str | None = None
    content: str = ""
    reasoning: str = ""
    tool_calls: list[dict] = field(default_factory=list)  # [{"name", "arguments" (str)}]
    token_ids: list[int] | None = None
    usage: dict | None = None
    body_snippet: str = ""
    stream_note: str = ""  # a stream judged although it ended without [DONE] (see client.py)

    def raw_dict(self) -> dict:
        d: dict[str, object] = {
            "content": self.content,
            "reasoning_content": self.reasoning,
            "tool_calls": self.tool_calls,
            "finish_reason": self.finish_reason,
        }
        if self.token_ids is not None:
            d["response_token_ids"] = self.token_ids
        if self.error:
            d["error"] = self.error
        if self.body_snippet:
            d["body"] = self.body_snippet
        return d


@dataclass(frozen=True)
class RepetitionRule:
    """A substring of 1..max_period chars repeated >= min_repeats times, >= min_chars long."""

    min_repeats: int = 8
    min_chars: int = 160
    max_period: int = 200

    def find(self, text: str) -> tuple[str, int] | None:
        if not text or len(text) < self.min_chars:
            return None
        pattern = re.compile(rf"(.{{1,{self.max_period}}}?)\1{{{self.min_repeats - 1},}}", re.DOTALL)
        for m in pattern.finditer(text[-65536:]):
            unit = m.group(1)
            if len(m.group(0)) >= self.min_chars and unit.strip():
                return unit, len(m.group(0)) // len(unit)
        return None


def _schema_error(schema: dict, value) -> str | None:
    from jsonschema import Draft202012Validator  # a dependency of SGLang's own stack

    errors = sorted(Draft202012Validator(schema).iter_errors(value), key=lambda e: list(e.path))
    if not errors:
        return None
    e = errors[0]
    where = "/".join(str(p) for p in e.path) or "(root)"
    return f"{where}: {e.message}"


def _values_equal(requested, got) -> bool:
    if isinstance(requested, str) and isinstance(got, str):
        return requested.strip() == got.strip()
    return requested == got


def _transport_verdict(obs: Observation) -> tuple[str, str] | None:
    if obs.transport == "ok":
        return None
    if obs.transport not in TRANSPORT_CLASSES:
        raise ValueError(f"unknown transport outcome {obs.transport!r}; known: {TRANSPORT_CLASSES}")
    return obs.transport, obs.error or (f"HTTP {obs.http_status}" if obs.http_status else obs.transport)


def _finish_verdict(obs: Observation) -> tuple[str, str] | None:
    """``aborted`` for a choice the server ended (finish_reason outside :data:`ENDED_BY_MODEL`)."""
    if obs.finish_reason is None or obs.finish_reason in ENDED_BY_MODEL:
        return None
    return "aborted", (
        f"finish_reason={obs.finish_reason!r}: the server ended the request (not stop, length or tool_calls); "
        "partial output kept, not judged"
    )[:300]


def _loop_text(obs: Observation) -> str:
    arg_text = " ".join(str(c.get("arguments", "")) for c in obs.tool_calls)
    return "\n".join(t for t in (obs.reasoning, obs.content, arg_text) if t)


def _length_verdict(obs: Observation, repetition: RepetitionRule) -> tuple[str, str] | None:
    if obs.finish_reason != "length":
        return None
    loop = repetition.find(_loop_text(obs))
    if loop:
        return "degenerate_repetition", f"cut at length; {loop[0][:40]!r} repeated {loop[1]}x"
    return "truncated_length", "finish_reason=length"


def _markup_verdict(obs: Observation) -> tuple[str, str] | None:
    if dsml.has_dsml_fragment(obs.reasoning):
        return "tool_call_in_reasoning", "DSML markup in reasoning_content"
    if dsml.has_dsml_fragment(obs.content):
        parsed = dsml.parse(obs.content)
        if parsed.well_formed:
            return "dsml_in_content", f"well-formed DSML left in content ({len(parsed.calls)} call(s))"
        return "malformed_dsml", "; ".join(parsed.errors)[:300] or "malformed DSML in content"
    for call in obs.tool_calls:
        name = str(call.get("name") or "")
        if dsml.has_dsml_fragment(name) or (name and not dsml.is_clean_tool_name(name)):
            return "malformed_dsml", f"tool name is not an identifier: {name[:80]!r}"
        if dsml.has_dsml_fragment(str(call.get("arguments") or "")):
            return "malformed_dsml", f"DSML fragment inside the arguments of {name!r}"
    return None


def _parsed_arguments(call: dict, schema: dict) -> tuple[dict | None, str]:
    """(arguments, "") or (None, why they are invalid)."""
    name, raw = call["name"], call.get("arguments")
    try:
        args = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError as exc:
        return None, f"{name}: arguments are not JSON ({exc})"
    if not isinstance(args, dict):
        return None, f"{name}: arguments are not a JSON object"
    err = _schema_error(schema, args)
    return (None, f"{name}: {err}") if err else (args, "")


def _call_set_error(names: list[str], step: str, expected_tool: str | None) -> str:
    """Why the calls are not the ones asked for ("" when they are)."""
    if step != "tool":
        return ""
    if not names:
        return f"no tool call (expected {expected_tool!r})"
    if names != [expected_tool]:
        return f"called {names} (expected exactly one call of {expected_tool!r})"
    return ""


def _exact_args_error(name: str, args: dict, expected_args: dict) -> str:
    for key, want in expected_args.items():
        if key not in args:
            return f"{name}: {key!r} is missing, requested {want!r}"
        if not _values_equal(want, args[key]):
            return f"{name}: {key!r} is {args[key]!r}, requested {want!r}"
    added = sorted(set(args) - set(expected_args))
    if added:
        return f"{name}: unrequested argument(s) {added}"
    return ""


def _calls_verdict(obs, step, expected_tool, expected_args, tools_by_name, exact_args) -> tuple[str, str]:
    names = [str(c.get("name") or "") for c in obs.tool_calls]
    undeclared = [n for n in names if n not in tools_by_name]
    if undeclared:
        return "wrong_tool", f"undeclared tool {undeclared[0]!r}"
    parsed = []
    for call in obs.tool_calls:
        args, why = _parsed_arguments(call, tools_by_name[call["name"]]["function"]["parameters"])
        if args is None:  # why says what is wrong
            return "invalid_arguments", why
        parsed.append(args)
    why = _call_set_error(names, step, expected_tool)
    if why:
        return "wrong_tool", why
    if exact_args and step == "tool" and expected_args:
        why = _exact_args_error(names[0], parsed[0], expected_args)
        if why:
            return "invalid_arguments", why
    return "ok", ""


def classify(
    obs: Observation,
    step: str,
    expected_tool: str | None,
    expected_args: dict | None,
    tools_by_name: dict[str, dict],
    repetition: RepetitionRule = RepetitionRule(),
    exact_args: bool = True,
) -> tuple[str, str]:
    """Return (class, detail) for one request; see the module docstring for the order."""
    early = _transport_verdict(obs) or _finish_verdict(obs) or _length_verdict(obs, repetition) or _markup_verdict(obs)
    if early:
        return early
    loop = repetition.find(_loop_text(obs))
    if loop:
        return "degenerate_repetition", f"{loop[0][:40]!r} repeated {loop[1]}x"
    return _calls_verdict(obs, step, expected_tool, expected_args, tools_by_name, exact_args)


def reference_origin(verdict: str, reference_class: str | None) -> str:
    """Who broke a failed request, from the verdict and the raw-output re-parse."""
    if verdict in TRANSPORT_CLASSES:
        return "transport"
    if reference_class is None:
        return "unknown"
    if reference_class == "ok":
        # The model wrote a correct call; the client did not get it.
        return "parser_or_serving"
    return "model_output"
