"""tools/repro/verdict.py behaviour that mutmut's mutants showed untested (docs/mutation-testing.md).

The loop rule at its bounds (a loop exactly ``min_chars`` long, exactly ``min_repeats`` times, across a
newline, blank, or shorter than ``min_chars``), where a loop is looked for (the arguments of every call
joined, reasoning and content joined), the schema check of a call's arguments, and the detail each verdict
gives (what the operator reads in the run's table and records).
"""

from __future__ import annotations

import json

import pytest

from sglang_dsv4_ext.tools.repro import dsml
from sglang_dsv4_ext.tools.repro.scenario import TOOLS_BY_NAME
from sglang_dsv4_ext.tools.repro.verdict import Observation, RepetitionRule, classify, reference_origin

RULE = RepetitionRule()  # 8 repeats, 160 chars, period <= 200
UNIT_20 = "abcdefghij0123456789"  # no shorter period inside


def _args(**kw) -> str:
    return json.dumps(kw)


def _classify(obs: Observation, step: str = "answer", expected=None, exact_args: bool = True):
    tool, args = expected or (None, None)
    return classify(obs, step, tool, args, TOOLS_BY_NAME, exact_args=exact_args)


# ----- the loop rule at its bounds -----
def test_a_loop_exactly_min_chars_long_is_found_with_a_whole_repeat_count():
    found = RULE.find("ab" * 80)
    assert found == ("ab", 80)
    assert type(found[1]) is int


def test_a_loop_of_exactly_min_repeats_is_found_and_one_fewer_is_not():
    assert RULE.find(UNIT_20 * 8) == (UNIT_20, 8)
    unit_25 = UNIT_20 + "KLMNO"
    assert RULE.find(unit_25 * 7) is None


def test_a_loop_whose_unit_holds_a_newline_is_found():
    assert RULE.find("ab\n" * 60) == ("ab\n", 60)


def test_a_blank_loop_or_one_shorter_than_min_chars_in_a_long_text_is_not_a_loop():
    assert RULE.find(" " * 400) is None
    filler = "".join(f"{i}-" for i in range(100))  # no period repeats 8 times
    assert RULE.find("ab" * 8 + filler) is None


# ----- where a loop is looked for -----
def test_a_loop_across_the_arguments_of_two_calls_is_found():
    half = " ".join(["ab"] * 30)  # 89 chars each: a loop only where the two are joined by a space
    calls = [{"name": "read_file", "arguments": half}, {"name": "read_file", "arguments": half}]
    verdict, detail = _classify(Observation(tool_calls=calls))
    assert verdict == "degenerate_repetition"
    assert detail == "'ab ' repeated 59x"


def test_a_loop_across_reasoning_and_content_is_found():
    half = "\n".join(["abc"] * 30)  # 119 chars each: a loop only where the two are joined by a newline
    assert _classify(Observation(reasoning=half, content=half)) == ("degenerate_repetition", "'abc\\n' repeated 59x")


def test_calls_without_arguments_add_no_text_to_look_for_a_loop_in():
    calls = [{"name": "read_file"}] * 40
    assert _classify(Observation(tool_calls=calls)) == (
        "invalid_arguments",
        "read_file: arguments are not a JSON object",
    )


def test_a_loop_detail_shows_the_first_40_characters_of_its_unit():
    unit = "the same sentence comes back again, word for word. "  # 51 chars
    expected = f"{unit[:40]!r} repeated 8x"
    assert _classify(Observation(content=unit * 8)) == ("degenerate_repetition", expected)
    cut = Observation(content=unit * 8, finish_reason="length")
    assert _classify(cut) == ("degenerate_repetition", f"cut at length; {expected}")


def test_an_output_cut_at_length_without_a_loop_says_so():
    assert _classify(Observation(content="half a sent", finish_reason="length")) == (
        "truncated_length",
        "finish_reason=length",
    )


# ----- transport -----
def test_a_transport_outcome_without_an_error_is_named_by_its_class_or_its_status():
    assert _classify(Observation(transport="timeout")) == ("timeout", "timeout")
    assert _classify(Observation(transport="http_error", http_status=503)) == ("http_error", "HTTP 503")


def test_an_unknown_transport_outcome_names_it_and_the_known_ones():
    with pytest.raises(ValueError, match=r"^unknown transport outcome 'lost'; known: \('http_error'"):
        _classify(Observation(transport="lost"))


# ----- DSML markup -----
def test_markup_in_reasoning_says_where_it_is():
    obs = Observation(reasoning=dsml.render([("read_file", {"path": "a"})]))
    assert _classify(obs) == ("tool_call_in_reasoning", "DSML markup in reasoning_content")


def test_malformed_markup_gives_the_parsers_errors_joined_and_cut_at_300_characters():
    content = dsml.render([("x", {"a": 1})]).replace("x", "bad name " + "y" * 300, 1) + " trailing DSML"
    errors = dsml.parse(content).errors
    assert len(errors) == 2 and len("; ".join(errors)) > 300  # the case this test is about
    assert _classify(Observation(content=content)) == ("malformed_dsml", "; ".join(errors)[:300])


