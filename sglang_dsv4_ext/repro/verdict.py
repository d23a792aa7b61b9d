"""One verdict class per request, from what the client saw.

Order of the checks (first match wins), and why:
  timeout, http_error              nothing to judge
  finish_reason == "length"        degenerate_repetition if the text loops, else
                                   truncated_length: a cut-off output has unclosed
                                   markup, which must not count as malformed
  tool_call_in_reasoning           DSML anywhere in reasoning_content
  malformed_dsml / dsml_in_content DSML in content: broken per the reference parser
                                   (or a tool name/arguments holding DSML fragments),
                                   or well-formed but left unparsed by the server
  degenerate_repetition            a loop in content, reasoning or arguments
  wrong_tool                       tool step: no call, an undeclared tool, or not the
                                   requested one; answer step: an undeclared tool
  invalid_arguments                not JSON, not an object, against the schema, or (tool
                                   step, exact mode) a requested value changed
  ok
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from sglang_dsv4_ext.repro import dsml

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
TRANSPORT_CLASSES = ("http_error", "timeout")


@dataclass
class Observation:
    """What came back for one request."""

    transport: str = "ok"  # "ok" | "http_error" | "timeout"
    error: str = ""
    http_status: Optional[int] = None
    finish_reason: Optional[str] = None
    content: str = ""
    reasoning: str = ""
    tool_calls: List[dict] = field(default_factory=list)  # [{"name", "arguments" (str)}]
    token_ids: Optional[List[int]] = None
    usage: Optional[dict] = None
    body_snippet: str = ""

    def raw_dict(self) -> dict:
        d = {
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

    def find(self, text: str) -> Optional[Tuple[str, int]]:
        if not text or len(text) < self.min_chars:
            return None
        pattern = re.compile(r"(.{1,%d}?)\1{%d,}" % (self.max_period, self.min_repeats - 1), re.DOTALL)
        for m in pattern.finditer(text[-65536:]):
            unit = m.group(1)
            if len(m.group(0)) >= self.min_chars and unit.strip():
                return unit, len(m.group(0)) // len(unit)
        return None


def _schema_error(schema: dict, value) -> Optional[str]:
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


def classify(
    obs: Observation,
    step: str,
    expected_tool: Optional[str],
    expected_args: Optional[dict],
    tools_by_name: Dict[str, dict],
    repetition: RepetitionRule = RepetitionRule(),
    exact_args: bool = True,
) -> Tuple[str, str]:
    """Return (class, detail) for one request; see the module docstring for the order."""
    if obs.transport == "timeout":
        return "timeout", obs.error or "request timed out"
    if obs.transport != "ok":
        return "http_error", obs.error or f"HTTP {obs.http_status}"

    arg_text = " ".join(str(c.get("arguments", "")) for c in obs.tool_calls)
    loop_text = "\n".join(t for t in (obs.reasoning, obs.content, arg_text) if t)
    if obs.finish_reason == "length":
        loop = repetition.find(loop_text)
        if loop:
            return "degenerate_repetition", f"cut at length; {loop[0][:40]!r} repeated {loop[1]}x"
        return "truncated_length", "finish_reason=length"

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

    loop = repetition.find(loop_text)
    if loop:
        return "degenerate_repetition", f"{loop[0][:40]!r} repeated {loop[1]}x"

    names = [str(c.get("name") or "") for c in obs.tool_calls]
    undeclared = [n for n in names if n not in tools_by_name]
    if undeclared:
        return "wrong_tool", f"undeclared tool {undeclared[0]!r}"
    if step == "tool":
        if not names:
            return "wrong_tool", f"no tool call (expected {expected_tool!r})"
        if expected_tool not in names:
            return "wrong_tool", f"called {names} (expected {expected_tool!r})"

    for call in obs.tool_calls:
        name = call["name"]
        raw = call.get("arguments")
        try:
            args = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError as exc:
            return "invalid_arguments", f"{name}: arguments are not JSON ({exc})"
        if not isinstance(args, dict):
            return "invalid_arguments", f"{name}: arguments are not a JSON object"
        err = _schema_error(tools_by_name[name]["function"]["parameters"], args)
        if err:
            return "invalid_arguments", f"{name}: {err}"
        if exact_args and step == "tool" and name == expected_tool and expected_args:
            for key, want in expected_args.items():
                if key not in args or not _values_equal(want, args[key]):
                    return "invalid_arguments", f"{name}: {key!r} is {args.get(key)!r}, requested {want!r}"
    return "ok", ""


def reference_origin(verdict: str, reference_class: Optional[str]) -> str:
    """Who broke a failed request, from the verdict and the raw-output re-parse."""
    if verdict in TRANSPORT_CLASSES:
        return "transport"
    if reference_class is None:
        return "unknown"
    if reference_class == "ok":
        # The model wrote a correct call; the client did not get it.
        return "parser_or_serving"
    return "model_output"
