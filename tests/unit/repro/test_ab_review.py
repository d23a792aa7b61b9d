"""An A/B never gives a confident verdict where the honest answer is "not comparable" or "cannot tell".

Each test is a way an operator (or a reviewer) can reach a comparison whose numbers do not answer "is the
corruption gone, and is bf16 worth it": one side running a mix of pools, labels swapped, one side failing in
transport far more, records unreadable after the run, a stock server restarted with the extension, a summary
whose servers list is empty, a stock-vs-extension A/B in one ``ab`` call, ``report`` asked to judge three runs.

Through the real CLI against the loopback stand-in (tests/support/repro_server.py), which answers ``/server_info``
as SGLang's ``http_server.py`` does (``internal_states``, one per DP rank, each with the scheduler's record under
``sglang_dsv4_ext``) and ends an aborted request as ``serving_chat.py`` passes SGLang's ``FINISH_ABORT`` through
(``finish_reason: "abort"`` with the partial output).
"""

from __future__ import annotations

import json
import os

import pytest

from sglang_dsv4_ext.tools import exit_codes
from tests.support.repro_cli import TINY, assert_refused, run_cli
from tests.support.repro_server import ACTIVE_BF16, InjectingServer

# The repro CLI end to end against stand-in servers: a second or two a test, so `make test-fast` leaves
# these out (the whole suite runs them).
pytestmark = pytest.mark.slow

FP8 = dict(ACTIVE_BF16, index_k_dtype="fp8")
NOT_COMPARABLE = "not comparable as asked"


def _record(labels=ACTIVE_BF16, **fields) -> dict:
    base = dict(labels, active=True, index_k_dtype_requested=labels["index_k_dtype"])
    base["ranks"] = {"active": 1, "total": 1, "group": "tp"}
    return {**base, **fields}


def _run(capsys, out, *flags, rates=None, shape=TINY, **server) -> str:
    with InjectingServer(rates or {"malformed_dsml": 0.3}, seed=1, **server) as srv:
        rc, _, err = run_cli(["repro", "run", "--endpoint", srv.url, "--out", str(out), *shape, *flags], capsys)
    assert rc == 0, err
    return str(out)


def _compare(capsys, a, b, *flags):
    return run_cli(["repro", "compare", a, b, "--fail-if-not-comparable", *flags], capsys)


def _flagged(out: str) -> list[str]:
    return [line for line in out.splitlines() if NOT_COMPARABLE in line]


def test_a_side_whose_ranks_report_two_dtypes_is_a_mix_not_a_dtype(tmp_path, capsys):
    """Two DP ranks of one server, one built fp8 and one bf16 (recorded with --expect-extension any), against bf16."""
    mixed = [_record(FP8), _record(ACTIVE_BF16)]
    a = _run(capsys, tmp_path / "a", "--expect-extension", "any", records=mixed, extension=[FP8])
    b = _run(capsys, tmp_path / "b", records=[_record()])
    rc, out, err = _compare(capsys, a, b)
    assert rc == exit_codes.NOT_COMPARABLE, (out, err)
    assert any("A: its servers or ranks report different index-K pools (bf16/fp8)" in line for line in _flagged(out))
    assert out.splitlines()[-1].startswith("NOT COMPARABLE AS ASKED")  # the verdict line is never bare


def test_one_process_that_built_pools_of_two_dtypes_is_a_mix(tmp_path, capsys):
    """A scheduler that built c4 indexer pools of two dtypes reports ``mixed:bf16,fp8`` (runtime/activation.py:
    built_index_k_dtype): that side ran a mix even though it has one record, never "bf16" or a dtype of its own."""
    mixed = _record(ACTIVE_BF16, index_k_dtype="mixed:bf16,fp8")
    a = _run(capsys, tmp_path / "a", "--expect-extension", "any", records=[mixed], extension=[FP8])
    b = _run(capsys, tmp_path / "b", records=[_record(FP8)])
    rc, out, err = _compare(capsys, a, b)
    assert rc == exit_codes.NOT_COMPARABLE, (out, err)
    assert any("A: its servers or ranks report different index-K pools (bf16/fp8)" in line for line in _flagged(out))


