"""tools/repro/pairing.py behaviour that mutmut's mutants showed untested (docs/mutation-testing.md).

How a differing setting is written in the refusal and in every output's warning (an unset value, a
list, a string quoted as JSON, a number, a switch as given or not), a recorded object compared whatever
its key order, and requests run at another concurrency counted with the first one named. What a comparison
says about its sides: each side's server lines, the evidence problems of either side (no servers, a restart, an
unknown state, a dtype not reported or a mix, ranks without the extension), a label naming another stack, one
dtype on both sides, one side failing in transport far more often, the parsing paths; a copy of a run told by its
requests; a run loaded through the reader's own record check.
"""

from __future__ import annotations

import pytest

from sglang_dsv4_ext.errors import PairingError, ReproInputError
from sglang_dsv4_ext.tools.repro import pairing
from sglang_dsv4_ext.tools.repro.settings import SHAPE_SETTINGS
from tests.support.repro_cli import make_run, requests_file


def _run(path: str, **config) -> pairing.LoadedRun:
    base = {s.name: s.default for s in SHAPE_SETTINGS}
    base.update(concurrency=[8], repetition={"min_repeats": 8})  # as summary.json records them (JSON)
    return pairing.LoadedRun(path, {"config": {**base, **config}}, {})


def test_each_kind_of_value_is_written_as_the_operator_reads_it(tmp_path):
    a = _run(str(tmp_path / "a"), thinking=None, concurrency=[8], seed=0, stream=False, repetition={"min_repeats": 8})
    b = _run(
        str(tmp_path / "b"), thinking="on", concurrency=[8, 16], seed=1, stream=True, repetition={"min_repeats": 9}
    )
    differ, _ = pairing.setting_differences(a, b)
    assert differ == {
        "--thinking": 'A unset, B "on"',
        "--concurrency": "A 8, B 8,16",
        "--seed": "A 0, B 1",
        "--stream": "A not given, B given",
        "--repetition": 'A {"min_repeats": 8}, B {"min_repeats": 9}',
    }


def test_a_setting_recorded_with_its_keys_in_another_order_is_the_same(tmp_path):
    a = _run(str(tmp_path / "a"), extra_body={"top_k": 1, "min_p": 0.1})
    b = _run(str(tmp_path / "b"), extra_body={"min_p": 0.1, "top_k": 1})
    assert pairing.setting_differences(a, b) == ({}, [])


def test_requests_at_another_concurrency_are_counted_and_the_first_one_shown(tmp_path):
    a, b = _run(str(tmp_path / "a")), _run(str(tmp_path / "b"))
    a.records = {"0/1/0/0": {"concurrency": 8}, "0/0/0/0": {"concurrency": 8}, "0/2/0/0": {"concurrency": 8}}
    b.records = {"0/1/0/0": {"concurrency": 16}, "0/0/0/0": {"concurrency": 32}, "0/2/0/0": {"concurrency": 8}}
    differ, _ = pairing.setting_differences(a, b)
    assert differ == {
        "--concurrency": "2 of 3 paired requests ran at another concurrency (first 0/0/0/0: A 8, B 32)",
    }


def test_the_refusal_lists_every_differing_setting_and_says_how_to_pair_the_runs():
    with pytest.raises(PairingError) as err:
        pairing.refuse_different_settings({"--seed": "A 0, B 1", "--stream": "A not given, B given"})
    assert str(err.value) == (
        "the runs differ in settings that decide the workload or its verdicts (--seed: A 0, B 1; --stream: A not "
        "given, B given), so their shared requests are not a paired comparison. Re-run B with A's re-run command "
        "(summary.json rerun_command), or pass --allow-different-settings to compare the shared requests anyway "
        "(the output then says so at the top)"
    )


