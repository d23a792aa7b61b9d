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
FRAGMENT_RE = re.compile(r"DSML|\uff5c\s*DSM|<\s*/?\s*(?:invoke|parameter|tool_calls|function_calls)\b")
_TOOL_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


def _reject_constant(value: str):
    raise ValueError(f"non-standard JSON constant {value}")


def json_strict(text: str):
    """``json.loads`` that rejects NaN/Infinity (the detector does too)."""
    return json.loads(text, parse_constant=_reject_constant)


def has_dsml_fragment(text: str | None) -> bool:
    """True when ``text`` holds anything that looks like DSML markup, complete or not."""
    if not text:
        return False
    return FRAGMENT_RE.search(text) is not None


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
    calls: list[DsmlCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
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
            "calls": [{"name": c.name, "arguments": c.arguments, "body_format": c.body_format} for c in self.calls],
            "prose_before": self.prose_before[-200:],
            "trailing_text": self.trailing_text[:200],
        }


def _snippet(text: str, pos: int, width: int = 40) -> str:
    return repr(text[max(0, pos - width // 2) : pos + width // 2])


def _attrs(raw: str) -> dict:
    return {m.group(1): m.group(2) for m in _ATTR_RE.finditer(raw)}


class _Tag:
    """One complete DSML tag found by ``_TAG_RE`` and the text gap before it."""

    def __init__(self, m: re.Match, gap_start: int):
        self.m = m
        self.name = m.group("name")
        self.closing = m.group("close") == "/"
        self.selfclose = m.group("selfclose") == "/"
        self.attrs = _attrs(m.group("attrs") or "")
        self.gap_start = gap_start

    @property
    def text(self) -> str:
        return self.m.group(0)

    def is_bare_close(self, name: str) -> bool:
        """``</｜DSML｜name>`` without attributes."""
        return self.name == name and self.closing and not self.attrs and not self.selfclose


class _Parser:
    """The strict grammar as a state machine: out -> block -> invoke -> param.

    Each ``_in_<state>`` handler consumes one tag and returns False to stop at the first error
    that makes the rest of the markup meaningless.
    """

    def __init__(self, text: str, result: DsmlParse):
        self.text = text
        self.result = result
        self.errors = result.errors
        self.state = "out"
        self.blocks_seen = 0
        self.cursor = 0
        self.invoke_name = ""
        self.invoke_start = 0
        self.params: dict = {}
        self.param_name = ""
        self.param_is_string = True
        self.param_start = 0

    def run(self) -> None:
        for m in _TAG_RE.finditer(self.text):
            tag = _Tag(m, self.cursor)
            self.cursor = m.end()
            if not getattr(self, f"_in_{self.state}")(tag):
                break
        self._finish()

    def _gap_check(self, tag: _Tag, where: str) -> None:
        gap = self.text[tag.gap_start : tag.m.start()]
        if gap.strip():
            self.errors.append(f"unexpected text {where} at offset {tag.gap_start}: {gap.strip()[:60]!r}")

    def _fail(self, message: str) -> bool:
        self.errors.append(message)
        return False

    # ----- states -----
    def _in_out(self, tag: _Tag) -> bool:
        if self.blocks_seen == 0:
            self.result.prose_before = self.text[tag.gap_start : tag.m.start()]
        else:
            self._gap_check(tag, "between tool-call blocks")
        if tag.name in BLOCK_TAGS and not tag.closing and not tag.selfclose and not tag.attrs:
            self.state = "block"
            self.blocks_seen += 1
            return True
        if tag.name == "invoke":
            return self._fail(f"invoke outside a tool-call block at offset {tag.m.start()}")
        return self._fail(f"unexpected tag {tag.text!r} at offset {tag.m.start()} (expected <{DSML_MARKER}tool_calls>)")

    def _in_block(self, tag: _Tag) -> bool:
        self._gap_check(tag, "inside tool-call block")
        if tag.name in BLOCK_TAGS and tag.is_bare_close(tag.name):
            self.state = "out"
            return True
        if tag.name == "invoke" and not tag.closing:
            return self._open_invoke(tag)
        return self._fail(f"unexpected tag {tag.text!r} inside tool-call block at offset {tag.m.start()}")

    def _open_invoke(self, tag: _Tag) -> bool:
        if set(tag.attrs) != {"name"} or not tag.attrs.get("name", "").strip():
            return self._fail(f"invoke tag needs exactly one non-empty name attribute: {tag.text!r}")
        self.invoke_name = tag.attrs["name"].strip()
        if not is_clean_tool_name(self.invoke_name):
            self.errors.append(f"invoke name {self.invoke_name!r} is not a valid tool name")
        if tag.selfclose:
            self.result.calls.append(DsmlCall(self.invoke_name, {}, "empty"))
            return True
        self.state, self.params, self.invoke_start = "invoke", {}, tag.m.end()
        return True

    def _in_invoke(self, tag: _Tag) -> bool:
        if tag.name == "parameter" and not tag.closing and not tag.selfclose:
            return self._open_parameter(tag)
        if tag.is_bare_close("invoke"):
            self._close_invoke(tag)
            self.state = "block"
            return True
        return self._fail(f"unexpected tag {tag.text!r} inside invoke {self.invoke_name!r} at offset {tag.m.start()}")

    def _open_parameter(self, tag: _Tag) -> bool:
        self._gap_check(tag, f"inside invoke {self.invoke_name!r}")
        if set(tag.attrs) != {"name", "string"} or tag.attrs["string"] not in ("true", "false"):
            return self._fail(f'parameter tag needs name="..." and string="true|false": {tag.text!r}')
        self.param_name = tag.attrs["name"]
        if self.param_name in self.params:
            self.errors.append(f"duplicate parameter {self.param_name!r} in invoke {self.invoke_name!r}")
        self.param_is_string = tag.attrs["string"] == "true"
        self.param_start = tag.m.end()
        self.state = "param"
        return True

    def _close_invoke(self, tag: _Tag) -> None:
        body = self.text[self.invoke_start : tag.m.start()].strip()
        name = self.invoke_name
        if self.params:
            self._gap_check(tag, f"inside invoke {name!r}")
            self.result.calls.append(DsmlCall(name, dict(self.params), "parameters"))
        elif body.startswith("{"):
            self._json_body(name, body)
        elif body:
            self.errors.append(f"invoke {name!r} body is neither parameters nor JSON: {body[:60]!r}")
        else:
            self.result.calls.append(DsmlCall(name, {}, "empty"))

    def _json_body(self, name: str, body: str) -> None:
        try:
            args = json_strict(body)
        except ValueError as exc:
            self.errors.append(f"JSON body of invoke {name!r} does not parse: {exc}")
            return
        if not isinstance(args, dict):
            self.errors.append(f"JSON body of invoke {name!r} is not an object")
            return
        self.result.calls.append(DsmlCall(name, args, "json"))

    def _in_param(self, tag: _Tag) -> bool:
        if not tag.is_bare_close("parameter"):
            return self._fail(f"unclosed parameter {self.param_name!r}: found {tag.text!r} at offset {tag.m.start()}")
        value = self.text[self.param_start : tag.m.start()]
        if FRAGMENT_RE.search(value):
            self.errors.append(f"DSML fragment inside parameter {self.param_name!r}")
        if self.param_is_string:
            self.params[self.param_name] = value.strip()
        else:
            try:
                self.params[self.param_name] = json_strict(value.strip())
            except ValueError as exc:
                self.errors.append(f'parameter {self.param_name!r} (string="false") is not JSON: {exc}')
        self.state = "invoke"
        return True

    # ----- end of text -----
    def _finish(self) -> None:
        if not self.errors:
            if self.state != "out":
                self.errors.append(f"markup ends inside {self.state!r} (unclosed tag)")
            elif self.blocks_seen == 0:
                self.errors.append("DSML fragments without a tool-call block")
            else:
                # Text after the block is dropped by SGLang; it is not corruption by itself
                # unless it holds DSML fragments (checked below).
                self.result.trailing_text = self.text[self.cursor :]
        # Fragments outside complete tags, e.g. a mangled marker or a lost "<".
        stripped = _TAG_RE.sub(lambda m: " " * len(m.group(0)), self.text)
        frag = FRAGMENT_RE.search(stripped)
        if frag and not any("fragment" in e for e in self.errors):
            self.errors.append(
                f"DSML fragment outside a well-formed tag at offset {frag.start()}: {_snippet(self.text, frag.start())}"
            )


def parse(text: str) -> DsmlParse:
    """Parse ``text`` (the answer part of a model output) strictly; never raises."""
    text = text or ""
    result = DsmlParse(has_markup=_TAG_RE.search(text) is not None or has_dsml_fragment(text))
    if not result.has_markup:
        result.prose_before = text
        return result
    _Parser(text, result).run()
    return result


def split_reasoning(raw: str) -> tuple[str, str]:
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


def render(calls: list[tuple[str, dict]], block: str = "tool_calls") -> str:
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
