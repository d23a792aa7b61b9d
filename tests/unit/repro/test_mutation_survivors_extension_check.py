"""tools/repro/extension_check.py behaviour that mutmut's mutants showed untested (docs/mutation-testing.md).

The decision from the schedulers' records (no record, each inactive rank named), finding a server's log in
serve's log directory (the start header's ``--port`` in both spellings, a log with bytes that are not UTF-8, a
URL without a port, the supervisor's and the router's logs left out) and the refusals of ``--expect-extension
on`` and ``off`` (every server listed, the fixes that apply), called directly on the module's functions.
Logs are written as `sglang-dsv4 serve` writes them: its start header (serving.supervise.start_header).
"""

from __future__ import annotations

import io
import os

import pytest

from sglang_dsv4_ext.errors import ServerActivationError
from sglang_dsv4_ext.tools.repro import extension_check
from sglang_dsv4_ext.tools.repro.server_evidence import EXTENSION_GAUGE
from sglang_dsv4_ext.tools.serving.launch_plan import ChildSpec
from sglang_dsv4_ext.tools.serving.supervise import start_header


def _header(args: list[str], module: str = "sglang.launch_server") -> str:
    spec = ChildSpec(name="x", role="prefill", python="python", module=module, args=args, env={}, health_url=None)
    return start_header(spec)


def _write(log_dir, name: str, text: str | bytes) -> str:
    path = os.path.join(log_dir, name)
    with open(path, "wb") as f:
        f.write(text if isinstance(text, bytes) else text.encode())
    return path


# ----- a flag's value in a start command -----
def test_a_flag_is_read_in_both_spellings_and_keeps_an_equals_sign_in_its_value():
    assert extension_check._flag_value(["--port", "30000"], "--port") == "30000"
    assert extension_check._flag_value(["--port=30000"], "--port") == "30000"
    assert extension_check._flag_value(["--opt=a=b"], "--opt") == "a=b"


def test_a_flag_last_with_no_value_has_none():
    assert extension_check._flag_value(["--model-path", "m", "--port"], "--port") is None


# ----- the last start recorded in a log -----
def test_the_last_start_is_read_past_bytes_that_are_not_utf8(tmp_path):
    text = (
        _header(["--port", "1"]).encode() + b"\xff\xfe garbage\n" + _header(["--port", "2", "--tag", "nameX"]).encode()
    )
    path = _write(tmp_path, "prefill.log", text)
    assert extension_check._last_start_command(path)[-4:] == ["--port", "2", "--tag", "nameX"]


def test_a_log_without_a_start_has_no_command_and_reads_nothing_else(tmp_path, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("--port 1\n"))  # shlex.split(None) would read it
    path = _write(tmp_path, "prefill.log", "[2026-12-01 12:00:00] no header here\n")
    assert extension_check._last_start_command(path) == []


# ----- which logs serve a URL's port -----
def test_a_url_without_a_port_is_its_schemes_default_port(tmp_path):
    assert extension_check._url_port("https://node") == 443
    path = _write(tmp_path, "prefill.log", _header(["--host", "node", "--port", "80"]))
    assert extension_check.server_logs(str(tmp_path), "http://node") == [path]


def test_the_supervisor_log_and_a_router_log_on_the_port_are_left_out(tmp_path):
    server = _write(tmp_path, "prefill.log", _header(["--port", "30000"]))
    _write(tmp_path, "serve.log", _header(["--port", "30000"]))
    _write(tmp_path, "router.log", _header(["--port", "30000"], module="sglang_router.launch_router"))
    assert extension_check.server_logs(str(tmp_path), "http://127.0.0.1:30000") == [server]


# ----- --expect-extension off -----
def _active(url: str, dtype: str) -> dict[str, object]:
    labels = [{"index_k_dtype": dtype, "gate": "auto", "launch": "1@1.00"}]
    return extension_check._state(url, extension_check.ACTIVE, "every scheduler reports active", labels)