@pytest.mark.parametrize(
    "summary, why",
    [
        ({}, "no summary.json (killed before writing it?): cannot tell how many requests were planned"),
        ({"label": "a"}, "its summary.json has no request counts: cannot tell whether it finished"),
        (
            {"requests_planned": 8, "requests_done": 3, "not_run": 5, "interrupted": True, "interrupted_by": "SIGTERM"},
            "interrupted by SIGTERM: 3 of 8 requests run, 5 not run",
        ),
        (
            {"requests_planned": 8, "requests_done": 3, "not_run": 5, "interrupted": True},
            "interrupted by a signal: 3 of 8 requests run, 5 not run",
        ),
        (
            {"requests_planned": 8, "requests_done": 6, "not_run": 2, "stopped_by_time_limit": True},
            "stopped at its time limit: 6 of 8 requests run, 2 not run",
        ),
        (
            {"requests_planned": 8, "requests_done": 1, "not_run": 7, "aborted_by": "--fail-fast"},
            "aborted by --fail-fast: 1 of 8 requests run, 7 not run",
        ),
        ({"requests_planned": 8, "requests_done": 7, "not_run": 1}, "incomplete: 7 of 8 requests run, 1 not run"),
        ({"requests_planned": 8, "requests_done": 8, "not_run": 0}, ""),
    ],
)
def test_how_a_run_did_not_finish_is_said(summary, why):
    assert pairing.incomplete(summary) == why


def test_every_output_warns_first_of_differing_unchecked_settings_and_an_unfinished_run():
    result = {
        "settings_differ": {"--seed": "A 0, B 1"},
        "settings_unchecked": ["--temperature not recorded in both summaries"],
        "a": {"run": "runs/a", "incomplete": ""},
        "b": {"run": "runs/b", "incomplete": "incomplete: 7 of 8 requests run, 1 not run"},
    }
    assert pairing.warnings(result) == [
        "the runs differ in settings that decide the workload or its verdicts (--seed: A 0, B 1); compared anyway "
        "(--allow-different-settings): a difference may be the settings, not the stacks",
        "cannot check that the runs had the same settings: --temperature not recorded in both summaries; pairs are "
        "checked on prompt hash and concurrency only",
        "B (runs/b) did not finish: incomplete: 7 of 8 requests run, 1 not run; only its recorded requests are paired",
    ]


# ----- the parsing path each side's servers recorded -----
def _parsing(*paths: str | None) -> list[dict]:
    return [{"url": f"http://s{i}:1", "parsing": None if p is None else {"path": p}} for i, p in enumerate(paths)]


def test_sides_on_one_parsing_path_raise_no_parsing_problem():
    assert pairing._parsing_problem(_parsing("deepseek-recipe", "deepseek-recipe"), _parsing("deepseek-recipe")) == []


def test_sides_on_two_parsing_paths_are_named_with_their_paths():
    assert pairing._parsing_problem(_parsing("deepseek-recipe"), _parsing("sglang-detectors")) == [
        "the sides parse through different paths (A deepseek-recipe, B sglang-detectors): a difference may be the "
        "parser, not the index-K dtype"
    ]


def test_a_side_whose_servers_record_no_parsing_path_cannot_tell():
    assert pairing._parsing_problem(_parsing("deepseek-recipe"), _parsing(None)) == [
        "cannot tell that the sides parse through one path (A deepseek-recipe, B cannot tell)"
    ]


def test_two_sides_that_both_record_no_parsing_path_cannot_tell():
    assert pairing._parsing_problem(_parsing(None), _parsing(None)) == [
        "cannot tell that the sides parse through one path (A cannot tell, B cannot tell)"
    ]


def test_sides_whose_servers_each_mix_two_parsing_paths_are_not_on_one_path():
    mixed = _parsing("deepseek-recipe", "sglang-detectors")
    assert pairing._parsing_problem(mixed, mixed) == [
        "the sides parse through different paths (A deepseek-recipe/sglang-detectors, B deepseek-recipe/"
        "sglang-detectors): a difference may be the parser, not the index-K dtype"
    ]


# ----- the servers a side's summary records -----
def test_a_side_records_its_summarys_servers_when_each_names_its_url(tmp_path):
    servers = [{"url": "http://a:1", "state": "active"}, {"url": "http://b:2", "state": "inactive"}]
    run = pairing.LoadedRun(str(tmp_path), {"servers": servers}, {})
    assert pairing.side(run)["servers"] == servers