def test_a_side_mixing_a_stock_and_an_extension_server_is_a_mix(tmp_path, capsys):
    """Prefill with the extension (fp8), decode stock (no record): one side, two stacks, against bf16."""
    with InjectingServer({"malformed_dsml": 0.3}, seed=1, records=[_record(FP8)], extension=[FP8]) as prefill, \
            InjectingServer({}, records=[None], extension=[]) as stock_decode:  # fmt: skip
        rc, _, err = run_cli(["repro", "run", "--endpoint", prefill.url, "--out", str(tmp_path / "a"), *TINY,
                              "--expect-extension", "any", "--server-metrics",
                              f"{prefill.url},{stock_decode.url}"], capsys)  # fmt: skip
        assert rc == 0, err
    b = _run(capsys, tmp_path / "b", records=[_record()])
    rc, out, err = _compare(capsys, str(tmp_path / "a"), b)
    assert rc == exit_codes.NOT_COMPARABLE, (out, err)
    assert any("A: its servers or ranks report different index-K pools (fp8/stock)" in x for x in _flagged(out))


def test_labels_that_name_the_other_stack_are_flagged(tmp_path, capsys):
    """--label bf16+hicache on the run whose servers built fp8, and the other way round: the verdict would name
    the wrong stack as the one that corrupts more."""
    a = _run(capsys, tmp_path / "a", "--label", "bf16+hicache", records=[_record(FP8)], extension=[FP8])
    b = _run(capsys, tmp_path / "b", "--label", "fp8+hicache", records=[_record()])
    rc, out, err = _compare(capsys, a, b)
    assert rc == exit_codes.NOT_COMPARABLE, (out, err)
    flagged = " ".join(_flagged(out))
    assert "A is labelled 'bf16+hicache', but its servers report index-K fp8" in flagged
    assert "B is labelled 'fp8+hicache', but its servers report index-K bf16" in flagged
    stock = _run(capsys, tmp_path / "stock", "--label", "bf16", "--expect-extension", "off",
                 records=[None], extension=[])  # fmt: skip
    rc, out, _ = _compare(capsys, stock, b, "--allow-different-settings")
    assert "A is labelled 'bf16', but its servers report stock SGLang (no extension record)" in out
    # Labels that agree with the records are not flagged.
    right_a = _run(capsys, tmp_path / "ra", "--label", "fp8+hicache", records=[_record(FP8)], extension=[FP8])
    right_b = _run(capsys, tmp_path / "rb", "--label", "bf16+hicache", records=[_record()])
    rc, out, err = _compare(capsys, right_a, right_b)
    assert rc == exit_codes.OK and NOT_COMPARABLE not in out, (out, err)


def test_one_side_aborting_far_more_is_not_a_corruption_verdict(tmp_path, capsys):
    """B's server aborts most requests (SGLang's graceful abort): the few pairs both answered say nothing of B."""
    shape = [*TINY[:1], "4", *TINY[2:]]  # 4 sessions x 2 rounds = 16 requests
    a = _run(capsys, tmp_path / "a", rates={"malformed_dsml": 0.1}, shape=shape, records=[_record(FP8)],
             extension=[FP8])  # fmt: skip
    b = _run(capsys, tmp_path / "b", rates={"abort": 0.8}, shape=shape, records=[_record()])
    rc, out, err = _compare(capsys, a, b)
    assert rc == exit_codes.NOT_COMPARABLE, (out, err)
    assert any("B fails in transport (aborted, cut, HTTP error, timeout) far more often" in x for x in _flagged(out))


def test_records_unreadable_after_the_run_make_the_ab_not_comparable(tmp_path, capsys):
    """The read after the run failed: nothing shows the same launch served the whole run."""
    a = _run(capsys, tmp_path / "a", records=[_record(FP8)], extension=[FP8])
    # /server_info reads: 0 the check before the run, 1 the run's own server_info, 2 the re-read after it.
    b = _run(capsys, tmp_path / "b", records=[_record()], server_info_faults=[None, None, "truncated"])
    rc, out, err = _compare(capsys, a, b)
    assert rc == exit_codes.NOT_COMPARABLE, (out, err)
    assert any("B: " in x and "cannot tell whether it restarted during the run" in x for x in _flagged(out))
    assert out.index("cannot tell whether it restarted") < out.index("paired requests")


def test_a_stock_server_restarted_with_the_extension_is_a_restart(tmp_path, capsys):
    """Read before the run as stock (no record), answering with the extension's records after it."""
    out_dir = _run(capsys, tmp_path / "run", "--expect-extension", "off", records=[None], extension=[],
                   restart_at=5, restart_records=[_record()])  # fmt: skip
    with open(os.path.join(out_dir, "summary.json")) as f:
        [row] = json.load(f)["server_evidence"]
    assert row["restarted"].startswith("restarted during the run: deltas not comparable")
    assert "no launch/process record before the run" in row["restarted"]