def test_expect_off_names_every_active_server_and_the_fix():
    states = [_active("http://a:1", "bf16"), _active("http://b:2", "fp8")]
    reason = extension_check.refusal(states, "off")
    assert reason == (
        "--expect-extension off (a stock baseline): sglang-dsv4-ext is active on "
        "http://a:1: active index_k_dtype=bf16 gate=auto launch=1@1.00 (server_info); "
        "http://b:2: active index_k_dtype=fp8 gate=auto launch=1@1.00 (server_info). Fix: restart it "
        "with SGLANG_DSV4_EXT=0, point the run at the stock stack, or pass --expect-extension on (or any)."
    )


def test_servers_that_disagree_on_the_dtype_are_each_listed_with_theirs():
    two_ranks = _active("http://b:2", "fp8")
    two_ranks["label_sets"] = [
        {"index_k_dtype": "fp8", "launch": "1@1.00"},
        {"index_k_dtype": "bf16", "launch": "1@1.00"},
    ]
    unlabelled = _active("http://c:3", "fp8")
    unlabelled["label_sets"] = [{"launch": "1@1.00"}]
    reason = extension_check.refusal([_active("http://a:1", "bf16"), two_ranks, unlabelled], "on")
    assert reason == (
        "--expect-extension on: the servers disagree on index_k_dtype (http://a:1: bf16, http://b:2: bf16/fp8, "
        "http://c:3: ?); prefill and decode must use the same index-K dtype or PD transfers are corrupted without an "
        "error. Fix: start every server with the same SGLANG_DSV4_INDEX_K_DTYPE (`sglang-dsv4 serve` does so for a "
        "whole stack), or pass --expect-extension any to only record the state."
    )


# ----- the decision from the schedulers' records -----
def test_no_record_at_all_says_what_may_have_kept_the_extension_out():
    state = extension_check._from_records("http://a:1", [None, None])
    assert (state["state"], state["found"]) == (
        extension_check.INACTIVE,
        "its schedulers' /server_info has no sglang-dsv4-ext record (SGLANG_DSV4_EXT=0? SGLANG_PLUGINS without "
        "sglang_dsv4_ext? an sglang-dsv4-ext 0.3.0 or older, without records?)",
    )


def test_each_inactive_rank_is_named_with_its_reason():
    records = [None, {"active": False, "reason": "SGLANG_DSV4_EXT=0"}, {"active": False}]
    state = extension_check._from_records("http://a:1", records)
    assert state["found"] == (
        "not active in every scheduler: DP rank 0: no record; DP rank 1: SGLANG_DSV4_EXT=0; DP rank 2: not active"
    )


def test_a_server_whose_ranks_report_two_dtypes_is_described_with_both():
    state = _active("http://a:1", "fp8")
    state["label_sets"] = [{"index_k_dtype": "fp8"}, {"index_k_dtype": "bf16"}]
    assert extension_check.describe(state) == "active index_k_dtype=bf16/fp8 (server_info)"


# ----- --expect-extension on -----
def test_expect_on_lists_each_server_not_shown_active_with_its_notes_and_the_fixes_that_apply():
    unknown = extension_check._state(
        "http://a:1", extension_check.UNKNOWN, "its /server_info could not be read", notes=["n1", "n2"]
    )
    inactive = {"url": "http://b:2", "state": extension_check.INACTIVE, "found": "no record"}  # no notes recorded
    reason = extension_check.refusal([unknown, inactive, _active("http://c:3", "bf16")], "on")
    fix_unknown = extension_check._FIX_UNKNOWN.format(gauge=EXTENSION_GAUGE)
    assert reason == (
        "--expect-extension on: sglang-dsv4-ext is not shown active on every server, so the run would not measure "
        "the extension. http://a:1: its /server_info could not be read (n1) (n2); http://b:2: no record. Fix: "
        f"{fix_unknown}; {extension_check._FIX_INACTIVE}; {extension_check._FIX_ANY}."
    )
    assert EXTENSION_GAUGE in fix_unknown


def test_expect_on_gives_only_the_fixes_for_what_was_found():
    inactive = extension_check._state("http://b:2", extension_check.INACTIVE, "no record")
    unknown = extension_check._state("http://a:1", extension_check.UNKNOWN, "unreadable")
    only_inactive = extension_check.refusal([inactive], "on")
    only_unknown = extension_check.refusal([unknown], "on")
    assert only_inactive.endswith(f"Fix: {extension_check._FIX_INACTIVE}; {extension_check._FIX_ANY}.")
    assert only_unknown.endswith(
        f"Fix: {extension_check._FIX_UNKNOWN.format(gauge=EXTENSION_GAUGE)}; {extension_check._FIX_ANY}."
    )