@pytest.mark.parametrize("servers", [None, {"url": "http://a:1"}, [{"url": "http://a:1"}, {"state": "active"}], ["x"]])
def test_a_summary_of_an_earlier_release_or_malformed_servers_records_none(tmp_path, servers):
    run = pairing.LoadedRun(str(tmp_path), {"servers": servers}, {})
    assert pairing.side(run)["servers"] is None


def test_a_side_records_its_run_label_identity_counts_and_how_it_did_not_finish(tmp_path):
    summary = {
        "label": "bf16",
        "server_info": {"version": "0.5.23"},
        "run_id": "r-1",
        "requests_planned": 4,
        "requests_done": 2,
        "not_run": 2,
    }
    run = pairing.LoadedRun(str(tmp_path), summary, {"k1": {}, "k2": {}})
    assert pairing.side(run) == {
        "run": str(tmp_path),
        "label": "bf16",
        "server_info": {"version": "0.5.23"},
        "run_id": "r-1",
        "requests": 2,
        "requests_planned": 4,
        "incomplete": "incomplete: 2 of 4 requests run, 2 not run",
        "servers": None,
    }


# ----- the index-K dtypes a side's servers built -----
def test_the_dtypes_built_are_read_from_active_servers_and_stock_from_inactive_ones():
    servers = [
        {"state": "active", "index_k": {"built": ["bf16"]}},
        {"state": "active", "index_k": {"built": ["mixed:bf16,fp8"]}},
        {"state": "inactive", "index_k": {"built": ["fp4"]}},  # an inactive server's record is not what it built
    ]
    assert pairing._built_dtypes(servers) == {"bf16", "fp8", "stock"}


@pytest.mark.parametrize(
    "server",
    [{"state": "unknown", "index_k": {"built": ["bf16"]}}, {"state": "active"}, {"state": "active", "index_k": None}],
)
def test_the_dtypes_built_are_unknown_when_one_server_does_not_say(server):
    assert pairing._built_dtypes([{"state": "active", "index_k": {"built": ["bf16"]}}, server]) is None


# ----- what each side's servers recorded, shown first -----
def _server(url: str, built: list[str] | None = None, state: str = "active", **fields) -> dict:
    """One server as ``extension_check.servers_recorded`` writes it into a summary."""
    index_k = None if built is None else {"built": built, "requested": built}
    return {"url": url, "state": state, "index_k": index_k, "ranks": None, "sglang": "0.5.23", **fields}


def test_each_sides_server_lines_are_prefixed_with_the_side_and_its_label_or_name():
    result = {
        "a": {"label": "bf16 stack", "servers": [_server("http://a:1", ["bf16"], parsing={"path": "deepseek-recipe"})]},
        "b": {"label": None, "servers": [_server("http://b:2", state="inactive")]},
    }
    assert pairing.side_lines(result) == [
        "A (bf16 stack): server http://a:1: extension active; index-K bf16 built; ranks not counted; SGLang 0.5.23, "
        "parsing deepseek-recipe",
        "B (B): server http://b:2: extension inactive; index-K not reported (no active record); ranks not counted; "
        "SGLang 0.5.23, parsing cannot tell",
    ]


def test_a_side_without_a_record_shows_its_servers_as_not_recorded():
    assert pairing.side_lines({"a": {"label": "x", "servers": None}}) == [
        "A (x): servers: not recorded (a summary of an earlier release): state, index-K dtype and parser unknown",
        "B (B): servers: not recorded (a summary of an earlier release): state, index-K dtype and parser unknown",
    ]


# ----- why a side's evidence does not show what it ran -----
def test_a_side_without_servers_or_with_an_empty_list_is_unknown():
    assert pairing._side_problems("A", None) == ["A's summary records no servers' state: what A ran is unknown"]
    assert pairing._side_problems("B", []) == ["B's summary records an empty list of servers: nothing shows what B ran"]


def test_a_restart_is_named_and_the_restart_check_only_of_an_active_server_not_restarted():
    servers = [
        _server("http://a:1", ["bf16"], restarted="its launch changed", restart_check="cannot tell x"),
        _server("http://a:2", ["bf16"], restart_check="cannot tell whether it restarted"),
        _server("http://a:3", state="inactive", restart_check="cannot tell y"),
    ]
    assert pairing._side_problems("A", servers) == [
        "A: http://a:1 its launch changed",
        "A: http://a:2 cannot tell whether it restarted",
        "A: its servers or ranks report different index-K pools (bf16/stock): A ran a mix, not one stack",
    ]


