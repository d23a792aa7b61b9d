"""Unit tests of the repro harness: reference DSML parser, verdicts, statistics, scenario."""

from __future__ import annotations

import json
import math

import pytest

from sglang_dsv4_ext.tools.repro import dsml
from sglang_dsv4_ext.tools.repro.compare import PairingError, compare_records, pairs_needed
from sglang_dsv4_ext.tools.repro.reparse import reference_verdict
from sglang_dsv4_ext.tools.repro.scenario import (
    TOOLS,
    TOOLS_BY_NAME,
    ScenarioConfig,
    expected_from_user_text,
    session_requests,
)
from sglang_dsv4_ext.tools.repro.stats import mcnemar_exact, wilson_interval
from sglang_dsv4_ext.tools.repro.verdict import Observation, RepetitionRule, classify

M = dsml.DSML_MARKER
CALL = ("read_file", {"path": "src/a.py", "max_lines": 100})
GOOD = dsml.render([CALL])

MALFORMED = {
    "unclosed invoke": GOOD.replace(f"</{M}invoke>", ""),
    "garbled tag": GOOD.replace(f"{M}parameter name", f"{M}paramter name", 1),
    "lost <": GOOD.replace(f"<{M}parameter", f"{M}parameter", 1),
    "cut": GOOD[: len(GOOD) // 2],
    "bad json param": GOOD.replace('string="false">100<', 'string="false">10x0<'),
    "ascii bars": GOOD.replace(M, "|DSML|"),
    "text in block": GOOD.replace(f"</{M}invoke>", f"</{M}invoke>\nstray words"),
    "invoke outside block": f'<{M}invoke name="read_file">{{"path": "x"}}</{M}invoke>',
    "duplicate parameter": GOOD.replace(
        f"</{M}invoke>", f'<{M}parameter name="path" string="true">b</{M}parameter>\n</{M}invoke>'
    ),
}


def test_reference_parser_accepts_the_grammar():
    p = dsml.parse("Let me look.\n\n" + GOOD)
    assert p.well_formed and p.prose_before == "Let me look.\n\n"
    assert [(c.name, c.arguments) for c in p.calls] == [CALL]
    j = dsml.parse(
        f'<{M}tool_calls>\n<{M}invoke name="read_file">\n{{"path": "x"}}\n</{M}invoke>\n'
        f'<{M}invoke name="list_directory"/>\n</{M}tool_calls>'
    )
    assert j.well_formed
    assert [(c.name, c.body_format) for c in j.calls] == [("read_file", "json"), ("list_directory", "empty")]
    v32 = dsml.parse(dsml.render([CALL], block="function_calls"))
    assert v32.well_formed
    assert not dsml.parse("plain answer").has_markup


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_reference_parser_rejects_corruption(name):
    p = dsml.parse(MALFORMED[name])
    assert p.has_markup and not p.well_formed and p.errors, name


def test_reference_parser_agrees_with_sglang_detector_on_good_markup_only():
    """SGLang's real DeepSeekV4Detector parses the good text like ours; on corrupt text it
    drops calls silently (fails closed), which is why the harness needs its own parser."""
    from sglang.srt.entrypoints.openai.protocol import Tool
    from sglang.srt.function_call.deepseekv4_detector import DeepSeekV4Detector

    tools = [Tool(**t) for t in TOOLS]
    res = DeepSeekV4Detector().detect_and_parse("Let me look.\n\n" + GOOD, tools)
    assert [(c.name, json.loads(c.parameters)) for c in res.calls] == [CALL]
    for name in ("unclosed invoke", "cut", "bad json param"):
        res = DeepSeekV4Detector().detect_and_parse(MALFORMED[name], tools)
        got = [(c.name, json.loads(c.parameters)) for c in res.calls]
        assert got != [CALL] and not dsml.parse(MALFORMED[name]).well_formed, name


def _obs(**kw):
    return Observation(**kw)


def _cls(obs, step="tool", tool="read_file", args=None):
    expected_args = args if args is not None else dict(CALL[1])
    return classify(obs, step, tool if step == "tool" else None, expected_args, TOOLS_BY_NAME)[0]


def _call(name, args):
    return {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}


def test_verdict_classes_and_their_order():
    assert _cls(_obs(tool_calls=[_call(*CALL)], finish_reason="tool_calls")) == "ok"
    assert _cls(_obs(transport="timeout")) == "timeout"
    assert _cls(_obs(transport="http_error", http_status=503)) == "http_error"
    # A cut-off output has unclosed markup: truncated, not malformed.
    assert _cls(_obs(content=MALFORMED["cut"], finish_reason="length")) == "truncated_length"
    assert _cls(_obs(content="go on " * 60, finish_reason="length")) == "degenerate_repetition"
    assert _cls(_obs(content="go on " * 60, finish_reason="stop")) == "degenerate_repetition"
    assert _cls(_obs(reasoning="thinking " + GOOD, content="")) == "tool_call_in_reasoning"
    assert _cls(_obs(content=GOOD)) == "dsml_in_content"
    assert _cls(_obs(content=MALFORMED["lost <"])) == "malformed_dsml"
    assert _cls(_obs(tool_calls=[_call('read_file">', CALL[1])])) == "malformed_dsml"
    assert _cls(_obs(tool_calls=[_call("read_file", {"path": f"a{M}b"})])) == "malformed_dsml"
    assert _cls(_obs(content="I read it.")) == "wrong_tool"  # no call on a tool step
    assert _cls(_obs(tool_calls=[_call("search_code", {"query": "x"})])) == "wrong_tool"
    assert _cls(_obs(tool_calls=[_call("rm_rf", {})]), step="answer") == "wrong_tool"
    assert _cls(_obs(tool_calls=[_call("read_file", '{"path": ')])) == "invalid_arguments"
    assert _cls(_obs(tool_calls=[_call("read_file", {"path": 3})])) == "invalid_arguments"
    undeclared_key = {"path": "src/a.py", "max_lines": 100, "x": 1}
    assert _cls(_obs(tool_calls=[_call("read_file", undeclared_key)])) == "invalid_arguments"
    assert _cls(_obs(tool_calls=[_call("read_file", {"path": "src/b.py", "max_lines": 100})])) == "invalid_arguments"
    assert _cls(_obs(content="Done."), step="answer") == "ok"
    # With exact-args off, any schema-valid arguments pass.
    obs = _obs(tool_calls=[_call("read_file", {"path": "src/b.py"})])
    assert classify(obs, "tool", "read_file", dict(CALL[1]), TOOLS_BY_NAME, exact_args=False)[0] == "ok"


def test_repetition_rule_ignores_ordinary_text():
    rule = RepetitionRule()
    assert rule.find("The eviction path frees pages in LRU order; see evict_pages().\n" * 2) is None
    assert rule.find(json.dumps({"rows": list(range(200))})) is None
    assert rule.find("=" * 50 + " header " + "=" * 50) is None
    assert rule.find("abc " * 100)[0] == "abc "


def test_reference_verdict_tells_parser_faults_from_model_corruption():
    good = reference_verdict(f"<think>plan</think>{GOOD}", "stop", "tool", "read_file", dict(CALL[1]), TOOLS_BY_NAME)
    assert good["reference_class"] == "ok"
    bad = reference_verdict(MALFORMED["garbled tag"], "stop", "tool", "read_file", dict(CALL[1]), TOOLS_BY_NAME)
    assert bad["reference_class"] == "malformed_dsml" and bad["dsml"]["errors"]
    think = reference_verdict(f"<think>{GOOD}</think>", "stop", "tool", "read_file", dict(CALL[1]), TOOLS_BY_NAME)
    assert think["reference_class"] == "tool_call_in_reasoning"


def test_wilson_and_mcnemar_known_values():
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.27753, abs=1e-4)
    lo, hi = wilson_interval(5, 10)
    assert (lo, hi) == (pytest.approx(0.23659, abs=1e-4), pytest.approx(0.76341, abs=1e-4))
    lo, hi = wilson_interval(18, 80)  # the incident's 18 of 80 sessions
    assert lo < 0.225 < hi and lo == pytest.approx(0.1470, abs=1e-3)
    assert mcnemar_exact(0, 10) == pytest.approx(2 / 1024)
    assert mcnemar_exact(2, 8) == pytest.approx(2 * (1 + 10 + 45) / 1024)
    assert mcnemar_exact(5, 5) == 1.0 and mcnemar_exact(0, 0) == 1.0
    assert math.isclose(mcnemar_exact(400, 600), mcnemar_exact(600, 400))
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_scenario_is_deterministic_and_canonical():
    cfg = ScenarioConfig(seed=5, sessions=2, rounds=3)
    a = session_requests(cfg, 0, 1)
    b = session_requests(cfg, 0, 1)
    assert [s.prompt_sha256 for s in a] == [s.prompt_sha256 for s in b]
    assert len({s.prompt_sha256 for s in a}) == len(a) == 6
    assert session_requests(ScenarioConfig(seed=6, sessions=2, rounds=3), 0, 1)[0].prompt_sha256 != a[0].prompt_sha256
    # Each request's history extends the previous one (shared prefix for the cache).
    for prev, nxt in zip(a, a[1:]):
        assert nxt.messages[: len(prev.messages) - 1] == prev.messages[:-1]
    tool_steps = [s for s in a if s.step == "tool"]
    for s in tool_steps:
        assert expected_from_user_text(s.messages[-1]["content"]) == (s.expected_tool, s.expected_args)
        from jsonschema import Draft202012Validator

        Draft202012Validator(TOOLS_BY_NAME[s.expected_tool]["function"]["parameters"]).validate(s.expected_args)