def test_a_summary_with_an_empty_servers_list_says_nothing_shows_what_ran(tmp_path, capsys):
    a = _run(capsys, tmp_path / "a", records=[_record(FP8)], extension=[FP8])
    b = _run(capsys, tmp_path / "b", records=[_record()])
    path = os.path.join(a, "summary.json")
    with open(path) as f:
        summary = json.load(f)
    summary["servers"] = []
    with open(path, "w") as f:
        json.dump(summary, f)
    rc, out, err = _compare(capsys, a, b)
    assert rc == exit_codes.NOT_COMPARABLE, (out, err)
    assert any("A's summary records an empty list of servers" in x for x in _flagged(out))


def test_ab_checks_a_stock_baseline_against_the_extension_in_one_call(tmp_path, capsys):
    """The baseline of docs/repro.md (stock fp8 + HiCache) against the extension: each side checked for what it is."""
    with InjectingServer({}, records=[None], extension=[]) as stock, InjectingServer({}) as ext:
        rc, out, err = run_cli(["repro", "ab", "--endpoint-a", stock.url, "--endpoint-b", ext.url,
                                "--expect-extension-a", "off", "--expect-extension-b", "on",
                                "--out", str(tmp_path / "ab"), *TINY], capsys)  # fmt: skip
        assert rc == 0, err
        with open(tmp_path / "ab" / "a" / "summary.json") as f:
            assert json.load(f)["extension"]["expect"] == "off"
        # The sides swapped: the "stock" side runs the extension, refused before any request.
        rc, _, err = run_cli(["repro", "ab", "--endpoint-a", ext.url, "--endpoint-b", stock.url,
                              "--expect-extension-a", "off", "--expect-extension-b", "on",
                              "--out", str(tmp_path / "swapped"), *TINY], capsys)  # fmt: skip
        assert_refused(rc, err, "--expect-extension off (a stock baseline)", ext.url)
    assert not (tmp_path / "swapped").exists()


def test_report_refuses_to_judge_comparability_of_other_than_two_runs(tmp_path, capsys):
    runs = [_run(capsys, tmp_path / n, records=[_record(d)], extension=[d]) for n, d in
            (("a", FP8), ("b", ACTIVE_BF16), ("c", ACTIVE_BF16))]  # fmt: skip
    page = tmp_path / "page.html"
    rc, _, err = run_cli(["report", *runs, "-o", str(page), "--fail-if-not-comparable"], capsys)
    assert_refused(rc, err, "--fail-if-not-comparable", "exactly 2 runs, got 3")
    assert not page.exists()


def test_report_page_never_shows_a_bare_verdict_for_a_pair_not_comparable(tmp_path, capsys):
    a = _run(capsys, tmp_path / "a", "--label", "bf16", records=[_record(FP8)], extension=[FP8])
    b = _run(capsys, tmp_path / "b", records=[_record()])
    page = tmp_path / "page.html"
    rc, _, err = run_cli(["report", a, b, "-o", str(page), "--fail-if-not-comparable"], capsys)
    assert rc == exit_codes.NOT_COMPARABLE, err
    html = page.read_text()
    ab = html[html.index('<section class="ab">') :]
    assert "NOT COMPARABLE AS ASKED" in ab[: ab.index("</section>")]


# ----- serve/repro-incident.sh checks the dtype its label names ----------------------------------------
def _incident_script(tmp_path, env: dict, *extra: str):
    """serve/repro-incident.sh run for real, its ``sglang-dsv4`` this checkout's CLI (a shim on PATH)."""
    import subprocess
    import sys

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    shim = tmp_path / "bin" / "sglang-dsv4"
    shim.parent.mkdir(parents=True)
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m sglang_dsv4_ext.tools.cli "$@"\n')
    shim.chmod(0o755)
    full_env = dict(os.environ, PATH=f"{shim.parent}:{os.environ['PATH']}", PYTHONPATH=repo, **env)
    script = os.path.join(repo, "serve", "repro-incident.sh")
    return subprocess.run(["bash", script, *TINY, *extra], env=full_env, capture_output=True, text=True, timeout=120)