def test_a_server_in_an_unknown_state_is_named_and_no_dtype_is_judged():
    servers = [_server("http://a:1", ["bf16"]), _server("http://a:2", state="unknown")]
    assert pairing._side_problems("A", servers) == ["A: http://a:2 extension state unknown"]


@pytest.mark.parametrize("built", [None, ["none-built"]], ids=["configured-only", "none-built"])
def test_a_side_whose_built_dtype_is_not_reported_says_so(built):
    assert pairing._side_problems("B", [_server("http://b:1", built)]) == [
        "B: the index-K dtype built is not reported (configured only, or none built)"
    ]


def test_a_side_whose_servers_built_different_dtypes_ran_a_mix():
    servers = [_server("http://b:1", ["fp8"]), _server("http://b:2", ["bf16"])]
    assert pairing._side_problems("B", servers) == [
        "B: its servers or ranks report different index-K pools (bf16/fp8): B ran a mix, not one stack"
    ]


def test_a_side_of_one_dtype_on_every_server_has_no_problem():
    assert pairing._side_problems("A", [_server("http://a:1", ["fp8"]), _server("http://a:2", ["fp8"])]) == []


def test_servers_active_on_fewer_ranks_than_they_have_are_a_mix():
    short = {"active": 3, "total": 4, "group": "tp"}
    servers = [
        _server("http://a:1", ["bf16"], ranks={"active": 3, "total": 4, "group": "tp", "short": [short]}),
        _server("http://a:2", ["bf16"], ranks={"active": 2, "total": 2, "group": "tp", "short": []}),
        _server("http://a:3", ["bf16"], ranks=None),
    ]
    assert pairing._side_problems("A", servers) == [
        "A: http://a:1 active on 3 of 4 ranks: the ranks without the extension built stock pools, so A ran a mix"
    ]


# ----- a label that names another stack -----
@pytest.mark.parametrize(
    "label, servers, ran",
    [
        ("stock", [_server("http://a:1", ["bf16"])], "index-K bf16"),
        ("BF16-run", [_server("http://a:1", state="inactive")], "stock SGLang (no extension record)"),
        ("fp8", [_server("http://a:1", ["bf16"])], "index-K bf16"),
        ("fp4_vs_fp8", [_server("http://a:1", ["fp8"]), _server("http://a:2", ["fp8"])], "index-K fp8"),
    ],
)
def test_a_label_naming_another_stack_than_the_servers_report_is_said(label, servers, ran):
    assert pairing._label_problem("A", label, servers) == [
        f"A is labelled {label!r}, but its servers report {ran}: the label names another stack (swapped or stale "
        "--label?)"
    ]


@pytest.mark.parametrize(
    "label, servers",
    [
        ("bf16 stack", [_server("http://a:1", ["bf16"])]),
        ("Stock", [_server("http://a:1", state="inactive")]),
        ("fp8", [_server("http://a:1", ["mixed:bf16,fp8"])]),  # a mix of pools holds fp8
        ("baseline", [_server("http://a:1", ["bf16"])]),  # no word naming a stack
        ("fp8x", [_server("http://a:1", ["bf16"])]),  # a word only when standing alone
        (None, [_server("http://a:1", ["bf16"])]),
        ("fp8", None),
        ("fp8", [_server("http://a:1", state="unknown")]),  # nothing known that it ran
    ],
)
def test_a_label_that_matches_or_names_no_stack_raises_nothing(label, servers):
    assert pairing._label_problem("A", label, servers) == []


# ----- the evidence problems of a comparison -----
def _result(a: list[dict] | None, b: list[dict] | None, **fields) -> dict:
    return {"a": {"label": None, "servers": a}, "b": {"label": None, "servers": b}, **fields}


def _recipe(url: str, built: list[str]) -> dict:
    return _server(url, built, parsing={"path": "deepseek-recipe"})


def test_sides_of_two_dtypes_on_one_parsing_path_are_comparable():
    assert pairing.evidence_problems(_result([_recipe("http://a:1", ["fp8"])], [_recipe("http://b:1", ["bf16"])])) == []


