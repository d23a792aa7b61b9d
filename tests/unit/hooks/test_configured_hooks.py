"""``config.configured`` reaches the decisions the hooks make at pool creation and in the configurator (the real
SGLang classes, on CPU), and ``plan`` hands each dtype over that way: no SGLANG_DSV4_* variable is written.

(The enums and ``configured`` itself: tests/unit/cli/test_config_choices.py.)
"""

from __future__ import annotations

import argparse

from sglang_dsv4_ext.config import ExtConfig, GateMode, IndexKDtype, configured


def test_configured_reaches_the_pool_creation_decisions(ext_active, env_writes):
    from sglang_dsv4_ext.runtime.index_k.dtype import pool_index_k_dtype
    from tests.support.gate_doubles import build_pool

    with configured(ExtConfig(index_k_dtype=IndexKDtype.BF16, gate=GateMode.STRICT)):
        pool = build_pool()
    assert pool._dsv4_gate_mode is GateMode.STRICT  # the gate mode is read when the pool is built
    assert pool_index_k_dtype(pool.c4_indexer_kv_pool) == "bf16"  # so is the index-K dtype
    with configured(ExtConfig(gate=GateMode.OFF)):
        stock = build_pool()
    assert stock._dsv4_gate_mode is GateMode.OFF and pool_index_k_dtype(stock.c4_indexer_kv_pool) == "fp8"
    assert env_writes == []


def test_plan_hands_each_dtype_and_the_stock_fp4_budget_to_the_configurator(ext_active, env_writes):
    """bf16 is budgeted at 2 B a value (256 B at d=128), fp4 at what the pool allocates (64 + 4 scale bytes),
    and its stock estimate at SGLang's fp8 figure (128 + 4): each decided by the sizing hook inside the
    configurator, from the configuration plan hands it."""
    from sglang_dsv4_ext.tools.plan import cli as plan_cli

    parser = argparse.ArgumentParser()
    subparsers = parser.add_subparsers()
    plan_cli.add_subparser(subparsers)
    args = parser.parse_args(["plan", "--dtypes", "bf16,fp4", "--context", "8K"])
    plan = plan_cli.build_pool_plan(args)
    assert {d: r["indexer_bytes_per_token"] for d, r in plan["dtypes"].items()} == {"bf16": 256, "fp4": 68}
    assert plan["dtypes"]["fp4"]["stock_estimate"]["indexer_bytes_per_token"] == 132
    assert env_writes == []
