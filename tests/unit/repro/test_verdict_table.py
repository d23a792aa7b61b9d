"""The verdict table of docs/repro.md, row by row, against :func:`classify` and the reply reader.

Each row is an observation a client can get and the class the table gives it. The rows added
with this module pin the rules the table states but the code once missed: a tool step asks for
exactly one call with exactly the requested arguments, so another call alongside, the same call
twice, or an unrequested argument is a failure; a reply of the wrong shape is ``protocol_error``. The page's
table names every class of :data:`CLASSES` once, and no other.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sglang_dsv4_ext.tools.repro import dsml
from sglang_dsv4_ext.tools.repro.client import observation_from_body
from sglang_dsv4_ext.tools.repro.scenario import TOOLS_BY_NAME
from sglang_dsv4_ext.tools.repro.verdict import (
    CLASSES,
    CORRUPTION_CLASSES,
    TRANSPORT_CLASSES,
    Observation,
    classify,
    reference_origin,
)
from tests.support.repro_server import SHAPES

REQUESTED = ("read_file", {"path": "src/a.py", "max_lines": 100})
REPRO_PAGE = Path(__file__).resolve().parents[3] / "docs" / "repro.md"


def _call(name, args):
    return {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}


GOOD_CALL = _call(*REQUESTED)
OTHER_CALL = _call("search_code", {"query": "evict_pages"})

# (step, observation, class) per row of the page's table; the detail must say why (fragment).
ROWS = {
    "ok: the requested call": ("tool", Observation(tool_calls=[GOOD_CALL]), "ok", ""),
    "ok: a clean answer": ("answer", Observation(content="Done."), "ok", ""),
    "ok: answer step may call a declared tool": ("answer", Observation(tool_calls=[OTHER_CALL]), "ok", ""),
    "wrong_tool: the requested call plus another": (
        "tool",
        Observation(tool_calls=[GOOD_CALL, OTHER_CALL]),
        "wrong_tool",
        "exactly one call",
    ),
    "wrong_tool: another call before the requested": (
        "tool",
        Observation(tool_calls=[OTHER_CALL, GOOD_CALL]),
        "wrong_tool",
        "exactly one call",
    ),
    "wrong_tool: the same call twice": (
        "tool",
        Observation(tool_calls=[GOOD_CALL, GOOD_CALL]),
        "wrong_tool",
        "exactly one call",
    ),
    "wrong_tool: no call": ("tool", Observation(content="I read it."), "wrong_tool", "no tool call"),
    "wrong_tool: another tool": ("tool", Observation(tool_calls=[OTHER_CALL]), "wrong_tool", "exactly one call"),
    "wrong_tool: undeclared tool on an answer step": (
        "answer",
        Observation(tool_calls=[_call("rm_rf", {})]),
        "wrong_tool",
        "undeclared",
    ),
    "invalid_arguments: an unrequested (schema-valid) argument": (
        "tool",
        Observation(tool_calls=[_call("read_file", {**REQUESTED[1], "start_line": 3})]),
        "invalid_arguments",
        "unrequested argument(s) ['start_line']",
    ),
    "invalid_arguments: a requested argument missing": (
        "tool",
        Observation(tool_calls=[_call("read_file", {"path": "src/a.py"})]),
        "invalid_arguments",
        "missing",
    ),
    "invalid_arguments: a requested value changed": (
        "tool",
        Observation(tool_calls=[_call("read_file", {"path": "src/b.py", "max_lines": 100})]),
        "invalid_arguments",
        "requested 'src/a.py'",
    ),
    "invalid_arguments: not JSON": (
        "tool",
        Observation(tool_calls=[_call("read_file", '{"path": ')]),
        "invalid_arguments",
        "not JSON",
    ),
    "invalid_arguments: not an object": (
        "tool",
        Observation(tool_calls=[_call("read_file", "[1]")]),
        "invalid_arguments",
        "not a JSON object",
    ),
    "invalid_arguments: against the schema": (
        "tool",
        Observation(tool_calls=[_call("read_file", {"path": 3})]),
        "invalid_arguments",
        "path",
    ),
    "dsml_in_content": ("tool", Observation(content=dsml.render([REQUESTED])), "dsml_in_content", "well-formed"),
    "malformed_dsml": (
        "tool",
        Observation(content=dsml.render([REQUESTED]).replace("</", "<", 1)),
        "malformed_dsml",
        "",
    ),
    "tool_call_in_reasoning": (
        "tool",
        Observation(reasoning=dsml.render([REQUESTED])),
        "tool_call_in_reasoning",
        "reasoning",
    ),
    "degenerate_repetition": ("answer", Observation(content="go on " * 60), "degenerate_repetition", "repeated"),
    "truncated_length": ("tool", Observation(content="Let me", finish_reason="length"), "truncated_length", "length"),
    "http_error": ("tool", Observation(transport="http_error", http_status=503), "http_error", "503"),
    "protocol_error": ("tool", Observation(transport="protocol_error", error="shape"), "protocol_error", "shape"),
    "timeout": ("tool", Observation(transport="timeout"), "timeout", ""),
    # Half the arguments of the requested call: never judged (it would be invalid_arguments).
    "stream_cut": (
        "tool",
        Observation(
            transport="stream_cut",
            error="stream ended without [DONE]",
            tool_calls=[_call("read_file", '{"path": "src/a')],
        ),
        "stream_cut",
        "[DONE]",
    ),
}


def verdicts_in_table(page: str) -> list[str]:
    """The verdict names of the page's ``| verdict | meaning |`` table, in its order (a row may name several)."""
    lines = page.splitlines()
    start = lines.index("| verdict | meaning |") + 2  # past the header and its |---| line
    names: list[str] = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        names += re.findall(r"`([a-z_]+)`", line.split("|")[1])
    return names