def _record(launch: str, **fields) -> dict:
    from sglang_dsv4_ext.runtime.activation import EVIDENCE_FIELDS

    return {"active": True, **{f: "x" for f in EVIDENCE_FIELDS}, "launch": launch, **fields}


def test_each_decision_from_records_names_the_server_its_state_and_what_was_found():
    decide = extension_check._from_records
    inactive = decide("http://a:1", [{"active": False}])
    assert (inactive["url"], inactive["state"]) == ("http://a:1", extension_check.INACTIVE)
    partial = decide("http://a:1", [{"active": True}])
    assert (partial["url"], partial["state"], partial["found"]) == (
        "http://a:1",
        extension_check.UNKNOWN,
        "a scheduler's record lacks some of version, sglang, index_k_dtype, gate, fp4_budget, integrity, launch, "
        "process (or one is not a string)",
    )
    active = decide("http://a:1", [_record("7@1.00"), _record("7@1.00")])
    assert (active["state"], active["found"]) == (
        extension_check.ACTIVE,
        "every scheduler reports active in launch 7@1.00",
    )


def test_a_record_of_an_earlier_version_without_the_requested_dtype_is_complete():
    from sglang_dsv4_ext.runtime.activation import REQUESTED_DTYPE_FIELD

    earlier = {k: v for k, v in _record("7@1.00").items() if k != REQUESTED_DTYPE_FIELD}
    state = extension_check._from_records("http://a:1", [earlier])
    assert (state["state"], state["found"]) == (
        extension_check.ACTIVE,
        "every scheduler reports active in launch 7@1.00",
    )


def test_schedulers_of_two_launches_are_unknown_naming_both():
    state = extension_check._from_records("http://a:1", [_record("7@1.00"), _record("8@2.00")])
    assert (state["url"], state["state"], state["found"]) == (
        "http://a:1",
        extension_check.UNKNOWN,
        "its schedulers report several launches: 7@1.00, 8@2.00",
    )


def test_a_log_directory_without_the_servers_log_says_so(tmp_path):
    assert extension_check._log_note("http://127.0.0.1:30000", str(tmp_path), None) == (
        f"no log in {tmp_path} starts a server on port 30000"
    )


# ----- an A/B needs every server's record -----
def test_an_ab_refuses_each_server_whose_records_were_not_read_naming_it():
    unread = [
        extension_check._state("http://a:1", extension_check.UNKNOWN, "its /server_info could not be read (x)"),
        extension_check._state("http://b:2", extension_check.UNKNOWN, "records of several launches"),
    ]
    stock = extension_check._state("http://c:3", extension_check.INACTIVE, "no record")
    assert extension_check.refuse_unrecorded([*unread, stock, _active("http://d:4", "bf16")]) == (
        "an A/B needs every server's record, and these could not be read (http://a:1: its /server_info could not be "
        "read (x); http://b:2: records of several launches): a side whose state is not known could be running "
        "anything. Fix: name each side's prefill and decode servers with --server-metrics-a / --server-metrics-b "
        "URL[,URL...] (behind sglang-router, its GET /workers list is read when it serves one), each answering "
        "/server_info"
    )
    assert extension_check.refuse_unrecorded([stock, _active("http://d:4", "bf16")]) is None


# ----- a stock server's restart, told by its startup time -----
def test_a_stock_server_restarted_when_its_startup_time_changed():
    before = extension_check._state("http://a:1", extension_check.INACTIVE, "no record")
    before["evidence"] = {"identities": [], "startup_time": {"total": 12.5}}
    assert extension_check.restart_reason(before, {"records": [None], "startup_time": {"total": 12.5}}) is None
    assert extension_check.restart_reason(before, {"records": [None], "startup_time": {"total": 30.0}}) == (
        "its /server_info startup_time changed (SGLang's startup durations of another launch)"
    )


