"""An A/B answers the question it was asked: each side's recorded index-K dtype, state, ranks, SGLang release
and parsing path are read, shown first and checked; one server is one server; a restart during a run is seen.

Through the real CLI against the loopback stand-in (tests/support/repro_server.py), which answers ``/server_info``
as SGLang's ``http_server.py`` does (``internal_states``, one per DP rank, each with the scheduler's record under
``sglang_dsv4_ext``: the built ``index_k_dtype`` beside ``index_k_dtype_requested``, and ``ranks``), ``GET /workers``
as sglang-router does, and restarts as a crashed server does (counters from zero, another launch).
"""

from __future__ import annotations

import json
import os

import pytest

from sglang_dsv4_ext.tools import exit_codes
from sglang_dsv4_ext.tools.repro import server_info
from tests.support.repro_cli import TINY, assert_refused, run_cli
from tests.support.repro_server import ACTIVE_BF16, InjectingServer

# The repro CLI end to end against stand-in servers: a second or two a test, so `make test-fast` leaves
# these out (the whole suite runs them).
pytestmark = pytest.mark.slow

FP8 = dict(ACTIVE_BF16, index_k_dtype="fp8")


def _record(labels=ACTIVE_BF16, **fields) -> dict:
    """A scheduler's record in the contract's form (the built dtype beside the requested one, ranks counted)."""
    base = dict(labels, active=True, index_k_dtype_requested=labels["index_k_dtype"])
    base["ranks"] = {"active": 1, "total": 1, "group": "tp"}
    return {**base, **fields}


def _run(capsys, url, out, *extra):
    return run_cli(["repro", "run", "--endpoint", url, "--out", str(out), *TINY, *extra], capsys)


def _summary(out) -> dict:
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f)


# ----- repro run --expect-index-k-dtype ------------------------------------------------------------------
@pytest.mark.parametrize("record, fragment", [
    (_record(), "index-K bf16 built"),  # another dtype built
    ({k: v for k, v in _record(FP8).items() if k != "index_k_dtype_requested"},  # today's record: configured only
     "index-K fp8 configured, not built"),
    (_record(FP8, index_k_dtype="none-built"), "index-K none built yet (fp8 requested)"),
], ids=["bf16-built", "configured-only", "none-built"])  # fmt: skip
def test_expect_index_k_dtype_refuses_a_server_that_does_not_report_it_built(record, fragment, tmp_path, capsys):
    with InjectingServer({}, records=[record]) as srv:
        rc, _, err = _run(capsys, srv.url, tmp_path / "run", "--expect-index-k-dtype", "fp8")
        assert_refused(rc, err, "--expect-index-k-dtype fp8", srv.url, fragment)
        assert srv.requests == 0
    assert not (tmp_path / "run").exists()


def test_expect_index_k_dtype_passes_the_dtype_built_and_records_it(tmp_path, capsys):
    with InjectingServer({}, extension=[FP8], records=[_record(FP8)]) as srv:
        rc, out, err = _run(capsys, srv.url, tmp_path / "run", "--expect-index-k-dtype", "fp8")
    assert rc == 0, err
    summary = _summary(tmp_path / "run")
    assert summary["extension"]["expect_index_k_dtype"] == "fp8"
    [server] = summary["servers"]
    assert server["index_k"] == {"built": ["fp8"], "requested": ["fp8"]}
    assert f"server {srv.url}: extension active; index-K fp8 built; active on 1 of 1 ranks (tp)" in out
    assert "--expect-index-k-dtype fp8" in summary["rerun_command"]


# ----- ranks --------------------------------------------------------------------------------------
def test_fewer_active_ranks_than_ranks_are_refused_and_uncounted_ranks_are_said(tmp_path, capsys):
    short = _record(ranks={"active": 3, "total": 4, "group": "tp"})
    with InjectingServer({}, records=[short]) as srv:
        rc, _, err = _run(capsys, srv.url, tmp_path / "run")
        assert_refused(rc, err, "not active on every rank", f"{srv.url}: active on 3 of 4 ranks (tp)", "doctor")
        assert srv.requests == 0
    uncounted = {k: v for k, v in _record().items() if k != "ranks"}
    with InjectingServer({}, records=[uncounted]) as srv:
        rc, out, err = _run(capsys, srv.url, tmp_path / "run")
    assert rc == 0, err
    assert "ranks not counted" in out and _summary(tmp_path / "run")["servers"][0]["ranks"] is None