def test_sides_of_one_dtype_do_not_compare_dtypes():
    result = _result([_recipe("http://a:1", ["bf16"])], [_recipe("http://b:1", ["bf16"])])
    assert pairing.evidence_problems(result) == [
        "both sides report the same index-K dtype (bf16): the A/B does not compare dtypes"
    ]


def test_each_sides_problems_then_the_labels_then_the_parsing_paths_are_listed():
    result = _result([_recipe("http://a:1", ["fp8"])], [_server("http://b:1", ["bf16"])])
    result["a"]["label"] = "bf16"
    assert pairing.evidence_problems(result) == [
        "A is labelled 'bf16', but its servers report index-K fp8: the label names another stack (swapped or "
        "stale --label?)",
        "cannot tell that the sides parse through one path (A deepseek-recipe, B cannot tell)",
    ]


def test_a_side_without_servers_is_not_judged_on_dtypes_or_parsing():
    assert pairing.evidence_problems(_result([_recipe("http://a:1", ["bf16"])], None)) == [
        "B's summary records no servers' state: what B ran is unknown"
    ]
    assert pairing.evidence_problems({"a": {"servers": [_recipe("http://a:1", ["bf16"])]}}) == [
        "B's summary records no servers' state: what B ran is unknown"
    ]


def _transport(a_only: int, b_only: int, p_value: float) -> dict:
    return {"a_only": a_only, "b_only": b_only, "p_value": p_value}


@pytest.mark.parametrize(
    "a_only, b_only, worse, more, fewer", [(9, 1, "A", 9, 1), (1, 9, "B", 9, 1), (4, 4, "B", 4, 4)]
)
def test_the_side_failing_in_transport_far_more_often_is_named(a_only, b_only, worse, more, fewer):
    result = {"transport": _transport(a_only, b_only, 0.0123456), "alpha": 0.05}
    assert pairing._transport_problem(result) == [
        f"{worse} fails in transport (aborted, cut, HTTP error, timeout) far more often ({more} pairs against "
        f"{fewer}, p=0.0123 < 0.05): the corruption verdict covers only the requests both sides answered, and "
        f"{worse}'s failures may hide its corruption"
    ]


def test_transport_failures_are_judged_at_the_comparisons_alpha_else_five_percent():
    assert pairing._transport_problem({"transport": _transport(9, 1, 0.05)}) == []
    assert pairing._transport_problem({"transport": _transport(9, 1, 0.02), "alpha": 0.01}) == []
    assert pairing._transport_problem({"transport": _transport(9, 1, 0.0499)})[0].endswith(
        "p=0.0499 < 0.05): the corruption verdict covers only the requests both sides answered, and A's failures "
        "may hide its corruption"
    )
    assert pairing._transport_problem({}) == []


def test_a_transport_problem_is_an_evidence_problem():
    result = _result(
        [_recipe("http://a:1", ["fp8"])], [_recipe("http://b:1", ["bf16"])], transport=_transport(0, 7, 0.01)
    )
    assert pairing.evidence_problems(result) == [
        "B fails in transport (aborted, cut, HTTP error, timeout) far more often (7 pairs against 0, p=0.01 < 0.05): "
        "the corruption verdict covers only the requests both sides answered, and B's failures may hide its "
        "corruption"
    ]


def test_a_side_whose_servers_record_no_parsing_path_cannot_tell_on_either_side():
    assert pairing._parsing_problem(_parsing(None), _parsing("deepseek-recipe")) == [
        "cannot tell that the sides parse through one path (A cannot tell, B deepseek-recipe)"
    ]


def test_side_a_problems_and_side_b_label_are_named_in_the_evidence_problems():
    result = _result(None, [_recipe("http://b:1", ["bf16"])])
    result["b"]["label"] = "fp8"
    assert pairing.evidence_problems(result) == [
        "A's summary records no servers' state: what A ran is unknown",
        "B is labelled 'fp8', but its servers report index-K bf16: the label names another stack (swapped or "
        "stale --label?)",
    ]