def test_a_startup_time_missing_before_or_after_tells_nothing():
    assert extension_check._startup_changed(None, {"total": 1.0}) is None
    assert extension_check._startup_changed({"total": 1.0}, None) is None
    assert extension_check._startup_changed({"total": 1.0}, {"total": 1.0}) is None
    assert extension_check._startup_changed({"total": 1.0}, {"total": 2.0}) == (
        "its /server_info startup_time changed (SGLang's startup durations of another launch)"
    )


# ----- --expect-index-k-dtype -----
def _with_index_k(state: dict[str, object], index_k: dict | None) -> dict[str, object]:
    state["evidence"] = {"index_k": index_k}
    return state


def test_expect_index_k_dtype_names_each_server_without_that_dtype_built_and_why():
    states = [
        _with_index_k(_active("http://a:1", "fp8"), {"built": ["fp8"], "requested": ["fp8"]}),
        _with_index_k(_active("http://b:2", "bf16"), {"built": ["bf16"], "requested": ["bf16"]}),
        _with_index_k(_active("http://c:3", "fp8"), {"built": None, "configured": ["fp8"]}),
        _with_index_k(_active("http://d:4", "fp8"), {"built": ["bf16", "fp8"], "requested": ["fp8"]}),
        extension_check._state("http://e:5", extension_check.INACTIVE, "no record"),
    ]
    assert extension_check.refusal(states, "any", "fp8") == (
        "--expect-index-k-dtype fp8: not every server reports a fp8 index-K pool built (http://b:2: index-K bf16 "
        "built; http://c:3: index-K fp8 configured, not built (the record does not say which pool was built): "
        "cannot tell which dtype it runs; http://d:4: index-K bf16/fp8 built; http://e:5: not shown active "
        "(inactive), so no built index-K dtype is reported). Fix: point the run at the fp8 stack "
        "(SGLANG_DSV4_INDEX_K_DTYPE=fp8; SGLang's --enable-deepseek-v4-fp4-indexer builds fp4), or ask for the "
        "dtype it runs."
    )


def test_expect_index_k_dtype_passes_servers_that_built_it_and_is_checked_before_expect_on():
    built = [_with_index_k(_active(f"http://a:{i}", "fp8"), {"built": ["fp8"], "requested": ["fp8"]}) for i in (1, 2)]
    assert extension_check.refusal(built, "on", "fp8") is None
    assert extension_check.refusal(built, "on", None) is None
    inactive = extension_check._state("http://e:5", extension_check.INACTIVE, "no record")
    assert extension_check.refusal([inactive], "on", "fp8").startswith("--expect-index-k-dtype fp8: ")
    assert extension_check._server_dtype_refusal(_with_index_k(_active("http://a:1", "fp8"), None), "fp8") == (
        "http://a:1: index-K dtype not recorded: cannot tell which dtype it runs"
    )


# ----- --expect-extension on: ranks without the extension -----
def test_expect_on_names_every_rank_group_short_of_the_extension_and_the_fix():
    short = _active("http://a:1", "bf16")
    short["evidence"] = {
        "ranks": {"short": [{"active": 3, "total": 4, "group": "tp"}, {"active": 0, "total": 2, "group": "dp"}]}
    }
    counted = _active("http://b:2", "bf16")
    counted["evidence"] = {"ranks": {"active": 2, "total": 2, "group": "tp", "short": []}}
    uncounted = _active("http://c:3", "bf16")  # no evidence read: nothing counted, nothing refused
    assert extension_check.refusal([short, counted, uncounted], "on") == (
        "--expect-extension on: the extension is not active on every rank (http://a:1: active on 3 of 4 ranks (tp); "
        "http://a:1: active on 0 of 2 ranks (dp)): a rank without it builds stock pools and the run would measure "
        "a mix. Fix: start every node of the server with the extension (`sglang-dsv4 doctor` on each node says why "
        "it did not load), or pass --expect-extension any to only record the state."
    )
    assert extension_check.refusal([counted, uncounted], "on") is None
    assert extension_check.refusal([short], "any") is None