# ----- one server is one server ------------------------------------------------------------------------
def test_one_server_under_two_spellings_is_refused_not_doubled(tmp_path, capsys):
    with InjectingServer({}) as srv:
        port = srv.url.rsplit(":", 1)[1]
        rc, _, err = _run(capsys, srv.url, tmp_path / "run", "--server-metrics",
                          f"http://127.0.0.1:{port},http://localhost:{port}")  # fmt: skip
        assert_refused(rc, err, "--server-metrics", "names one server twice")
        assert srv.requests == 0
    assert server_info.address_key("HTTP://LOCALHOST:80/") == server_info.address_key("http://[::1]")


def test_two_urls_whose_records_are_one_launch_and_process_are_one_server(tmp_path, capsys):
    """Two addresses (a node's name and its IP, say) reaching the same schedulers: their records say so."""
    record = _record()
    with InjectingServer({}, records=[record]) as a, InjectingServer({}, records=[record]) as b:
        rc, _, err = _run(capsys, a.url, tmp_path / "run", "--server-metrics", f"{a.url},{b.url}")
        assert_refused(rc, err, f"{a.url} and {b.url} are one server", f"launch/process {record['launch']}")
        assert a.requests == b.requests == 0


def test_ab_of_one_server_under_two_spellings_is_refused(tmp_path, capsys):
    with InjectingServer({}) as srv:
        rc, _, err = run_cli(["repro", "ab", "--endpoint-a", srv.url, "--endpoint-b", srv.url + "/",
                              "--out", str(tmp_path / "ab"), *TINY], capsys)  # fmt: skip
        assert_refused(rc, err, "are one server", "shows no difference")
        assert srv.requests == 0
    record = _record()  # two addresses, one set of schedulers: their records are of one launch and process
    with InjectingServer({}, records=[record]) as a, InjectingServer({}, records=[record]) as b:
        rc, _, err = run_cli(["repro", "ab", "--endpoint-a", a.url, "--endpoint-b", b.url,
                              "--out", str(tmp_path / "ab"), *TINY], capsys)  # fmt: skip
        assert_refused(rc, err, "A and B share a server", f"launch/process {record['launch']}")
        assert a.requests == b.requests == 0
    assert not (tmp_path / "ab").exists()


# ----- ab behind routers: the workers are checked ------------------------------------------------------
def test_ab_behind_routers_reads_the_workers_records_and_requires_them(tmp_path, capsys):
    with InjectingServer({}) as wa, InjectingServer({}, extension=[FP8]) as wb, \
            InjectingServer({}, server_info=False) as wb_unread:  # fmt: skip
        with InjectingServer({}, server_info=False, workers=[wa.url]) as ra, \
                InjectingServer({}, server_info=False, workers=[wb.url]) as rb:  # fmt: skip
            rc, out, err = run_cli(["repro", "ab", "--endpoint-a", ra.url, "--endpoint-b", rb.url, "--label-a", "fp8",
                                    "--label-b", "bf16", "--out", str(tmp_path / "ab"), *TINY], capsys)  # fmt: skip
            assert rc == 0, err
            assert [s["url"] for s in _summary(tmp_path / "ab" / "a")["servers"]] == [wa.url]
            assert [s["url"] for s in _summary(tmp_path / "ab" / "b")["servers"]] == [wb.url]
            assert out.index(f"A (fp8): server {wa.url}: extension active; index-K bf16 built") < out.index("paired")
            assert ra.requests == rb.requests == 8  # the chats went through the routers
        with InjectingServer({}, server_info=False, workers=[wb_unread.url]) as rb:
            # --expect-extension any no longer means "nothing checked": the worker's record is required.
            rc, _, err = run_cli(["repro", "ab", "--endpoint-a", wa.url, "--endpoint-b", rb.url, "--expect-extension",
                                  "any", "--out", str(tmp_path / "ab2"), *TINY], capsys)  # fmt: skip
            assert_refused(rc, err, "an A/B needs every server's record", wb_unread.url, "--server-metrics-b")
            assert wa.requests == wb_unread.requests == rb.requests == 0
    assert not (tmp_path / "ab2").exists()


