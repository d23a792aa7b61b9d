"""SGLang's graceful abort is a transport outcome: its partial output is kept raw and never judged.

The stand-in server (tests/support/repro_server.py, kind ``abort``) answers as SGLang's ``serving_chat.py``
does for an abort without a status code: HTTP 200, ``finish_reason: "abort"``, the partial output so far
(half the tool call's arguments). Judged, half the arguments read as ``invalid_arguments``.
"""

from __future__ import annotations

import json
import os

import pytest

from sglang_dsv4_ext.tools.repro.compare import compare_records
from sglang_dsv4_ext.tools.repro.verdict import TRANSPORT_CLASSES, Observation, classify
from tests.support.repro_cli import TINY, run_cli
from tests.support.repro_server import InjectingServer

HALF_CALL = {"name": "read_file", "arguments": '{"path": "src/a.'}


@pytest.mark.parametrize("finish", ["abort", "cancelled"])
def test_a_finish_reason_outside_stop_length_tool_calls_is_its_own_transport_class(finish):
    obs = Observation(tool_calls=[HALF_CALL], finish_reason=finish)
    verdict, detail = classify(obs, "tool", "read_file", {"path": "src/a.py"}, _tools())
    assert verdict == "aborted" and verdict in TRANSPORT_CLASSES
    assert repr(finish) in detail and "not judged" in detail
    # The model's own ends are still judged.
    assert classify(Observation(tool_calls=[HALF_CALL], finish_reason="tool_calls"), "tool", "read_file",
                    {"path": "src/a.py"}, _tools())[0] == "invalid_arguments"  # fmt: skip


def _tools():
    from sglang_dsv4_ext.tools.repro.scenario import TOOLS_BY_NAME

    return TOOLS_BY_NAME


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_aborted_requests_are_kept_raw_and_left_out_of_rates_and_pairs(stream, tmp_path, capsys):
    out = tmp_path / "run"
    flags = ["--stream"] if stream else []
    with InjectingServer({"abort": 0.5}, seed=3) as srv:
        rc, printed, err = run_cli(["repro", "run", "--endpoint", srv.url, "--out", str(out), *TINY, *flags], capsys)
    assert rc == 0, err
    with open(os.path.join(out, "requests.jsonl")) as f:
        records = [json.loads(line) for line in f]
    aborted = [r for r in records if srv.injected[r["prompt_sha256"]] == "abort"]
    assert aborted and len(aborted) < len(records)
    for r in aborted:
        assert r["verdict"] == "aborted" and r["finish_reason"] == "abort", r
        assert r["raw"]["finish_reason"] == "abort"  # the partial output is kept as it came
        assert r["reference"]["origin"] == "transport" and "reference_class" not in r["reference"]
    with open(os.path.join(out, "summary.json")) as f:
        overall = json.load(f)["overall"]
    assert overall["per_class"]["aborted"]["count"] == len(aborted)
    assert overall["corruption"] == {**overall["corruption"], "count": 0, "n": len(records) - len(aborted)}
    assert "aborted" in printed
    # An aborted request on either side takes the pair out of the comparison.
    by_key = {r["key"]: r for r in records}
    other = {k: dict(r, verdict="invalid_arguments") for k, r in by_key.items()}
    result = compare_records(by_key, other)
    assert result["excluded_transport_pairs"] == len(aborted)
    assert result["corruption"]["pairs"] == len(records) - len(aborted)
