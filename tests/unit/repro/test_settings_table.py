"""The repro settings table: flags, RunConfig and the re-run command come from one declaration."""

from __future__ import annotations

import dataclasses
import math
import os
import shlex

import pytest

from sglang_dsv4_ext.tools.cli import build_parser
from sglang_dsv4_ext.tools.repro.settings import SETTINGS, RunConfig, run_config_from_args
from sglang_dsv4_ext.tools.repro.verdict import RepetitionRule

# A value different from the default for every setting (a new setting without one fails here).
NON_DEFAULT = {
    "model": "dsv4", "sessions": 3, "rounds": 5, "answer_step": False, "concurrency": (2, 3), "seed": 7,
    "temperature": 0.25, "max_tokens": 64, "request_timeout": 12.5, "time_limit": 90.0,
    "system_prompt_chars": 111, "tool_result_chars": 222, "stream": True, "token_ids": False,
    "detokenize_url": "http://127.0.0.1:30000", "server_metrics": ("http://10.0.0.1:30000", "http://10.0.0.2:30001"),
    "serve_logs": os.path.dirname(os.path.abspath(__file__)), "expect_extension": "off",
    "expect_index_k_dtype": "bf16", "thinking": False,
    "extra_body": {"top_k": 5},
    "exact_args": False, "repetition": RepetitionRule(4, 50, 20), "api_key_env": "MY_KEY", "progress": False,
}  # fmt: skip


def test_every_setting_has_a_non_default_case():
    assert set(NON_DEFAULT) == {s.name for s in SETTINGS}
    for s in SETTINGS:
        assert NON_DEFAULT[s.name] != s.default, s.name


def test_rerun_command_reproduces_every_setting():
    cfg = RunConfig(endpoint="http://127.0.0.1:8000", out="runs/x", label="bf16", **NON_DEFAULT)
    argv = shlex.split(shlex.join(cfg.to_argv()))[1:]
    args = build_parser(argv).parse_args(argv)
    again = run_config_from_args(args, args.endpoint, args.out, args.label)
    want = dataclasses.replace(cfg, out="runs/x-rerun", progress=True)  # progress is not part of a run
    assert again == want


@pytest.mark.parametrize("name, value", [("time_limit", math.nan), ("request_timeout", math.inf),
                                         ("temperature", math.nan), ("temperature", -0.5), ("sessions", 0),
                                         ("concurrency", (4, 0)), ("extra_body", {"tools": []}),
                                         ("extra_body", {"top_p": math.nan}),  # sent to the server, not JSON
                                         ("server_metrics", ("http://10.0.0.1:30000", "http://10.0.0.1:30000")),
                                         ("detokenize_url", "http://127.0.0.1:99999"),
                                         ("detokenize_url", "localhost:1"),
                                         ("server_metrics", ("http://10.0.0.1:30000", "10.0.0.2:30000")),
                                         ("server_metrics", ()), ("serve_logs", "/no/such/serve-logs"),
                                         ("expect_extension", "maybe"), ("expect_index_k_dtype", "int8")])  # fmt: skip
def test_run_config_built_in_code_refuses_bad_values_naming_the_flag(name, value):
    flag = "--" + name.replace("_", "-")
    with pytest.raises(ValueError, match=flag):
        RunConfig(endpoint="http://127.0.0.1:8000", out="x", **{name: value})


def test_run_config_declares_exactly_the_rows_fields_with_their_defaults():
    """RunConfig spells each field (for the type checker); the rows stay the truth: same names in table order, the
    row's default (a dict default fresh for each run)."""
    import dataclasses

    fields = dataclasses.fields(RunConfig)
    assert [f.name for f in fields] == ["endpoint", "out", "label"] + [s.name for s in SETTINGS]
    a, b = RunConfig(endpoint="http://h:1/v1/chat/completions", out="o"), RunConfig(endpoint="http://h:1", out="o")
    assert [getattr(a, s.name) for s in SETTINGS] == [s.default for s in SETTINGS]
    assert a.extra_body is not b.extra_body