def test_sglang_routers_worker_list_is_parsed_and_anything_else_is_not_one():
    body = {"workers": [{"url": "http://10.0.0.1:30000", "worker_type": "prefill"}], "total": 1}
    assert server_info.parse_workers(body) == ["http://10.0.0.1:30000"]
    for other in ({"workers": []}, {"internal_states": []}, [1]):
        with pytest.raises(ValueError):
            server_info.parse_workers(other)
    with pytest.raises(server_info.UnreadableWorkersError):  # a router, but its workers cannot be read from here
        server_info.parse_workers({"workers": [{"url": "grpc://10.0.0.1:50051"}], "total": 1})


def test_ab_behind_a_router_of_grpc_workers_is_refused_not_read_through_the_router(tmp_path, capsys):
    with InjectingServer({}) as a, InjectingServer({}, workers=["grpc://10.0.0.1:50051"]) as router:
        rc, _, err = run_cli(["repro", "ab", "--endpoint-a", a.url, "--endpoint-b", router.url,
                              "--out", str(tmp_path / "ab"), *TINY], capsys)  # fmt: skip
        assert_refused(rc, err, f"{router.url} is a router", "grpc://10.0.0.1:50051", "--server-metrics-b")
        assert a.requests == router.requests == 0
    assert not (tmp_path / "ab").exists()


# ----- compare: what each side ran, first -------------------------------------------------------------
def _two_runs(tmp_path, capsys, records_a, records_b, ext_a=ACTIVE_BF16, ext_b=ACTIVE_BF16):
    dirs = []
    for name, records, ext in (("a", records_a, ext_a), ("b", records_b, ext_b)):
        with InjectingServer({"malformed_dsml": 0.3}, seed=1, extension=[ext], records=records) as srv:
            rc, _, err = _run(capsys, srv.url, tmp_path / name)
            assert rc == 0, err
        dirs.append(str(tmp_path / name))
    return dirs


def test_compare_names_each_sides_dtype_first_and_flags_two_sides_of_one_dtype(tmp_path, capsys):
    a, b = _two_runs(tmp_path, capsys, [_record(FP8)], [_record(ACTIVE_BF16)], ext_a=FP8)
    rc, out, err = run_cli(["repro", "compare", a, b, "--fail-if-not-comparable"], capsys)
    assert rc == exit_codes.OK, err
    first, second = out.splitlines()[:2]
    assert first.startswith("A (A): server ") and "index-K fp8 built" in first
    assert second.startswith("B (B): server ") and "index-K bf16 built" in second
    assert "not comparable as asked" not in out
    # Both stacks bf16 (the "fp8 baseline" ran bf16): flagged at the top, and refusable.
    fp8_label_b = _two_runs(tmp_path / "same", capsys, [_record()], [_record()])
    rc, out, err = run_cli(["repro", "compare", *fp8_label_b, "--fail-if-not-comparable"], capsys)
    assert rc == exit_codes.NOT_COMPARABLE == 4, err
    flagged = [line for line in out.splitlines() if "not comparable as asked" in line]
    assert flagged and "both sides report the same index-K dtype (bf16)" in flagged[0]
    assert out.index(flagged[0]) < out.index("paired requests")
    rc, _, _ = run_cli(["repro", "compare", *fp8_label_b], capsys)
    assert rc == exit_codes.OK  # without the flag: flagged, not refused


def test_compare_flags_a_side_whose_dtype_is_only_configured_and_sides_on_two_parsing_paths(tmp_path, capsys):
    configured_only = {k: v for k, v in _record(FP8).items() if k != "index_k_dtype_requested"}
    on_0_5_22 = _record(dict(ACTIVE_BF16, sglang="0.5.22"))
    a, b = _two_runs(tmp_path, capsys, [configured_only], [on_0_5_22], ext_a=FP8)
    rc, out, err = run_cli(["repro", "compare", a, b, "--fail-if-not-comparable"], capsys)
    assert rc == exit_codes.NOT_COMPARABLE, err
    assert "A: the index-K dtype built is not reported (configured only, or none built)" in out
    assert "different paths (A deepseek-recipe, B sglang-detectors)" in out
    assert "SGLang 0.5.22, parsing sglang-detectors" in out.splitlines()[1]