def test_a_rank_count_that_names_no_group_is_said_without_one():
    """A record's rank count without a group (none recorded) reads "active on 1 of 2 ranks", never "(None)"."""
    short = _active("http://a:1", "bf16")
    short["evidence"] = {"ranks": {"short": [{"active": 1, "total": 2}]}}
    refusal = extension_check.refusal([short], "on")
    assert "(http://a:1: active on 1 of 2 ranks): a rank without it" in refusal
    assert "None" not in refusal
    summed = extension_check._ranks(
        [{"ranks": {"active": 1, "total": 2}}, {"ranks": {"active": 2, "total": 2, "group": "tp"}}]
    )
    assert summed["group"] == "tp"
    assert extension_check.ranks_text(summed) == "active on 3 of 4 ranks (tp)"
    assert extension_check.ranks_text(extension_check._ranks([{"ranks": {"active": 2, "total": 2}}])) == (
        "active on 2 of 2 ranks"
    )


# ----- what a record reports beside the state, in words -----
@pytest.mark.parametrize(
    "index_k, text",
    [
        (None, "index-K dtype not recorded"),
        ({"built": ["bf16"], "requested": ["bf16"]}, "index-K bf16 built"),
        ({"built": ["bf16", "fp8"], "requested": ["fp8"]}, "index-K bf16/fp8 built"),
        (
            {"built": None, "configured": ["bf16", "fp8"]},
            "index-K bf16/fp8 configured, not built (the record does not say which pool was built)",
        ),
        (
            {"built": None, "configured": []},
            "index-K ? configured, not built (the record does not say which pool was built)",
        ),
        ({"built": ["none-built"], "requested": ["bf16", "fp8"]}, "index-K none built yet (bf16/fp8 requested)"),
    ],
)
def test_the_index_k_dtype_is_said_built_configured_or_none_built_yet(index_k, text):
    assert extension_check.index_k_text(index_k) == text


def test_ranks_are_said_counted_with_their_groups_or_not_counted():
    assert extension_check.ranks_text(None) == "ranks not counted"
    assert extension_check.ranks_text({"active": 3, "total": 4, "group": "dp,tp"}) == "active on 3 of 4 ranks (dp,tp)"


def test_the_live_launch_is_an_active_servers_and_no_other():
    assert extension_check.live_launch(_active("http://a:1", "bf16")) == "1@1.00"
    assert extension_check.live_launch(extension_check._state("http://a:1", extension_check.INACTIVE, "no")) is None


# ----- the same server after the run -----
def _read(*records: dict | None, **fields) -> dict[str, object]:
    """A server's /server_info as server_info.read returns it."""
    return {"records": list(records), **fields}


def _before(*identities: str, state: str = extension_check.ACTIVE) -> dict[str, object]:
    return {"url": "http://a:1", "state": state, "evidence": {"identities": list(identities)}}


def test_a_server_whose_launch_or_process_changed_during_the_run_restarted():
    before = _before("7@1.00/8@1.50")
    assert extension_check.restart_reason(before, _read(_record("7@1.00", process="8@1.50"))) is None
    assert extension_check.restart_reason(before, _read(_record("9@2.00", process="10@2.50"))) == (
        "its schedulers' launch/process changed: before 7@1.00/8@1.50; after 9@2.00/10@2.50"
    )
    assert extension_check.restart_reason(before, _read(None)) == (
        "its schedulers' launch/process changed: before 7@1.00/8@1.50; after none"
    )


def test_a_stock_server_that_reports_records_after_the_run_restarted_with_the_extension():
    before = _before(state=extension_check.INACTIVE)
    after = _read(_record("9@2.00", process="10@2.50"), _record("9@2.00", process="11@2.50"))
    assert extension_check.restart_reason(before, after) == (
        "its schedulers had no launch/process record before the run; after it they report 9@2.00/10@2.50, "
        "9@2.00/11@2.50"
    )


def test_a_restart_cannot_be_told_from_an_unread_server_before_or_after():
    assert extension_check.restart_reason(_before("7@1.00/8@1.50"), {"error": "timed out"}) is None
    unknown = _before(state=extension_check.UNKNOWN)
    assert extension_check.restart_reason(unknown, _read(_record("9@2.00", process="10@2.50"))) is None


def test_what_could_not_be_rechecked_after_the_run_is_said():
    assert extension_check.recheck_note(_before("7@1.00/8@1.50"), _read()) is None
    assert extension_check.recheck_note(_before("7@1.00/8@1.50"), {"error": "HTTP 503"}) == (
        "cannot tell whether it restarted during the run: HTTP 503 (read after the run)"
    )
    assert extension_check.recheck_note({"url": "http://a:1"}, _read()) == (
        "cannot tell whether it restarted during the run: its records name no launch and process"
    )