@pytest.mark.slow  # the incident script runs the command in fresh interpreters
def test_incident_script_refuses_a_stack_that_did_not_build_the_dtype_its_label_names(tmp_path):
    with InjectingServer({}, records=[_record()]) as bf16_stack:  # the "fp8 baseline" built bf16
        done = _incident_script(
            tmp_path, {"ENDPOINT": bf16_stack.url, "LABEL": "fp8+hicache", "OUT": str(tmp_path / "run")}
        )
        assert done.returncode == exit_codes.USAGE, done.stdout + done.stderr
        assert "--expect-index-k-dtype fp8" in done.stderr and "index-K bf16 built" in done.stderr
        assert "Traceback" not in done.stderr and bf16_stack.requests == 0
    assert not (tmp_path / "run").exists()
    with InjectingServer({}, records=[_record(FP8)], extension=[FP8]) as ext_stack:  # the "stock" baseline is not
        done = _incident_script(
            tmp_path / "stock", {"ENDPOINT": ext_stack.url, "LABEL": "stock-fp8", "OUT": str(tmp_path / "stock-run")}
        )
        assert done.returncode == exit_codes.USAGE and "--expect-extension off (a stock baseline)" in done.stderr
    assert not (tmp_path / "stock-run").exists()


# ----- a non-streamed reply whose choice did not finish ----------------------------------------------
def test_a_non_streamed_reply_without_a_finish_reason_is_not_judged():
    """SGLang's ``serving_chat.py`` answers ``finish_reason: null`` for a request with no finish reason in its
    meta info (``finish_reason["type"] if finish_reason else None``): half a tool call was judged as corruption."""
    from sglang_dsv4_ext.tools.repro.client import observation_from_body
    from sglang_dsv4_ext.tools.repro.verdict import CORRUPTION_CLASSES, classify

    half_call = {"name": "read_file", "arguments": '{"path": "/src/ma'}
    body = {"choices": [{"index": 0, "finish_reason": None, "message": {"role": "assistant", "content": "",
            "tool_calls": [{"id": "c0", "type": "function", "function": half_call}]}}]}  # fmt: skip
    obs = observation_from_body(body)
    tools = {"read_file": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}
    verdict, detail = classify(obs, "tool", "read_file", {"path": "/src/main.py"}, tools)
    assert verdict == "aborted" and verdict not in CORRUPTION_CLASSES, (verdict, detail)
    assert "finish_reason null" in detail and obs.tool_calls == [half_call]  # kept raw


def test_a_stock_server_restarted_stock_is_a_restart_by_its_startup_durations(tmp_path, capsys):
    """No records before or after, counters from zero and higher again by the end: only SGLang's startup_time
    in /server_info (another launch's startup durations) shows that another launch answered after the run."""
    out_dir = _run(capsys, tmp_path / "run", "--expect-extension", "off", records=[None], extension=[],
                   restart_at=2)  # fmt: skip
    with open(os.path.join(out_dir, "summary.json")) as f:
        summary = json.load(f)
    [row] = summary["server_evidence"]
    assert "startup_time changed" in row["restarted"] and row["aborted_requests"] is None
    [server] = summary["servers"]
    assert server["restarted"] == row["restarted"]


def test_not_comparable_wins_over_significant_when_both_are_asked(tmp_path, capsys):
    """Both stacks built bf16 and B corrupts far more: --fail-if-not-comparable exits 4 before
    --fail-if-significant's 3 (the finding would not be about dtypes), and the verdict line says so either way."""
    shape = [*TINY[:1], "4", *TINY[2:]]  # 16 requests
    a = _run(capsys, tmp_path / "a", rates={"ok": 1.0}, shape=shape, records=[_record()])
    b = _run(capsys, tmp_path / "b", rates={"malformed_dsml": 0.9}, shape=shape, records=[_record()])
    rc, out, _ = _compare(capsys, a, b, "--fail-if-significant")
    assert rc == exit_codes.NOT_COMPARABLE
    last = out.splitlines()[-1]
    assert last.startswith("NOT COMPARABLE AS ASKED") and "SIGNIFICANT: significant difference" in last
    rc, _, _ = run_cli(["repro", "compare", a, b, "--fail-if-significant"], capsys)
    assert rc == exit_codes.FINDING  # asked only about significance: the top of the output flags it


def test_a_side_recorded_with_fewer_active_ranks_than_ranks_is_a_mix(tmp_path, capsys):
    """--expect-extension any lets a server run whose record counts 3 of 4 ranks active; its A/B is not bf16's."""
    short = _record(ranks={"active": 3, "total": 4, "group": "tp"})
    a = _run(capsys, tmp_path / "a", records=[_record(FP8)], extension=[FP8])
    b = _run(capsys, tmp_path / "b", "--expect-extension", "any", records=[short])
    rc, out, err = _compare(capsys, a, b)
    assert rc == exit_codes.NOT_COMPARABLE, (out, err)
    assert any("active on 3 of 4 ranks: the ranks without the extension built stock pools" in x for x in _flagged(out))
