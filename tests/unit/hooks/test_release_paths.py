"""SGLang 0.5.22's own hook paths, on its real classes (the rows of compat.TARGETS that differ there).

Run in the 0.5.22 run of the suite (``.ci/run``), and from the 0.5.23 run through
``tests/integration/test_release_0_5_22.py`` with a 0.5.22 interpreter; on 0.5.23 each test here is
skipped with what 0.5.23 does instead. Real: the DSV4 pools built through SGLang's configurator on
CPU, SGLang's ``PrefillBootstrapQueue`` / ``DecodePreallocQueue._init_kv_manager`` and
``_build_deepseek_v4_device_pool_group``. Stubbed: the queues are built with ``object.__new__`` and
carry only their pool (a real queue needs a scheduler); SGLang's own body then fails on the missing
scheduler, which shows our check let the call through.
"""

from __future__ import annotations

import pytest

from sglang_dsv4_ext import errors
from sglang_dsv4_ext.runtime import compat
from sglang_dsv4_ext.runtime.hooks.gate import replay
from tests.support.dsv4_pools import sized_pool
from tests.support.releases import only_on

RATIO_MODE = dict(swa_full_tokens_ratio=0.1, _swa_full_tokens_ratio_explicitly_set=True)
pytestmark = only_on(
    "0.5.22",
    "0.5.23's own paths are tested by test_bf16_storage.py (pd_kv_layout), "
    "test_external_linker.py and test_gate_prefill_replay.py",
)


@pytest.fixture(params=["bf16", "fp8"])
def pool(request, ext_active, monkeypatch):
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", request.param)
    with sized_pool(**RATIO_MODE) as (_, _, built):
        yield request.param, built


def _kv_manager_queues():
    from sglang.srt.disaggregation.decode import DecodePreallocQueue
    from sglang.srt.disaggregation.prefill import PrefillBootstrapQueue

    return PrefillBootstrapQueue, DecodePreallocQueue


@pytest.mark.parametrize("role", [0, 1], ids=["prefill", "decode"])
def test_pd_refuses_bf16_index_k_where_each_role_builds_its_kv_manager(pool, role):
    dtype, kv_pool = pool
    cls = _kv_manager_queues()[role]
    queue = object.__new__(cls)
    queue.token_to_kv_pool = kv_pool
    if dtype == "bf16":
        with pytest.raises(errors.Bf16IndexKUnsupported, match="SGLang 0.5.22 has no pd_kv_layout"):
            cls._init_kv_manager(queue)
    else:  # fp8 goes on to SGLang's own body, which needs the scheduler this stand-in lacks
        with pytest.raises(AttributeError):
            cls._init_kv_manager(queue)


def test_stock_0_5_22_lets_a_bf16_pd_role_build_its_kv_manager(pool):
    """Regression replay: unwrapped, SGLang 0.5.22 goes on to build the manager of a bf16 pool."""
    dtype, kv_pool = pool
    for cls in _kv_manager_queues():
        queue = object.__new__(cls)
        queue.token_to_kv_pool = kv_pool
        with pytest.raises(AttributeError):
            compat.unwrap_to_original(cls._init_kv_manager)(queue)


def test_external_linker_refuses_bf16_at_the_dsv4_pool_group(pool):
    from sglang.srt.mem_cache.hybrid_cache import linker_pool_assembler

    dtype, kv_pool = pool
    build = linker_pool_assembler._build_deepseek_v4_device_pool_group
    if dtype == "bf16":
        with pytest.raises(errors.Bf16IndexKUnsupported, match="--enable-unified-cache-external-linker"):
            build(kv_pool, 256)
        compat.unwrap_to_original(build)(kv_pool, 256)  # stock maps the bf16 pool for the linker
    else:
        build(kv_pool, 256)  # fp8: SGLang's own pool group, untouched


def test_the_prefill_replay_hook_waits_first_where_sglang_has_no_wait_for_layer_loads(ext_active):
    from sglang.srt.model_executor.runner.prefill_cuda_graph_runner import PrefillCudaGraphRunner

    assert not hasattr(PrefillCudaGraphRunner, "_wait_for_layer_loads")
    from sglang_dsv4_ext.runtime import activation

    (hook,) = [h for h in activation.STATE.hooks if h.target.path == compat.PREFILL_GRAPH_EXECUTE.path]
    assert hook.fn is replay.around_prefill_execute_waiting_first
    assert activation.carries_hook(PrefillCudaGraphRunner.execute, hook.fn)