def test_verdicts_in_table_reads_every_name_of_each_row():
    page = "x\n| verdict | meaning |\n|---|---|\n| `ok` | fine |\n| `a`, `b` | both `c` |\n\n| `d` | after |\n"
    assert verdicts_in_table(page) == ["ok", "a", "b"]


def test_the_repro_page_table_names_every_verdict_class_once():
    names = verdicts_in_table(REPRO_PAGE.read_text(encoding="utf-8"))
    assert sorted(names) == sorted(CLASSES), (names, CLASSES)


@pytest.mark.parametrize("row", sorted(ROWS))
def test_verdict_table_row(row):
    step, obs, want, fragment = ROWS[row]
    tool, args = REQUESTED if step == "tool" else (None, None)
    got, detail = classify(obs, step, tool, dict(args) if args else None, TOOLS_BY_NAME)
    assert (got, fragment in detail) == (want, True), (row, got, detail)


def test_no_exact_args_still_requires_exactly_one_requested_call():
    """--no-exact-args relaxes values only: extra or duplicate calls stay wrong_tool."""
    relaxed = dict(exact_args=False)
    extra_arg = Observation(tool_calls=[_call("read_file", {"path": "src/z.py", "start_line": 3})])
    assert classify(extra_arg, "tool", *REQUESTED, TOOLS_BY_NAME, **relaxed)[0] == "ok"
    for calls in ([GOOD_CALL, GOOD_CALL], [GOOD_CALL, OTHER_CALL]):
        assert classify(Observation(tool_calls=calls), "tool", *REQUESTED, TOOLS_BY_NAME, **relaxed)[0] == "wrong_tool"


@pytest.mark.parametrize("cls", ["protocol_error", "stream_cut"])
def test_transport_classes_are_not_corruption(cls):
    assert cls in TRANSPORT_CLASSES and cls not in CORRUPTION_CLASSES
    assert reference_origin(cls, "invalid_arguments") == "transport"  # whatever the partial text re-parses to


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_reply_of_the_wrong_shape_is_a_protocol_error(shape):
    body, _ = SHAPES[shape]
    obs = observation_from_body(body)
    assert obs.transport == "protocol_error" and obs.http_status == 200, obs
    assert "not a chat completion" in obs.error and obs.body_snippet == json.dumps(body)
    assert classify(obs, "tool", *REQUESTED, TOOLS_BY_NAME)[0] == "protocol_error"


def test_reply_reader_keeps_what_a_good_reply_says():
    body = {"choices": [{"message": {"content": None, "reasoning_content": "plan", "tool_calls": [
        {"id": "c0", "type": "function", "function": GOOD_CALL}]}, "finish_reason": "tool_calls",
        "response_token_ids": [1, 2]}], "usage": {"total_tokens": 3}}  # fmt: skip
    obs = observation_from_body(body)
    assert (obs.transport, obs.reasoning, obs.tool_calls, obs.token_ids) == ("ok", "plan", [GOOD_CALL], [1, 2])
    assert observation_from_body({"choices": []}).transport == "protocol_error"
