"""An independent, strict reference parser for DeepSeek's DSML tool-call markup.

Why a second parser: SGLang's detector (``srt/function_call/deepseekv32_detector.py``,
subclassed as ``DeepSeekV4Detector``) is lenient and fails closed: it searches with
regexes, drops an invoke it cannot parse and returns the prose. When a client sees no
tool call, only a parser that reads the *raw* model output (token ids decoded with
special tokens kept) can say whether the model wrote broken markup (model-output
corruption) or wrote good markup that the serving path lost (parser/serving fault).
This module shares no code with SGLang's detector on purpose.

The grammar (DeepSeek-V4; V3.2 names the block ``function_calls``)::

    prose? <｜DSML｜tool_calls>
             ( <｜DSML｜invoke name="NAME"> BODY </｜DSML｜invoke>
             | <｜DSML｜invoke name="NAME"/> )+
           </｜DSML｜tool_calls>
    BODY  := ( <｜DSML｜parameter name="P" string="true|false">VALUE</｜DSML｜parameter> )*
           | a JSON object
    VALUE := raw text when string="true", a JSON value when string="false"

Whitespace may separate tags. Anything else is an error: unknown tags or attributes,
bad nesting, unclosed tags, text between tags, DSML fragments outside a well-formed
tag (e.g. a lost ``<`` or a mangled marker), invalid JSON, duplicate parameters, or an
invoke outside a block.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

DSML_MARKER = "\uff5cDSML\uff5c"  # "｜DSML｜", fullwidth vertical lines
BLOCK_TAGS = ("tool_calls", "function_calls")
THINK_START = "<think>"
THINK_END = "</think>"
EOS_TOKEN = "<\uff5cend\u2581of\u2581sentence\uff5c>"

# A complete DSML tag: optional "/", marker, tag name, attributes, optional "/".
_TAG_RE = re.compile(
    r"<(?P<close>/?)" + re.escape(DSML_MARKER) + r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"(?P<attrs>(?:\s+[A-Za-z_][\w-]*=\"[^\"<>]*\")*)\s*(?P<selfclose>/?)>"
)
_ATTR_RE = re.compile(r"([A-Za-z_][\w-]*)=\"([^\"]*)\"")
# Left-overs that betray markup: the marker word (also with ASCII bars or a lost bar),
# and DSML tag names written as tags without their marker.
FRAGMENT_RE = re.compile(
    r"DSML|\uff5c\s*DSM|<\s*/?\s*(?:invoke|parameter|tool_calls|function_calls)\b"
)
_TOOL_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


def _reject_constant(value: str):
    raise ValueError(f"non-standard JSON constant {value}")


def json_strict(text: str):
    """``json.loads`` that rejects NaN/Infinity (the detector does too)."""
    return json.loads(text, parse_constant=_reject_constant)


def has_dsml_fragment(text: Optional[str]) -> bool:
    """True when ``text`` holds anything that looks like DSML markup, complete or not."""
    return bool(text) and FRAGMENT_RE.search(text) is not None


def is_clean_tool_name(name: str) -> bool:
    return bool(_TOOL_NAME_RE.match(name or ""))


@dataclass
class DsmlCall:
    name: str
    arguments: dict
    body_format: str  # "parameters" | "json" | "empty"


@dataclass
class DsmlParse:
    """Result of :func:`parse`. ``well_formed`` means markup was found and had no error."""

    has_markup: bool
    calls: List[DsmlCall] = field(default_factory=list)
    errors: List[str] = field(default_factory=list)
    prose_before: str = ""
    trailing_text: str = ""

    @property
    def well_formed(self) -> bool:
        return self.has_markup and not self.errors

    def as_dict(self) -> dict:
        return {
            "has_markup": self.has_markup,
            "well_formed": self.well_formed,
            "errors": list(self.errors),
            "calls": [
                {"name": c.name, "arguments": c.arguments, "body_format": c.body_format}
                for c in self.calls
            ],
            "prose_before": self.prose_before[-200:],
            "trailing_text": self.trailing_text[:200],
        }


def _snippet(text: str, pos: int, width: int = 40) -> str:
    return repr(text[max(0, pos - width // 2) : pos + width // 2])


def _attrs(raw: str) -> dict:
    return {m.group(1): m.group(2) for m in _ATTR_RE.finditer(raw)}


def parse(text: str) -> DsmlParse:
    """Parse ``text`` (the answer part of a model output) strictly; never raises."""
    text = text or ""
    tags = list(_TAG_RE.finditer(text))
    result = DsmlParse(has_markup=bool(tags) or has_dsml_fragment(text))
    if not result.has_markup:
        result.prose_before = text
        return result

    errors = result.errors
    state = "out"  # out -> block -> invoke -> param
    blocks_seen = 0
    cursor = 0
    invoke_name = ""
    invoke_start = 0
    params: dict = {}
    param_name = ""
    param_is_string = True
    param_start = 0

    def gap_check(start: int, end: int, where: str) -> None:
        gap = text[start:end]
        if gap.strip():
            errors.append(f"unexpected text {where} at offset {start}: {gap.strip()[:60]!r}")

    for m in tags:
        name, closing, selfclose = m.group("name"), m.group("close") == "/", m.group("selfclose") == "/"
        attrs = _attrs(m.group("attrs") or "")
        gap_start, gap_end = cursor, m.start()
        cursor = m.end()

        if state == "param":
            if closing and name == "parameter" and not attrs and not selfclose:
                value = text[param_start:m.start()]
                if FRAGMENT_RE.search(value):
                    errors.append(f"DSML fragment inside parameter {param_name!r}")
                if param_is_string:
                    params[param_name] = value.strip()
                else:
                    try:
                        params[param_name] = json_strict(value.strip())
                    except ValueError as exc:
                        errors.append(f"parameter {param_name!r} (string=\"false\") is not JSON: {exc}")
                state = "invoke"
                continue
            errors.append(f"unclosed parameter {param_name!r}: found {m.group(0)!r} at offset {m.start()}")
            break

        if state == "out":
            if blocks_seen == 0:
                result.prose_before = text[gap_start:gap_end]
            else:
                gap_check(gap_start, gap_end, "between tool-call blocks")
            if name in BLOCK_TAGS and not closing and not selfclose and not attrs:
                state = "block"
                blocks_seen += 1
                continue
            if name == "invoke":
                errors.append(f"invoke outside a tool-call block at offset {m.start()}")
            else:
                errors.append(f"unexpected tag {m.group(0)!r} at offset {m.start()} (expected <{DSML_MARKER}tool_calls>)")
            break

        if state == "block":
            gap_check(gap_start, gap_end, "inside tool-call block")
            if name in BLOCK_TAGS and closing and not attrs and not selfclose:
                state = "out"
                continue
            if name == "invoke" and not closing:
                if set(attrs) != {"name"} or not attrs.get("name", "").strip():
                    errors.append(f"invoke tag needs exactly one non-empty name attribute: {m.group(0)!r}")
                    break
                invoke_name = attrs["name"].strip()
                if not is_clean_tool_name(invoke_name):
                    errors.append(f"invoke name {invoke_name!r} is not a valid tool name")
                if selfclose:
                    result.calls.append(DsmlCall(invoke_name, {}, "empty"))
                    continue
                state, params, invoke_start = "invoke", {}, m.end()
                continue
            errors.append(f"unexpected tag {m.group(0)!r} inside tool-call block at offset {m.start()}")
            break

        if state == "invoke":
            if name == "parameter" and not closing and not selfclose:
                gap_check(gap_start, gap_end, f"inside invoke {invoke_name!r}")
                if set(attrs) != {"name", "string"} or attrs["string"] not in ("true", "false"):
                    errors.append(
                        f"parameter tag needs name=\"...\" and string=\"true|false\": {m.group(0)!r}"
                    )
                    break
                param_name = attrs["name"]
                if param_name in params:
                    errors.append(f"duplicate parameter {param_name!r} in invoke {invoke_name!r}")
                param_is_string = attrs["string"] == "true"
                param_start = m.end()
                state = "param"
                continue
            if name == "invoke" and closing and not attrs and not selfclose:
                body = text[invoke_start:m.start()]
                if params:
                    gap_check(gap_start, gap_end, f"inside invoke {invoke_name!r}")
                    result.calls.append(DsmlCall(invoke_name, dict(params), "parameters"))
                elif body.strip().startswith("{"):
                    try:
                        args = json_strict(body.strip())
                    except ValueError as exc:
                        errors.append(f"JSON body of invoke {invoke_name!r} does not parse: {exc}")
                        args = None
                    if args is not None and not isinstance(args, dict):
                        errors.append(f"JSON body of invoke {invoke_name!r} is not an object")
                    elif args is not None:
                        result.calls.append(DsmlCall(invoke_name, args, "json"))
                elif body.strip():
                    errors.append(f"invoke {invoke_name!r} body is neither parameters nor JSON: {body.strip()[:60]!r}")
                else:
                    result.calls.append(DsmlCall(invoke_name, {}, "empty"))
                state = "block"
                continue
            errors.append(f"unexpected tag {m.group(0)!r} inside invoke {invoke_name!r} at offset {m.start()}")
            break

    if not errors:
        if state != "out":
            errors.append(f"markup ends inside {state!r} (unclosed tag)")
        elif blocks_seen == 0:
            errors.append("DSML fragments without a tool-call block")
        else:
            # Text after the block is dropped by SGLang; it is not corruption by itself
            # unless it holds DSML fragments (checked below).
            result.trailing_text = text[cursor:]
    # Fragments outside complete tags, e.g. a mangled marker or a lost "<".
    stripped = _TAG_RE.sub(lambda m: " " * len(m.group(0)), text)
    frag = FRAGMENT_RE.search(stripped)
    if frag and not any("fragment" in e for e in errors):
        errors.append(f"DSML fragment outside a well-formed tag at offset {frag.start()}: {_snippet(text, frag.start())}")
    return result


def split_reasoning(raw: str) -> Tuple[str, str]:
    """Split a raw decoded output into (reasoning, answer) at ``</think>``.

    Strips a leading ``<think>`` and a trailing end-of-sentence token. Without ``</think>``
    the whole text is the answer (non-thinking mode).
    """
    raw = raw or ""
    if raw.endswith(EOS_TOKEN):
        raw = raw[: -len(EOS_TOKEN)]
    if THINK_END in raw:
        reasoning, answer = raw.split(THINK_END, 1)
        return reasoning.replace(THINK_START, "", 1), answer
    return "", raw


def render(calls: List[Tuple[str, dict]], block: str = "tool_calls") -> str:
    """Render calls as well-formed DSML (parameter form), for tests and test servers."""
    lines = [f"<{DSML_MARKER}{block}>"]
    for name, args in calls:
        lines.append(f'<{DSML_MARKER}invoke name="{name}">')
        for key, value in args.items():
            if isinstance(value, str):
                lines.append(f'<{DSML_MARKER}parameter name="{key}" string="true">{value}</{DSML_MARKER}parameter>')
            else:
                lines.append(
                    f'<{DSML_MARKER}parameter name="{key}" string="false">{json.dumps(value)}</{DSML_MARKER}parameter>'
                )
        lines.append(f"</{DSML_MARKER}invoke>")
    lines.append(f"</{DSML_MARKER}{block}>")
    return "\n".join(lines)
