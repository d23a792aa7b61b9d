"""SGLang's CUDA fp4 indexer budget: the 68 B the pool allocates (default), or SGLang's stock estimate.

Against SGLang 0.5.23's real DSV4PoolConfigurator and pool on CPU (tests/support/dsv4_pools.py).
"""

from __future__ import annotations

import json
import logging
import threading

import pytest

from sglang_dsv4_ext.config import ConfigError, load_config
from sglang_dsv4_ext.runtime.hooks import pool as pool_hook
from sglang_dsv4_ext.runtime.hooks import sizing
from sglang_dsv4_ext.runtime.index_k.dtype import index_k_bytes_per_token
from sglang_dsv4_ext.tools import cli
from sglang_dsv4_ext.tools.sglang_cpu import dsv4_model
from tests.support.dsv4_pools import sized_pool

MODEL = dsv4_model.load_model()
EXACT = index_k_bytes_per_token("fp4", MODEL.index_head_dim)
STOCK = index_k_bytes_per_token("fp8", MODEL.index_head_dim)  # SGLang budgets fp4 with the fp8 formula
RATIO_MODE = dict(swa_full_tokens_ratio=0.1, _swa_full_tokens_ratio_explicitly_set=True)


@pytest.fixture
def fp4(ext_active, monkeypatch):
    monkeypatch.delenv("SGLANG_DSV4_INDEX_K_DTYPE", raising=False)
    monkeypatch.setattr(sizing, "_fp4_budget_logged", threading.Event())  # log-once per process: reset


def test_the_switch_is_validated_and_defaults_to_exact():
    assert load_config({}).fp4_budget == "exact"
    assert load_config({"SGLANG_DSV4_FP4_BUDGET": "stock"}).fp4_budget == "stock"
    assert load_config({"SGLANG_DSV4_FP4_BUDGET": ""}).fp4_budget == "exact"
    with pytest.raises(
        ConfigError, match="SGLANG_DSV4_FP4_BUDGET='sometimes' is not valid; allowed values: 'exact', 'stock'"
    ):
        load_config({"SGLANG_DSV4_FP4_BUDGET": "sometimes"})


def test_exact_budget_is_logged_once_with_both_figures(fp4, caplog):
    with caplog.at_level(logging.WARNING, logger=sizing.logger.name):
        with sized_pool(enable_deepseek_v4_fp4_indexer=True, **RATIO_MODE) as (configurator, _, pool):
            assert configurator.indexer_bytes_per_token == EXACT
            assert pool_hook.check_index_k_budget(pool).endswith("== budget")
        with sized_pool(enable_deepseek_v4_fp4_indexer=True, **RATIO_MODE):
            pass
    lines = [r.getMessage() for r in caplog.records if "fp4 index-K" in r.getMessage()]
    assert len(lines) == 1, lines
    assert f"{EXACT} B" in lines[0] and f"{STOCK} B" in lines[0] and "SGLANG_DSV4_FP4_BUDGET=stock" in lines[0]


def test_stock_switch_keeps_sglangs_estimate_and_the_pool_still_builds(fp4, monkeypatch):
    monkeypatch.setenv("SGLANG_DSV4_FP4_BUDGET", "stock")
    with sized_pool(enable_deepseek_v4_fp4_indexer=True, **RATIO_MODE) as (configurator, _, pool):
        assert configurator.indexer_bytes_per_token == STOCK
        assert "stock fp4 estimate kept" in pool_hook.check_index_k_budget(pool)
    # The same over-budget without the switch is still refused: the acceptance is the switch's alone.
    monkeypatch.setenv("SGLANG_DSV4_FP4_BUDGET", "exact")
    with pytest.raises(Exception, match="does not match the pool configurator's budget"):
        pool_hook.check_index_k_budget(pool)


def test_plan_shows_the_stock_estimate_beside_the_exact_budget(fp4, capsys):
    assert cli.main(["plan", "--json", "--dtypes", "fp8,fp4"]) == 0
    plan = json.loads(capsys.readouterr().out)
    fp4_plan, fp8_plan = plan["dtypes"]["fp4"], plan["dtypes"]["fp8"]
    assert fp4_plan["indexer_bytes_per_token"] == EXACT
    assert fp4_plan["stock_estimate"]["indexer_bytes_per_token"] == STOCK
    # The stock estimate budgets fp4 exactly as fp8 is budgeted: the same token count as fp8.
    assert fp4_plan["stock_estimate"]["full_tokens"] == fp8_plan["full_tokens"] < fp4_plan["full_tokens"]
    assert cli.main(["plan", "--dtypes", "fp4"]) == 0
    assert f"SGLang's stock estimate of {STOCK} B" in capsys.readouterr().out


def test_doctor_shows_the_fp4_budget_on_the_sizing_row(fp4):
    from sglang_dsv4_ext.runtime import compat
    from sglang_dsv4_ext.tools.doctor import cli as doctor

    rows = {row["target"]: row for row in doctor.collect_report()["targets"]}
    assert rows[compat.INDEXER_BYTES_PER_TOKEN.path]["fp4_budget"].startswith("exact: ")