# ----- what a run records per server, and its lines -----
def test_each_server_is_recorded_with_its_evidence_and_the_after_run_row_of_its_url():
    found = {
        "index_k": {"built": ["fp8"], "requested": ["fp8"]},
        "ranks": {"active": 1, "total": 1, "group": "tp", "short": []},
        "sglang": "0.5.23",
        "parsing": {"path": "deepseek-recipe", "why": "w"},
    }
    states = [
        {"url": "http://a:1", "state": extension_check.ACTIVE, "evidence": found},
        {"url": "http://b:2", "state": extension_check.UNKNOWN},
    ]
    rows = [{"url": "http://b:2", "restarted": "its launch changed", "restart_check": "c"}, {"url": "http://z:9"}]
    assert extension_check.servers_recorded(states, rows) == [
        {"url": "http://a:1", "state": "active", **found, "restarted": None, "restart_check": None},
        {
            "url": "http://b:2",
            "state": "unknown",
            "index_k": None,
            "ranks": None,
            "sglang": None,
            "parsing": None,
            "restarted": "its launch changed",
            "restart_check": "c",
        },
    ]
    assert extension_check.servers_recorded(states, None)[1]["restarted"] is None
    assert extension_check.servers_recorded(None, rows) is None


def test_server_lines_put_restarts_first_and_a_recheck_note_only_where_no_restart_was_seen():
    servers = [
        {"url": "http://a:1", "state": "active", "index_k": {"built": ["fp8"]}, "sglang": "0.5.23",
         "parsing": {"path": "deepseek-recipe"}, "ranks": {"active": 2, "total": 2, "group": "tp"},
         "restart_check": "cannot tell whether it restarted during the run: x"},
        {"url": "http://b:2", "state": "active", "index_k": {"built": ["fp8"]}, "restarted": "its launch changed",
         "restart_check": "not shown"},
        {"url": "http://c:3"},
    ]  # fmt: skip
    assert extension_check.server_lines(servers) == [
        "RESTARTED: http://b:2: its launch changed",
        "server http://a:1: extension active; index-K fp8 built; active on 2 of 2 ranks (tp); SGLang 0.5.23, parsing "
        "deepseek-recipe; cannot tell whether it restarted during the run: x",
        "server http://b:2: extension active; index-K fp8 built; ranks not counted; SGLang ?, parsing cannot tell",
        "server http://c:3: extension not recorded; index-K not reported (no active record); ranks not counted; "
        "SGLang ?, parsing cannot tell",
    ]


# ----- the evidence a live /server_info holds beside the state -----
def test_the_evidence_of_records_names_identities_dtypes_ranks_release_and_parsing_path():
    records = [
        _record("7@1.00", process="8@1.50", sglang="0.5.23", index_k_dtype="fp8", index_k_dtype_requested="fp8",
                ranks={"active": 2, "total": 2, "group": "tp"}),
        _record("7@1.00", process="9@1.50", sglang="0.5.23", index_k_dtype="bf16", index_k_dtype_requested="fp8",
                ranks={"active": 1, "total": 2, "group": "dp"}),
        "not a record",
    ]  # fmt: skip
    live = _read(*records, startup_time={"total": 3.0}, version="0.5.22", tool_call_parser="deepseekv4")
    assert extension_check.evidence(live) == {
        "identities": ["7@1.00/8@1.50", "7@1.00/9@1.50"],
        "startup_time": {"total": 3.0},
        "index_k": {"built": ["bf16", "fp8"], "requested": ["fp8"]},
        "ranks": {"active": 3, "total": 4, "group": "dp,tp", "short": [{"active": 1, "total": 2, "group": "dp"}]},
        "sglang": "0.5.23",
        "parsing": {"path": "deepseek-recipe", "why": "SGLang 0.5.23 with deepseekv4: deepseek-recipe, token level"},
    }
    assert extension_check.evidence({"error": "x"}) == {}