def test_parsing_path_follows_the_release_and_says_cannot_tell_otherwise():
    from sglang_dsv4_ext.tools.repro.extension_check import parsing_path

    assert parsing_path("0.5.23", "deepseekv4")["path"] == "deepseek-recipe"
    assert parsing_path("0.5.22", "deepseekv41")["path"] == "sglang-detectors"
    assert parsing_path("0.5.23", None)["path"] == "cannot tell"  # then the checkpoint's architecture decides
    assert parsing_path("stand-in", "deepseekv4")["path"] == "cannot tell"


# ----- a restart during the run -------------------------------------------------------------------------
def test_a_server_restarted_during_the_run_is_marked_everywhere(tmp_path, capsys):
    with InjectingServer({"reset": 0.5}, seed=2, restart_at=5) as srv:
        rc, out, err = _run(capsys, srv.url, tmp_path / "run")
    assert rc == 0, err
    [row] = _summary(tmp_path / "run")["server_evidence"]
    assert row["restarted"].startswith("restarted during the run: deltas not comparable")
    assert "launch/process changed" in row["restarted"]
    assert row["aborted_requests"] is None  # no negative delta printed as a number
    assert f"RESTARTED: {srv.url}: restarted during the run: deltas not comparable" in out
    with InjectingServer({"malformed_dsml": 0.3}, seed=1) as other:
        rc, _, err = _run(capsys, other.url, tmp_path / "other")
        assert rc == 0, err
    rc, out, err = run_cli(["repro", "compare", str(tmp_path / "other"), str(tmp_path / "run"),
                            "--fail-if-not-comparable"], capsys)  # fmt: skip
    assert rc == exit_codes.NOT_COMPARABLE, err
    assert f"B: {srv.url} restarted during the run: deltas not comparable" in out


def test_a_counter_that_went_down_marks_a_restart_even_when_the_records_cannot_be_read_after(tmp_path, capsys):
    from sglang_dsv4_ext.tools.repro import server_evidence

    before = [{"url": "http://h:1", "counters": {"sglang:num_aborted_requests": 9.0}}]
    after = [{"url": "http://h:1", "counters": {"sglang:num_aborted_requests": 5.0}}]
    [row] = server_evidence.deltas(before, after)
    assert (
        row["restarted"] == ("restarted during the run: deltas not comparable (aborted_requests went down by 4)")
        and row["aborted_requests"] is None
    )
    assert "RESTARTED" in server_evidence.format_table([row])


def test_a_stock_baseline_is_named_as_such_and_not_taken_for_the_same_dtype(tmp_path, capsys):
    dirs = []
    # SGLang's /server_info reports its release at the top ("version"), record or not.
    stock = dict(extension=[], server_info_extra={"version": "0.5.23"})
    for name, server, flags in (("stock", stock, ["--expect-extension", "off"]), ("bf16", {}, [])):
        with InjectingServer({"malformed_dsml": 0.3}, seed=1, **server) as srv:
            rc, _, err = _run(capsys, srv.url, tmp_path / name, *flags)
            assert rc == 0, err
        dirs.append(str(tmp_path / name))
    rc, out, err = run_cli(["repro", "compare", *dirs, "--fail-if-not-comparable"], capsys)
    assert rc == exit_codes.OK, err
    first = out.splitlines()[0]
    assert "extension inactive; index-K not reported (no active record)" in first
    assert "SGLang 0.5.23, parsing deepseek-recipe" in first  # the release read from the top of /server_info
    assert "not comparable as asked" not in out


def test_records_unreadable_after_the_run_say_cannot_tell_not_same_server(tmp_path, capsys):
    # /server_info reads: 0 the check before the run, 1 the run's own server_info, 2 the re-read after it.
    with InjectingServer({}, server_info_faults=[None, None, "truncated"]) as srv:
        rc, out, err = _run(capsys, srv.url, tmp_path / "run")
    assert rc == 0, err
    [row] = _summary(tmp_path / "run")["server_evidence"]
    assert "restarted" not in row
    assert row["restart_check"].startswith("cannot tell whether it restarted during the run: ")
    assert "(read after the run)" in row["restart_check"] and "cannot tell whether it restarted" in out