def test_compare_refuses_unpaired_prompts_and_pairs_identical_ones():
    a = {"k1": {"prompt_sha256": "x", "verdict": "ok"}, "k2": {"prompt_sha256": "y", "verdict": "malformed_dsml"}}
    b = {"k1": {"prompt_sha256": "x", "verdict": "ok"}, "k2": {"prompt_sha256": "z", "verdict": "ok"}}
    with pytest.raises(PairingError, match="different prompts"):
        compare_records(a, b)
    b["k2"]["prompt_sha256"] = "y"
    r = compare_records(a, b)
    assert (r["corruption"]["a_only"], r["corruption"]["b_only"]) == (1, 0) and not r["significant"]


def _records(verdicts, sha="p"):
    return {f"k{i}": {"prompt_sha256": f"{sha}{i}", "verdict": v} for i, v in enumerate(verdicts)}


@pytest.mark.parametrize("alpha", [0.05, 0.01])
def test_too_few_pairs_cannot_tell_even_when_every_pair_differs(alpha):
    """Every judged pair corrupted in A only: with fewer pairs than the exact test needs to reach
    p < alpha this used to read 'no significant difference'. The honest answer is 'cannot tell'."""
    need = pairs_needed(alpha)
    assert mcnemar_exact(0, need) < alpha <= mcnemar_exact(0, need - 1)  # the test's own limit
    few = compare_records(_records(["malformed_dsml"] * (need - 1)), _records(["ok"] * (need - 1)), alpha)
    assert few["outcome"] == "cannot_tell" and not few["significant"]
    assert few["verdict"].startswith("cannot tell") and f"at least {need}" in few["verdict"]
    assert "no significant difference" not in few["verdict"]
    enough = compare_records(_records(["malformed_dsml"] * need), _records(["ok"] * need), alpha)
    assert enough["outcome"] == "significant" and "A corrupts more" in enough["verdict"]


def test_no_significant_difference_bounds_how_far_the_rates_can_differ():
    same = compare_records(_records(["ok"] * 100), _records(["ok"] * 100))
    assert same["outcome"] == "not_significant"
    assert f"at most {100 * wilson_interval(0, 100)[1]:.1f} points" in same["verdict"]  # 0 of 100 discordant: 3.7


def test_a_cut_stream_on_either_side_excludes_the_pair():
    a = _records(["stream_cut", "malformed_dsml", "ok"])
    b = _records(["malformed_dsml", "stream_cut", "ok"])
    r = compare_records(a, b)
    assert r["excluded_transport_pairs"] == 2 and r["corruption"]["pairs"] == 1
    assert r["corruption"]["a_only"] == r["corruption"]["b_only"] == 0