def test_a_tool_name_that_is_not_an_identifier_is_shown_cut_at_80_characters():
    name = "bad name " + "z" * 100
    assert _classify(Observation(tool_calls=[{"name": name, "arguments": "{}"}])) == (
        "malformed_dsml",
        f"tool name is not an identifier: {name[:80]!r}",
    )


def test_markup_in_the_arguments_of_a_call_without_a_name_names_it_empty():
    call = {"arguments": '{"path": "<｜DSML｜invoke"}'}
    assert _classify(Observation(tool_calls=[call])) == ("malformed_dsml", "DSML fragment inside the arguments of ''")


# ----- the calls -----
def test_a_call_without_a_name_is_an_undeclared_tool_named_empty():
    assert _classify(Observation(tool_calls=[{"arguments": "{}"}])) == ("wrong_tool", "undeclared tool ''")


def test_arguments_given_as_an_object_are_checked_as_they_are():
    call = {"name": "read_file", "arguments": {"path": "src/a.py"}}
    assert _classify(Observation(tool_calls=[call])) == ("ok", "")


def test_arguments_against_the_schema_name_the_first_error_by_path():
    root = {"name": "read_file", "arguments": _args(max_lines=5)}
    assert _classify(Observation(tool_calls=[root])) == (
        "invalid_arguments",
        "read_file: (root): 'path' is a required property",
    )
    two = {"name": "read_file", "arguments": _args(path=1, max_lines="x")}
    assert _classify(Observation(tool_calls=[two])) == (
        "invalid_arguments",
        "read_file: max_lines: 'x' is not of type 'integer'",
    )


def test_a_nested_schema_error_is_located_by_its_path():
    from sglang_dsv4_ext.tools.repro.verdict import _schema_error

    schema = {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "string"}}}}}
    assert _schema_error(schema, {"a": {"b": 1}}) == "a/b: 1 is not of type 'string'"


def test_exact_arguments_compare_a_string_with_a_number_as_different():
    call = {"name": "read_file", "arguments": _args(path="src/a.py", max_lines=100)}
    verdict = _classify(Observation(tool_calls=[call]), "tool", ("read_file", {"path": "src/a.py", "max_lines": "100"}))
    assert verdict == ("invalid_arguments", "read_file: 'max_lines' is 100, requested '100'")


def test_a_missing_exact_argument_names_the_tool():
    call = {"name": "read_file", "arguments": _args(path="src/a.py")}
    verdict = _classify(Observation(tool_calls=[call]), "tool", ("read_file", {"path": "src/a.py", "max_lines": 9}))
    assert verdict == ("invalid_arguments", "read_file: 'max_lines' is missing, requested 9")


# ----- who broke a failed request -----
@pytest.mark.parametrize(
    "verdict, reference_class, origin",
    [
        ("timeout", "ok", "transport"),
        ("malformed_dsml", None, "unknown"),
        ("malformed_dsml", "ok", "parser_or_serving"),
        ("malformed_dsml", "malformed_dsml", "model_output"),
    ],
)
def test_reference_origin(verdict, reference_class, origin):
    assert reference_origin(verdict, reference_class) == origin


# ----- what a record keeps of the reply -----
def test_the_raw_reply_keeps_token_ids_error_and_body_only_when_there_are_some():
    plain = Observation(content="c", reasoning="r", finish_reason="stop").raw_dict()
    assert plain == {"content": "c", "reasoning_content": "r", "tool_calls": [], "finish_reason": "stop"}
    full = Observation(token_ids=[1, 2], error="e", body_snippet="b").raw_dict()
    assert (full["response_token_ids"], full["error"], full["body"]) == ([1, 2], "e", "b")


def test_a_tool_name_holding_a_dsml_fragment_is_malformed_even_when_it_is_an_identifier():
    call = {"name": "DSML_read", "arguments": "{}"}
    assert _classify(Observation(tool_calls=[call])) == (
        "malformed_dsml",
        "tool name is not an identifier: 'DSML_read'",
    )


def test_a_loop_is_looked_for_in_the_last_65536_characters_only():
    filler = "".join(f"{i}," for i in range(20000))  # no period repeats 8 times
    text = "ab" * 80 + filler[: 65536 - 159]  # the loop's first character is one past the window
    assert len(text) == 65537
    assert RULE.find(text) is None
    assert RULE.find("ab" * 80 + filler[: 65536 - 160]) == ("ab", 80)  # the whole loop inside the window


def test_the_parsers_errors_are_joined_with_a_semicolon():
    content = dsml.render([("x", {"a": 1})]).replace("x", "bad name", 1) + " trailing DSML"
    errors = dsml.parse(content).errors
    assert len(errors) == 2 and len("; ".join(errors)) < 300  # both shown whole
    assert _classify(Observation(content=content)) == ("malformed_dsml", f"{errors[0]}; {errors[1]}")


def test_an_aborted_requests_detail_keeps_the_first_300_characters_of_a_long_finish_reason():
    """A server's finish_reason is echoed into the detail the run's table and records carry: bounded like every
    detail, its start (the reason as the server sent it) kept."""
    reason = "abort:" + "x" * 1000
    verdict, detail = _classify(Observation(finish_reason=reason))
    assert verdict == "aborted"
    assert len(detail) == 300 and detail.startswith(f"finish_reason={reason!r}"[:300])
