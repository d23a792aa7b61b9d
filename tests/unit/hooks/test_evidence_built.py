"""The evidence reports the index-K dtype of the pool that was built, and how many ranks are active.

Real SGLang 0.5.23 pools built on CPU through its own configurator (tests/support/dsv4_pools.py), under its
own ``--enable-deepseek-v4-fp4-indexer`` (the published server-args context sets it, as the server does). The
rank count runs in a real single-rank gloo group and SGLang's real TP group (``initialize_model_parallel``).
"""

from __future__ import annotations

import tempfile

import pytest

from sglang_dsv4_ext.runtime import activation, rank_census
from tests.support.dsv4_pools import sized_pool

RATIO_MODE = dict(swa_full_tokens_ratio=0.1, _swa_full_tokens_ratio_explicitly_set=True)


@pytest.fixture
def fresh_record(ext_active, monkeypatch):
    """This process's record as before any c4 indexer pool was built (the session built others already)."""
    monkeypatch.setattr(activation.STATE, "index_k_built", [])
    monkeypatch.setattr(activation.STATE, "launch", "4242@1764590000.00")


def test_fp8_asked_with_sglangs_fp4_flag_is_reported_as_the_fp4_pool_built(fresh_record, monkeypatch, caplog):
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", "fp8")
    monkeypatch.setattr(activation.STATE, "config", activation.load_config())
    before = activation.evidence_fields(activation.load_config())
    assert before["index_k_dtype"] == activation.NONE_BUILT and before["index_k_dtype_requested"] == "fp8"
    with sized_pool(enable_deepseek_v4_fp4_indexer=True, **RATIO_MODE) as (_, _, pool):
        assert pool.c4_indexer_kv_pool.use_fp4_indexer  # SGLang's own fp4 indexer pool
    record = activation.evidence_record()
    assert record["active"] is True
    assert record["index_k_dtype"] == "fp4" and record["index_k_dtype_requested"] == "fp8"
    assert "SGLANG_DSV4_INDEX_K_DTYPE=fp8 was requested, but SGLang built a fp4 c4 indexer pool" in caplog.text
    assert "index_k_dtype=fp4" in activation.activation_line(activation.STATE.config)


@pytest.mark.parametrize("dtype", ["fp8", "bf16"])
def test_the_record_reports_the_dtype_built_without_sglangs_flag(dtype, fresh_record, monkeypatch):
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", dtype)
    monkeypatch.setattr(activation.STATE, "config", activation.load_config())
    with sized_pool(**RATIO_MODE):
        pass
    record = activation.evidence_record()
    assert (record["index_k_dtype"], record["index_k_dtype_requested"]) == (dtype, dtype)


def test_the_gauge_moves_to_the_label_set_of_the_pool_built(fresh_record, monkeypatch):
    from prometheus_client import REGISTRY

    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", "fp8")
    monkeypatch.setattr(activation.STATE, "config", activation.load_config())
    before = activation.evidence_fields(activation.STATE.config)
    activation._export_active_gauge(activation.STATE.config)
    with sized_pool(enable_deepseek_v4_fp4_indexer=True, **RATIO_MODE):
        pass
    after = activation.evidence_fields(activation.STATE.config)
    assert after["index_k_dtype"] == "fp4" and before["index_k_dtype"] == activation.NONE_BUILT
    assert REGISTRY.get_sample_value(activation.ACTIVE_GAUGE, after) == 1.0
    assert REGISTRY.get_sample_value(activation.ACTIVE_GAUGE, before) == 0.0


@pytest.fixture
def sglang_tp_group(cpu_server_args):
    """SGLang's real TP group over a single-rank gloo world (as SGLang's model runner initialises it)."""
    import torch.distributed as dist
    from sglang.srt.distributed import parallel_state as ps

    if ps.model_parallel_is_initialized():
        pytest.skip("another test initialised SGLang's model-parallel groups in this process")
    store = tempfile.NamedTemporaryFile(prefix="census-gloo-", delete=False).name
    ps.init_distributed_environment(
        world_size=1, rank=0, distributed_init_method=f"file://{store}", local_rank=0, backend="gloo"
    )
    ps.initialize_model_parallel(backend="gloo")
    rank_census.reset_for_tests()
    yield ps.get_tp_group()
    rank_census.reset_for_tests()
    ps.destroy_model_parallel()
    if dist.is_initialized():
        dist.destroy_process_group()


def test_the_record_counts_the_active_ranks_of_sglangs_tp_group(fresh_record, sglang_tp_group, monkeypatch):
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", "fp8")
    monkeypatch.setattr(activation.STATE, "build_checked", True)
    assert "ranks" not in activation.evidence_record()  # no pool built yet: nothing was counted
    with sized_pool(**RATIO_MODE):
        pass
    assert activation.evidence_record()["ranks"] == {"active": 1, "total": 1, "group": "tp"}


def test_a_rank_that_never_took_part_is_not_counted(fresh_record, sglang_tp_group, monkeypatch):
    """A stock rank writes nothing: the count reads it as missing (here a second rank of the group, never started)."""
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", "fp8")
    with sized_pool(**RATIO_MODE):
        pass
    census = rank_census._CENSUS
    monkeypatch.setattr(census, "ranks", (*census.ranks, 1))
    assert activation.evidence_record()["ranks"] == {"active": 1, "total": 2, "group": "tp"}


def test_without_a_tp_group_the_record_has_no_rank_count(fresh_record, monkeypatch):
    from sglang.srt.distributed import parallel_state as ps

    if ps.model_parallel_is_initialized():
        pytest.skip("SGLang's model-parallel groups are initialised in this process")
    rank_census.reset_for_tests()
    with sized_pool(**RATIO_MODE):
        pass
    assert "ranks" not in activation.evidence_record()
