"""What bf16 index-K, the read gate and integrity do on DeepSeek-V4.1, shown on SGLang 0.5.23's real classes.

V4.1 has no c4 layers: its index-K lives in the ratio-1/2 pools of the kv_source layers, built fp4 by SGLang
(``force_fp4=True``) and read by the V4.1 indexer (``layers/attention/dsv4/v41_indexer``, the two-level
candidate path included). The pool is SGLang's, built from the bundled V4.1-Flash config through its
configurator on CPU; the pending HiCache load is SGLang's real ``LayerDoneCounter`` (tests/support/gate_doubles.py).
"""

from __future__ import annotations

import inspect
import pkgutil
import re

import pytest
import torch

from sglang_dsv4_ext.config import load_config
from sglang_dsv4_ext.runtime import activation
from sglang_dsv4_ext.tools import cli
from sglang_dsv4_ext.tools.doctor.cli import coverage_notes
from sglang_dsv4_ext.tools.sglang_cpu import dsv4_model
from tests.support import gate_doubles as gd
from tests.support.dsv4_pools import sized_pool
from tests.support.releases import ONLY_WITH_0_5_23_V41

pytestmark = ONLY_WITH_0_5_23_V41

V41 = dsv4_model.load_model(bundled="v4.1-flash")
FLASH = dsv4_model.load_model()
SERVER_ARGS = dict(swa_full_tokens_ratio=0.1, _swa_full_tokens_ratio_explicitly_set=True)
SLOTS = torch.arange(4)
# SGLang's top-level index-K getters (each calls wait_layer_transfer(layer_id) first) and the sub-pool reads.
TOP_LEVEL_READ = re.compile(
    r"(\w+)\.(get_low_ratio_index_k_fp4|get_low_ratio_index_k_dequant|get_index_k_with_scale_buffer)\("
)
SUB_POOL_READ = re.compile(
    r"index_pools|_indexer_pool\(|c4_indexer_kv_pool|\.index_k_with_scale_buffer|"
    r"\.get_index_k_fp4\(|\.get_index_k_dequant\(|index_k_payload_buffer|index_k_scale_buffer"
)


def _v41_indexer_sources() -> dict[str, str]:
    import sglang.srt.layers.attention.dsv4.v41_indexer as package
    from sglang.srt.layers.attention.dsv4 import dsv41_sparse

    modules = {dsv41_sparse.__name__: inspect.getsource(dsv41_sparse)}
    for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        module = __import__(info.name, fromlist=["_"])
        modules[info.name] = inspect.getsource(module)
    return modules


def test_the_v41_indexer_reads_index_k_only_through_sglangs_top_level_getters():
    """Every V4.1 index-K read (full top-k, sparse table, the candidate sources and consumers) is a top-level
    getter of the pool: none reaches a sub-pool, whose getters do not wait (the gate makes them)."""
    sources = _v41_indexer_sources()
    reads = {name: TOP_LEVEL_READ.findall(text) for name, text in sources.items()}
    assert any(reads.values())
    assert {owner for found in reads.values() for owner, _ in found} <= {"token_to_kv_pool", "pool"}
    assert {name: SUB_POOL_READ.findall(text) for name, text in sources.items() if SUB_POOL_READ.search(text)} == {}


@pytest.fixture
def v41_pool(ext_active, gate_mode):
    gate_mode("auto")
    with sized_pool(model=V41, budget_bytes=64 << 20, **SERVER_ARGS) as (_, _, pool):
        return pool


def test_sglangs_getters_wait_for_the_kv_source_layers_load(v41_pool):
    """The stock getter waits for the reader's own layer; the kv_source layer loads no later, so it is covered."""
    waits = gd.StreamWaits.on(v41_pool)
    readers = [layer for layer in range(V41.num_hidden_layers) if V41.compress_ratios[layer] in (1, 2)]
    assert readers
    for layer in readers:
        for read in (v41_pool.get_low_ratio_index_k_fp4, v41_pool.get_low_ratio_index_k_dequant):
            waits.start_load()
            read(layer, SLOTS)
            assert waits.covered() >= v41_pool.source_layer_of(layer), (layer, read.__name__)
            waits.clear()


def test_bf16_asked_for_v41_is_noted_and_the_record_says_no_c4_pool_was_built(ext_active, monkeypatch, caplog):
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", "bf16")
    monkeypatch.setattr(activation.STATE, "config", load_config())
    monkeypatch.setattr(activation.STATE, "index_k_built", [])
    with sized_pool(model=V41, budget_bytes=64 << 20, **SERVER_ARGS):
        pass
    assert "SGLANG_DSV4_INDEX_K_DTYPE=bf16 changes nothing for this model: it has no c4 layers" in caplog.text
    fields = activation.evidence_fields(activation.STATE.config)
    assert (fields["index_k_dtype"], fields["index_k_dtype_requested"]) == (activation.NONE_BUILT, "bf16")


def test_plan_says_bf16_changes_nothing_on_v41_only(ext_active, capsys):
    assert cli.main(["plan", "--model", "v4.1-flash"]) == 0
    assert "bf16 index-K changes nothing on this model: it has no c4 layers" in capsys.readouterr().out
    assert cli.main(["plan"]) == 0
    assert "changes nothing" not in capsys.readouterr().out


def test_doctor_says_what_is_not_covered_on_v41():
    config = load_config({"SGLANG_DSV4_INDEX_K_DTYPE": "bf16", "SGLANG_DSV4_INDEX_K_INTEGRITY": "sample"})
    v41 = " | ".join(coverage_notes(config, V41))
    assert "has no c4 layers, so bf16 index-K changes nothing (SGLANG_DSV4_INDEX_K_DTYPE=bf16 is set" in v41
    assert "DeepSeek-V4.1's ratio-1/2 index-K is not checksummed" in v41
    assert "the gate makes wait for the kv_source layer" in v41
    flash = " | ".join(coverage_notes(config, FLASH))
    assert "changes nothing" not in flash and "not checksummed" not in flash
    assert "payload only" in flash