def test_records_of_two_releases_or_none_take_the_servers_version():
    two = _read(_record("7@1.00", sglang="0.5.23"), _record("7@1.00", sglang="0.5.22"), version="0.5.22")
    assert extension_check.evidence(two)["sglang"] == "0.5.22"
    stock = extension_check.evidence(_read(None, version="0.5.23", tool_call_parser="deepseekv41"))
    assert (stock["sglang"], stock["index_k"], stock["ranks"]) == ("0.5.23", {"built": None, "configured": []}, None)


def test_records_without_the_requested_dtype_report_the_configured_one():
    earlier = {k: v for k, v in _record("7@1.00").items() if k != "index_k_dtype_requested"}
    assert extension_check._index_k([dict(earlier, index_k_dtype="fp8"), {"active": False}]) == {
        "built": None,
        "configured": ["fp8"],
    }


@pytest.mark.parametrize(
    "ranks",
    [None, {"active": 1}, {"active": "1", "total": 2}, {"active": 1, "total": 2.0}, "1/2"],
)
def test_ranks_are_not_counted_unless_every_record_counts_them_as_whole_numbers(ranks):
    counted = {"ranks": {"active": 1, "total": 1, "group": "tp"}}
    assert extension_check._ranks([counted, {"ranks": ranks}]) is None
    assert extension_check._ranks([]) is None


@pytest.mark.parametrize(
    "version, parser, path, why",
    [
        ("0.5.23", "deepseekv41", "deepseek-recipe", "SGLang 0.5.23 with deepseekv41: deepseek-recipe, token level"),
        (
            " v0.6.0rc1",
            "deepseekv4",
            "deepseek-recipe",
            "SGLang  v0.6.0rc1 with deepseekv4: deepseek-recipe, token level",
        ),
        ("0.5.22", "deepseekv4", "sglang-detectors", "SGLang 0.5.22 with deepseekv4: SGLang's Python detectors"),
        ("0.4.99", "deepseekv41", "sglang-detectors", "SGLang 0.4.99 with deepseekv41: SGLang's Python detectors"),
        ("main", "deepseekv4", "cannot tell", "SGLang version 'main' not a release number"),
        (None, "deepseekv4", "cannot tell", "SGLang version None not a release number"),
        (
            "0.5.23",
            "qwen",
            "cannot tell",
            "tool_call_parser 'qwen': SGLang then picks the encoding by the checkpoint's architecture, which "
            "/server_info does not report",
        ),
    ],
)
def test_the_parsing_path_follows_the_release_and_the_tool_call_parser(version, parser, path, why):
    assert extension_check.parsing_path(version, parser) == {"path": path, "why": why}


# ----- one server named twice -----
def test_one_server_named_twice_by_address_or_by_its_records_is_refused():
    by_address = [{"url": "http://Node:80/"}, {"url": "http://node"}]
    assert extension_check.refuse_one_server_twice(by_address) == (
        "--server-metrics: http://Node:80/ and http://node are one server (its address); each server has one row of "
        "evidence and one server compared with itself shows no difference. Name each server once"
    )
    by_records = [
        {"url": "http://a:1", "evidence": {"identities": ["7@1.00/8@1.50"]}},
        {"url": "http://b:2", "evidence": {"identities": ["9@2.00/10@2.50"]}},
        {"url": "http://c:3", "evidence": {"identities": ["7@1.00/8@1.50"]}},
    ]
    assert extension_check.refuse_one_server_twice(by_records, "--server-metrics-a") == (
        "--server-metrics-a: http://a:1 and http://c:3 are one server (launch/process 7@1.00/8@1.50); each server "
        "has one row of evidence and one server compared with itself shows no difference. Name each server once"
    )
    assert extension_check.refuse_one_server_twice(by_records[:2]) is None


def test_a_summary_of_an_earlier_release_has_one_line_saying_its_servers_are_not_recorded():
    assert extension_check.server_lines(None) == [
        "servers: not recorded (a summary of an earlier release): state, index-K dtype and parser unknown"
    ]


def test_an_active_server_is_described_with_its_built_dtype_and_ranks_when_its_evidence_was_read():
    state = _active("http://a:1", "fp8")
    assert extension_check.describe(state) == "active index_k_dtype=fp8 gate=auto launch=1@1.00 (server_info)"
    state["evidence"] = {
        "index_k": {"built": ["fp8"], "requested": ["fp8"]},
        "ranks": {"active": 2, "total": 2, "group": "tp"},
    }
    assert extension_check.describe(state) == (
        "active index_k_dtype=fp8 gate=auto launch=1@1.00 (server_info); index-K fp8 built; active on 2 of 2 ranks (tp)"
    )
    inactive = extension_check._state("http://b:2", extension_check.INACTIVE, "no record")
    assert extension_check.describe(inactive) == "inactive: no record"