def test_sides_that_both_ran_one_mix_of_dtypes_do_not_compare_dtypes():
    result = _result([_recipe("http://a:1", ["mixed:bf16,fp8"])], [_recipe("http://b:1", ["mixed:fp8,bf16"])])
    assert pairing.evidence_problems(result)[-1] == (
        "both sides report the same index-K dtype (bf16/fp8): the A/B does not compare dtypes"
    )


def test_settings_either_summary_does_not_record_are_listed_in_one_note(tmp_path):
    a, b = _run(str(tmp_path / "a")), _run(str(tmp_path / "b"))
    del b.summary["config"]["seed"]  # recorded by A only
    del a.summary["config"]["stream"], b.summary["config"]["stream"]
    assert pairing.setting_differences(a, b) == ({}, ["--seed, --stream not recorded in both summaries"])


def test_every_output_shows_the_evidence_problems_and_an_unfinished_a_first():
    result = {
        "evidence_problems": ["A's summary records no servers' state: what A ran is unknown"],
        "settings_differ": {"--seed": "A 0, B 1", "--stream": "A not given, B given"},
        "a": {"run": "runs/a", "incomplete": "stopped at its time limit: 6 of 8 requests run, 2 not run"},
    }
    assert pairing.warnings(result) == [
        "not comparable as asked (--fail-if-not-comparable exits 4): A's summary records no servers' state: what A "
        "ran is unknown",
        "the runs differ in settings that decide the workload or its verdicts (--seed: A 0, B 1; --stream: A not "
        "given, B given); compared anyway (--allow-different-settings): a difference may be the settings, not the "
        "stacks",
        "A (runs/a) did not finish: stopped at its time limit: 6 of 8 requests run, 2 not run; only its recorded "
        "requests are paired",
    ]


def test_servers_short_of_ranks_are_all_listed_in_one_problem():
    ranks = [{"active": 3, "total": 4, "group": "tp"}, {"active": 1, "total": 2, "group": "dp"}]
    servers = [
        _server("http://a:1", ["bf16"], ranks={"short": ranks[:1]}),
        _server("http://a:2", ["bf16"], ranks={"short": ranks[1:]}),
    ]
    assert pairing._short_ranks("A", servers) == [
        "A: http://a:1 active on 3 of 4 ranks; http://a:2 active on 1 of 2 ranks: the ranks without the extension "
        "built stock pools, so A ran a mix"
    ]


def test_a_label_contradicted_by_a_mix_names_every_dtype_built():
    assert pairing._label_problem("B", "fp4", [_server("http://b:1", ["mixed:fp8,bf16"])]) == [
        "B is labelled 'fp4', but its servers report index-K bf16/fp8: the label names another stack (swapped or "
        "stale --label?)"
    ]


# ----- a run compared with itself -----
def _stamped(path: str, *latencies: float) -> pairing.LoadedRun:
    records = {f"0/{i}/0/0": {"started_at": 100.0 + i, "latency_s": s} for i, s in enumerate(latencies)}
    return pairing.LoadedRun(path, {}, records)


def test_a_copy_of_a_run_is_told_by_its_requests_start_and_latency(tmp_path):
    a, b = _stamped(str(tmp_path / "a"), 1.5, 2.5), _stamped(str(tmp_path / "b"), 1.5, 2.5)
    assert pairing.same_run(a, b) == (
        "A and B hold the same requests (all 2 paired requests started at the same moment with the same latency): "
        "one directory is a copy of the other"
    )


def test_requests_started_at_the_same_moments_with_other_latencies_are_two_runs(tmp_path):
    a, b = _stamped(str(tmp_path / "a"), 1.5, 2.5), _stamped(str(tmp_path / "b"), 1.5, 2.75)
    assert pairing.same_run(a, b) == ""


def test_a_run_is_loaded_through_the_readers_own_record_check(tmp_path, capsys):
    run = make_run(str(tmp_path / "run"), capsys)

    def refuse_every_record(record: dict) -> None:
        raise ValueError("verdict: not a field this reader takes")

    assert len(pairing.load(run).records) == 8
    with pytest.raises(ReproInputError) as err:
        pairing.load(run, refuse_every_record)
    assert str(err.value) == f"{requests_file(run)}:1: verdict: not a field this reader takes"
