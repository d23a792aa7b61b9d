"""Breakable prefill graph answers through SGLang 0.5.23's own cuda-graph resolution, in serve and doctor.

Real code: SGLang's parser (``ServerArgs.add_cli_args``) and its ``handle_cuda_graph_config`` step run on
the arg list. Two stand-ins, both supplied by the module under test and said in its docstring: the model
config (the bundled DeepSeek-V4-Flash config.json, or another architecture name) and SGLang's
``is_cuda`` answering True (the servers run on CUDA; this box has no GPU).
"""

from __future__ import annotations

import json

import pytest

from sglang_dsv4_ext.errors import PrefillGraphArgsError
from sglang_dsv4_ext.tools.cli import main
from sglang_dsv4_ext.tools.sglang_cpu import prefill_graph
from sglang_dsv4_ext.tools.sglang_cpu.prefill_graph import resolve
from tests.support.fresh_interpreter import run_python_ok

BF16 = "dsv4-flash-8gpu-pd-4p4d-bf16-hicache"
BASE = ["--model-path", "deepseek-ai/DeepSeek-V4-Flash"]


def test_dsv4_with_sglang_defaults_is_off_by_sglangs_dsv4_rule():
    answer = resolve(BASE)
    assert answer.backend == "disabled" and not answer.breakable
    assert "DeepSeek-V4 (heavy capture-pool memory pressure)" in answer.why  # SGLang's own rule name
    assert "R3 wait-ahead fix not in play" in answer.sentence()


def test_dsv4_with_the_explicit_breakable_flag_is_on():
    answer = resolve(BASE + ["--cuda-graph-backend-prefill", "breakable"])
    assert answer.breakable and "explicitly" in answer.why
    assert "R3 wait-ahead fix in play" in answer.sentence()


def test_a_non_dsv4_architecture_gets_sglangs_generic_cuda_default():
    from sglang.srt.model_executor import cuda_graph_config

    answer = resolve(BASE, architecture="LlamaForCausalLM")
    with prefill_graph._on_cuda():  # SGLang's generic default on CUDA, read from SGLang itself
        generic = cuda_graph_config.default_prefill_backend()
    assert answer.backend == generic == "breakable"


def test_the_dsv4_rule_is_what_turns_it_off():
    """Same flags, only the architecture differs: the DSV4 answer flips."""
    assert resolve(BASE).backend != resolve(BASE, architecture="LlamaForCausalLM").backend


def test_a_flag_sglang_rejects_is_a_clear_error():
    with pytest.raises(PrefillGraphArgsError, match="unrecognized arguments: --no-such-flag"):
        resolve(BASE + ["--no-such-flag"])


def _dry_run_statements(capsys, *argv) -> dict:
    assert main(["serve", *argv, "--dry-run"]) == 0
    out = capsys.readouterr().out
    block = out.split("# prefill graph, from SGLang's own argument resolution:\n", 1)[1]
    return dict(line[2:].split(": ", 1) for line in block.splitlines() if line.startswith("# "))


def test_dry_run_states_the_prefill_graph_per_server(capsys):
    said = _dry_run_statements(capsys, "--preset", BF16)
    assert set(said) == {"prefill-0", "decode-0"}  # servers only, not the router
    assert all("breakable prefill graph off" in s and "not in play" in s for s in said.values())


def test_dry_run_follows_the_breakable_flag_on_prefill_only(capsys):
    said = _dry_run_statements(capsys, "--preset", BF16, "--prefill-args=--cuda-graph-backend-prefill breakable")
    assert "breakable prefill graph on" in said["prefill-0"] and "R3 wait-ahead fix in play" in said["prefill-0"]
    assert "breakable prefill graph off" in said["decode-0"]


@pytest.mark.slow  # a fresh interpreter that imports SGLang
def test_doctor_in_a_fresh_process_says_there_are_no_server_args():
    done = run_python_ok("-m", "sglang_dsv4_ext.tools.cli", "doctor", "--json")
    assert json.loads(done.stdout)["prefill_graph"] == "no server args in this process"


def test_dry_run_says_integrity_does_not_cover_graph_replayed_readers(capsys):
    said = _dry_run_statements(
        capsys,
        "--preset",
        BF16,
        "--index-k-integrity",
        "sample",
        "--prefill-args=--cuda-graph-backend-prefill breakable",
    )
    assert "integrity does not check readers replayed from the graph" in said["prefill-0"]
    assert "integrity" not in said["decode-0"]  # its prefill graph is off: every reader runs eagerly