# ----- the activation gauge, as a note -----
def _gauge(launch: str, process: str = "8@1.50") -> dict[str, str]:
    """A label set of the activation gauge with exactly the labels this version exports."""
    from sglang_dsv4_ext.runtime.activation import EVIDENCE_FIELDS

    return {**{f: "x" for f in EVIDENCE_FIELDS}, "launch": launch, "process": process}


def test_the_gauge_note_counts_the_live_launch_and_names_stale_launches_and_partial_samples():
    entry = {
        "extension": [_gauge("7@1.00"), _gauge("7@1.00", "9@1.50"), _gauge("5@0.50"), _gauge("6@0.70"), {"a": "1"}]
    }
    assert extension_check._gauge_note(entry, "7@1.00") == (
        f"{EXTENSION_GAUGE} shows this launch in 2 process(es); ignored {EXTENSION_GAUGE} of launch 5@0.50, 6@0.70, "
        "not of the server answering now (left in a shared PROMETHEUS_MULTIPROC_DIR?); ignored 1 "
        f"{EXTENSION_GAUGE} sample(s) without the labels version, sglang, index_k_dtype, gate, fp4_budget, integrity, "
        "index_k_dtype_requested, launch, process (not this sglang-dsv4-ext's)"
    )
    assert extension_check._gauge_note({"extension": [_gauge("7@1.00")]}, "7@1.00") == (
        f"{EXTENSION_GAUGE} shows this launch in 1 process(es)"
    )
    assert extension_check._gauge_note({"extension": []}, "7@1.00") is None


# ----- one server, all sources -----
def test_a_servers_given_server_info_is_what_decides_it_not_a_read_now():
    live = _read(_record("7@1.00", process="8@1.50"))
    state = extension_check.server_state({"url": "http://127.0.0.1:1"}, None, live)  # nothing answers on port 1
    assert (state["state"], state["found"]) == (
        extension_check.ACTIVE,
        "every scheduler reports active in launch 7@1.00",
    )


def test_a_server_whose_server_info_could_not_be_read_is_unknown_naming_the_error():
    state = extension_check.server_state({"url": "http://a:1"}, None, {"url": "http://a:1", "error": "HTTP 404"})
    assert (state["url"], state["state"], state["found"], state["evidence"]) == (
        "http://a:1",
        extension_check.UNKNOWN,
        "its /server_info could not be read (HTTP 404): nothing shows the state of the server answering now",
        {},
    )


def test_check_raises_the_dtype_refusal_before_any_request():
    built = _with_index_k(_active("http://a:1", "bf16"), {"built": ["bf16"], "requested": ["bf16"]})
    extension_check.check([built], "on", "bf16")
    with pytest.raises(ServerActivationError) as err:
        extension_check.check([built], "on", "fp8")
    assert str(err.value).startswith(
        "refused before sending any request: --expect-index-k-dtype fp8: not every server reports a fp8 index-K pool "
        "built (http://a:1: index-K bf16 built)"
    )


def test_the_same_launch_and_process_after_the_run_is_the_same_server_whatever_its_startup_time():
    before = _before("7@1.00/8@1.50")
    before["evidence"]["startup_time"] = {"total": 1.0}
    after = _read(_record("7@1.00", process="8@1.50"), startup_time={"total": 2.0})
    assert extension_check.restart_reason(before, after) is None


def test_a_restart_names_every_launch_and_process_before_and_after():
    before = _before("7@1.00/8@1.50", "7@1.00/9@1.50")
    after = _read(_record("10@2.00", process="11@2.50"), _record("10@2.00", process="12@2.50"))
    assert extension_check.restart_reason(before, after) == (
        "its schedulers' launch/process changed: before 7@1.00/8@1.50, 7@1.00/9@1.50; after 10@2.00/11@2.50, "
        "10@2.00/12@2.50"
    )
