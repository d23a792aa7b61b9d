"""The pool area's behaviour that mutmut's mutants showed untested (docs/mutation-testing.md).

runtime/hooks/pool.py, sizing.py, pd.py, hicache.py and runtime/index_k/dtype.py, pool_lifecycle.py, on SGLang's
real DSV4 pools built on CPU (small ones through ``dsv4_model.small_pool``, full ones through SGLang's configurator):
which SGLang functions each area hooks and how, the draft worker's sizing self-check, the ratio-1/2 budget
mismatches, the self-check's report and log, the bf16 writer's checks, what the bf16 sub-pool is built with, the
V4.1 note, the PD refusal of SGLang 0.5.22, HiCache's NPU, tag and linker paths, and the fp4 budget logs.

Stand-ins, each where SGLang's own cannot run here: the body of ``build_deepseek_v4_hicache_stack`` (it needs a gloo
group and CUDA streams), the linker factory behind ``create_unified_cache_linker`` (mooncake and mori stores), an
anchor class carrying a format tag of its own (SGLang's tagged host pools are not DSV4 anchors), and the NPU flag on
a real indexer sub-pool (the NPU pool builds only on Ascend).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import threading
from fractions import Fraction

import pytest
import torch

from sglang_dsv4_ext import errors
from sglang_dsv4_ext.runtime import compat
from sglang_dsv4_ext.runtime.hooks import HookContext, hicache, pd, sizing
from sglang_dsv4_ext.runtime.hooks import pool as pool_hook
from sglang_dsv4_ext.runtime.index_k import budget as index_k_budget
from sglang_dsv4_ext.runtime.index_k import dtype as index_k
from sglang_dsv4_ext.runtime.index_k import pool_lifecycle
from sglang_dsv4_ext.tools.sglang_cpu import dsv4_model
from tests.support.dsv4_pools import sized_pool, small_pool
from tests.support.releases import ONLY_WITH_0_5_23_V41

RATIO_MODE = dict(swa_full_tokens_ratio=0.1, _swa_full_tokens_ratio_explicitly_set=True)
C4_LAYERS = (0, 4, 128, 4)  # two c4 layers
LOW_KV_SOURCES = (1, 3)
FP8, FP4, BF16 = (index_k.index_k_bytes_per_token(d, 128) for d in ("fp8", "fp4", "bf16"))


# ----- which SGLang functions each area hooks, and how -----
class _Process:
    """The process record a hook module is handed (activation in a server); only its identity is read here."""


def _expected_hooks(process):
    return {
        sizing: [
            (compat.INDEXER_BYTES_PER_TOKEN, "around", sizing._around_indexer_bytes_per_token, ()),
            (compat.CONFIGURATOR_INIT, "after", sizing._after_configurator_init, ()),
        ],
        pool_hook: [
            (compat.MAKE_INDEXER_POOL, "around", pool_hook._around_make_indexer_pool, (process,)),
            (compat.POOL_INIT, "around", pool_hook._around_pool_init, (process,)),
        ],
        pd: [
            (compat.PD_KV_LAYOUT, "after", pd._after_pd_kv_layout, ()),
            (compat.PD_PREFILL_KV_MANAGER, "before", pd._before_init_kv_manager, ()),
            (compat.PD_DECODE_KV_MANAGER, "before", pd._before_init_kv_manager, ()),
        ],
        hicache: [
            (compat.HICACHE_INDEXER_REGIONS, "after", hicache._after_indexer_regions, ()),
            (compat.HICACHE_BUILD_STACK, "around", hicache._around_build_stack, ()),
            (compat.LOGICAL_HOST_POOL_INIT, "after", hicache._after_logical_host_pool_init, ()),
            (compat.EXTERNAL_LINKER_CREATE, "around", hicache._around_create_external_linker, ()),
            (compat.EXTERNAL_LINKER_DSV4_POOL_GROUP, "around", hicache._around_dsv4_linker_pool_group, ()),
        ],
    }


def _function_and_bound(fn):
    return (fn.func, fn.args) if isinstance(fn, functools.partial) else (fn, ())


# HookRegistry calls an around hook with the original first, an after hook with the result, a before hook with the
# call's own arguments: a hook of the wrong kind would be handed the wrong values.
_FIRST_PARAMETER = {"around": "original", "after": "result", "before": "self"}


@pytest.mark.parametrize("module", [sizing, pool_hook, pd, hicache], ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_each_area_hooks_its_sglang_functions_with_the_kind_its_function_is_written_for(module):
    process = _Process()
    hooks = module.hooks(HookContext(process=process))
    got = [(h.target, h.kind, *_function_and_bound(h.fn)) for h in hooks]
    assert got == _expected_hooks(process)[module]
    for hook in hooks:
        assert hook.target.area == module.__name__.rsplit(".", 1)[1]
        fn, bound = _function_and_bound(hook.fn)
        first = list(inspect.signature(fn).parameters)[len(bound)]
        assert first == _FIRST_PARAMETER[hook.kind], (hook.target.path, hook.kind, first)


# ----- the draft worker's sizing self-check -----
def _budget(**fields) -> index_k_budget.IndexKBudget:
    values = dict(indexer_bytes_per_token=FP8, c4_index_layers=21, spec_inflation=1.0)
    return index_k_budget.IndexKBudget(**{**values, **fields})


@pytest.fixture
def recorded_budget():
    """Record a budget for one test and forget it after (other tests build pools without the configurator)."""

    def record(budget: index_k_budget.IndexKBudget) -> None:
        index_k_budget.record(budget)

    yield record
    index_k_budget.forget_budget()


def _pool_built_after(budget_of, ratios=C4_LAYERS, **pool_args):
    """A small real pool built with the budget of a larger model in force (as a draft worker's is)."""
    budget_of(_budget())
    return dsv4_model.small_pool(ratios, **pool_args)


def test_a_draft_workers_pool_is_checked_per_layer_against_the_targets_budget(
    ext_active, index_k_dtype, recorded_budget, caplog
):
    """The target budgeted 21 c4 layers; the draft pool has 2. Per layer they agree (132 B / 4), in total not."""
    index_k_dtype("fp8")
    with caplog.at_level(logging.INFO, logger=pool_hook.logger.name):
        pool = _pool_built_after(recorded_budget, is_draft_worker=True)
    lines = [r.getMessage() for r in caplog.records if r.name == pool_hook.logger.name]
    assert f"index-K sizing self-check: draft: {FP8 / 4:.2f} B per full token per layer" in lines
    assert (
        pool_hook.check_index_k_budget(pool, is_draft_worker=True) == f"draft: {FP8 / 4:.2f} B per full token per layer"
    )
    with pytest.raises(errors.IndexKSizingError, match=r"allocated 66\.00 B per full token \(2 c4 layers\)"):
        pool_hook.check_index_k_budget(pool)  # the same pool checked as a target's


def test_the_draft_flag_is_read_from_positional_arguments_too(ext_active, index_k_dtype, recorded_budget, monkeypatch):
    """SGLang may pass the pool's arguments by position; the hook binds them to the signature (computed afresh
    here: it is cached once per process)."""
    from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4TokenToKVPool

    index_k_dtype("fp8")
    monkeypatch.setattr(pool_hook, "_POOL_INIT_SIGNATURE", None)
    recorded_budget(_budget())
    keywords = dict(
        max_num_reqs=4, swa_size=4096, c4_size=1024, c128_size=32, c4_state_pool_size=8, c128_state_pool_size=8,
        page_size=256, swa_page_size=256, dtype=torch.float8_e4m3fn, c4_state_dtype=torch.float32,
        c128_state_dtype=torch.float32, qk_nope_head_dim=448, qk_rope_head_dim=64, indexer_head_dim=128,
        layer_num=4, device="cpu", enable_memory_saver=False, compression_ratios=list(C4_LAYERS), full_size=4096,
        is_draft_worker=True,
    )  # fmt: skip
    stock_init = compat.unwrap_to_original(DeepSeekV4TokenToKVPool.__init__)
    positional = []
    for name in list(inspect.signature(stock_init).parameters)[1:]:
        if name not in keywords:
            break
        positional.append(keywords.pop(name))
    pool = DeepSeekV4TokenToKVPool(*positional, **keywords)  # a target's check would refuse 2 c4 layers
    assert len(pool.index_pools[4].contiguous_page_row_buffers()) == 2


def test_a_draft_worker_without_c4_layers_is_reported_as_such(ext_active, index_k_dtype, recorded_budget):
    index_k_dtype("fp8")
    pool = _pool_built_after(recorded_budget, ratios=(0, 128), is_draft_worker=True)
    assert pool_hook.check_index_k_budget(pool, is_draft_worker=True) == "draft worker without a c4 index-K pool"


def test_a_draft_workers_pool_wider_than_budgeted_is_refused_with_both_figures(
    ext_active, index_k_dtype, recorded_budget
):
    index_k_dtype("bf16")
    bf16_pool = small_pool()  # built without a budget: its check is skipped
    recorded_budget(_budget())
    with pytest.raises(
        errors.IndexKSizingError,
        match=rf"\(draft worker\): allocated {BF16 / 4:.2f} B per full token per layer, budgeted {FP8 / 4:.2f} B",
    ):
        pool_hook.check_index_k_budget(bf16_pool, is_draft_worker=True)


@pytest.mark.parametrize("budget", ["stock", "exact"])
def test_a_draft_worker_keeps_the_stock_fp4_estimate_only_under_the_switch(
    ext_active, index_k_dtype, recorded_budget, monkeypatch, budget
):
    """fp4 allocates 68 B where SGLang's stock estimate budgets 132 B: kept under ``=stock``, refused otherwise."""
    index_k_dtype("fp4")
    monkeypatch.setenv("SGLANG_DSV4_FP4_BUDGET", budget)
    with dsv4_model.cpu_server_args(enable_deepseek_v4_fp4_indexer=True):
        fp4_pool = small_pool()  # built without a budget: its check is skipped
    recorded_budget(_budget(c4_index_layers=2))
    if budget == "stock":
        assert pool_hook.check_index_k_budget(fp4_pool, is_draft_worker=True) == (
            "draft: stock fp4 estimate kept (SGLANG_DSV4_FP4_BUDGET=stock)"
        )
    else:
        with pytest.raises(errors.IndexKSizingError, match=r"\(draft worker\): allocated 17\.00 B"):
            pool_hook.check_index_k_budget(fp4_pool, is_draft_worker=True)


def test_the_stock_fp4_estimate_is_not_claimed_where_the_budget_is_met(ext_active, index_k_dtype, monkeypatch):
    """An exact fp4 budget checked while ``=stock`` is set: the report says the budget is met, not kept."""
    index_k_dtype("fp4")
    with sized_pool(enable_deepseek_v4_fp4_indexer=True, **RATIO_MODE) as (_, _, pool):
        monkeypatch.setenv("SGLANG_DSV4_FP4_BUDGET", "stock")
        assert pool_hook.check_index_k_budget(pool).endswith("(21 c4 layers) == budget")


# ----- the target's report and the skipped check -----
def test_the_report_counts_the_c4_layers_and_is_logged_at_pool_creation(ext_active, index_k_dtype, caplog):
    index_k_dtype("bf16")
    with caplog.at_level(logging.INFO, logger=pool_hook.logger.name):
        with sized_pool(**RATIO_MODE) as (_, _, pool):
            report = pool_hook.check_index_k_budget(pool)
    assert report == f"{21 * BF16 / 4:.2f} B per full token (21 c4 layers) == budget"
    assert f"index-K sizing self-check: {report}" in [r.getMessage() for r in caplog.records]


def test_without_a_configurator_the_check_is_skipped_and_says_so(ext_active, index_k_dtype, caplog):
    index_k_dtype("fp8")
    with caplog.at_level(logging.INFO, logger=pool_hook.logger.name):
        pool = small_pool()
    assert pool_hook.check_index_k_budget(pool) is None
    assert any("self-check skipped" in r.getMessage() for r in caplog.records)


# ----- the ratio-1/2 index-K pools against the budget -----
@ONLY_WITH_0_5_23_V41
def test_low_ratio_pools_without_a_low_ratio_budget_are_refused_and_the_reverse(
    ext_active, index_k_dtype, recorded_budget
):
    index_k_dtype("fp8")
    v41 = dsv4_model.load_model(bundled="v4.1-flash")
    with sized_pool(model=v41, budget_bytes=64 << 20, **RATIO_MODE) as (_, _, low_ratio_pool):
        budget = index_k_budget.last_budget()
    recorded_budget(dataclasses.replace(budget, low_ratio_index_layers=()))
    with pytest.raises(
        errors.IndexKSizingError, match=r"allocated r1: 1 x 68 B per slot, r2: 3 x 68 B per slot; budgeted none"
    ):
        pool_hook.check_index_k_budget(low_ratio_pool)
    # A model without ratio-1/2 layers checked against a budget that has them.
    with sized_pool(**RATIO_MODE) as (_, _, flash_pool):
        flash_budget = index_k_budget.last_budget()
    recorded_budget(dataclasses.replace(flash_budget, low_ratio_index_layers=((2, 3),), low_ratio_index_bytes=FP4))
    with pytest.raises(errors.IndexKSizingError, match=r"allocated none; budgeted r2: 3 x 68 B per slot"):
        pool_hook.check_index_k_budget(flash_pool)


@ONLY_WITH_0_5_23_V41
def test_a_pool_without_c4_layers_never_passes_as_the_stock_fp4_estimate(
    ext_active, index_k_dtype, recorded_budget, monkeypatch
):
    """A budget with c4 layers for a pool without any: refused, even under ``=stock`` (which concerns a c4 pool)."""
    index_k_dtype("fp8")
    monkeypatch.setenv("SGLANG_DSV4_FP4_BUDGET", "stock")
    v41 = dsv4_model.load_model(bundled="v4.1-flash")
    with sized_pool(model=v41, budget_bytes=64 << 20, **RATIO_MODE) as (_, _, pool):
        budget = index_k_budget.last_budget()
    recorded_budget(dataclasses.replace(budget, c4_index_layers=21))
    with pytest.raises(errors.IndexKSizingError, match=r"allocated 0\.00 B per full token \(0 c4 layers\)"):
        pool_hook.check_index_k_budget(pool)


# ----- the V4.1 note -----
def _bf16_note(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "changes nothing for this model" in r.getMessage()]


@pytest.mark.parametrize(
    ("dtype", "ratios", "noted"),
    [
        pytest.param("bf16", "low", True, marks=ONLY_WITH_0_5_23_V41),
        pytest.param("fp8", "low", False, marks=ONLY_WITH_0_5_23_V41),
        ("bf16", "c4", False),
    ],
)
def test_bf16_for_a_model_without_c4_layers_is_noted_naming_the_variable_and_the_dtype_reported(
    ext_active, index_k_dtype, caplog, dtype, ratios, noted
):
    index_k_dtype(dtype)
    with caplog.at_level(logging.WARNING, logger=pool_hook.logger.name):
        if ratios == "low":
            small_pool((0, 2, 2, 2, 128, 2), kv_source_layers=LOW_KV_SOURCES)
        else:
            small_pool()
    lines = _bf16_note(caplog)
    if not noted:
        assert lines == []
        return
    (line,) = lines
    assert "SGLANG_DSV4_INDEX_K_DTYPE=bf16" in line and line.endswith("index_k_dtype=none-built")


# ----- the bf16 sub-pool and its writer -----
def test_the_bf16_sub_pool_is_built_like_sglangs_own(ext_active, index_k_dtype, monkeypatch):
    """One class, made once, a DeepSeekV4IndexerPool named as such; built with the pool's dtype and device and
    not SGLang's fp4 indexer (SGLang's indexer paths read ``use_fp4_indexer``)."""
    from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4IndexerPool

    index_k_dtype("bf16")
    monkeypatch.setattr(pool_hook, "_BF16_POOL_CLASS", None)
    first, second = small_pool(), small_pool()
    sub = first.c4_indexer_kv_pool
    assert type(sub) is type(second.c4_indexer_kv_pool) is pool_hook._bf16_pool_class()
    assert type(sub).__name__ == "DeepSeekV4Bf16IndexerPool" and isinstance(sub, DeepSeekV4IndexerPool)
    assert "bf16" in type(sub).__doc__
    assert sub.use_fp4_indexer is False and sub.dtype == first.dtype and sub.device == first.device
    index_k_dtype("fp8")
    fp8_sub = small_pool().c4_indexer_kv_pool
    assert fp8_sub.dtype == first.dtype and fp8_sub.device == first.device


@pytest.fixture
def bf16_small_pool(ext_active, index_k_dtype):
    index_k_dtype("bf16")
    return small_pool()


def test_the_bf16_pages_of_a_layer_hold_what_was_written_there(bf16_small_pool):
    sub = bf16_small_pool.c4_indexer_kv_pool
    rows = torch.randn(3, 128)  # float32: stored as their bf16 rounding
    slots = torch.tensor([1, 64, 130], dtype=torch.int32)
    sub.set_index_fused(1, slots, rows)
    pages = sub.index_k_bf16_pages(1)
    assert tuple(pages.shape) == (sub.index_k_with_scale_buffer[1].shape[0], 64, 128) and pages.dtype == torch.bfloat16
    for row, slot in zip(rows, slots.tolist()):
        assert torch.equal(pages[slot // 64, slot % 64], row.to(torch.bfloat16))
    assert not sub.index_k_bf16_pages(0).any()  # the other c4 layer is untouched


@pytest.mark.parametrize(
    ("rows", "slots", "message"),
    [
        (torch.zeros(128), torch.tensor([0]), r"index-K rows must be \[N, 128\], got \(128,\)"),
        (torch.zeros(2, 64), torch.tensor([0, 1]), r"index-K rows must be \[N, 128\], got \(2, 64\)"),
        (torch.zeros(2, 128), torch.tensor([0, 1, 2]), r"3 slots for 2 index-K rows"),
    ],
)
def test_the_bf16_writer_refuses_rows_of_another_shape_naming_both(bf16_small_pool, rows, slots, message):
    with pytest.raises(ValueError, match=message):
        bf16_small_pool.c4_indexer_kv_pool.set_index_fused(0, slots, rows)


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda p: p.set_index_k_scale_buffer(0, torch.tensor([0]), torch.zeros(1, 128), torch.zeros(1)), "set_index_k_scale_buffer"),  # noqa: E501
        (lambda p: p.set_index_fp4(0, torch.tensor([0]), torch.zeros(1, 128)), "set_index_fp4"),
        (lambda p: p.get_index_k_scale_buffer(0, torch.tensor([1]), torch.tensor([0]), 1, 1), "get_index_k_scale_buffer"),  # noqa: E501
        (lambda p: p.get_index_k_fp4(0, torch.tensor([0])), "get_index_k_fp4"),
        (lambda p: p.get_index_k_dequant(0), "get_index_k_dequant"),
    ],
)  # fmt: skip
def test_an_fp8_or_fp4_layout_call_on_the_bf16_pool_names_itself_and_the_bytes(bf16_small_pool, call, named):
    with pytest.raises(errors.DSV4IndexKLayoutError) as excinfo:
        call(bf16_small_pool.c4_indexer_kv_pool)
    assert str(excinfo.value).startswith(f"{named} (") and f"{BF16} B per token" in str(excinfo.value)


# ----- pool lifecycle -----
def test_a_subscriber_is_handed_every_pool_built_and_subscribing_again_replaces_it(ext_active, monkeypatch):
    monkeypatch.setattr(pool_lifecycle, "_POOL_CREATED", dict(pool_lifecycle._POOL_CREATED))
    seen, replaced = [], []
    pool_lifecycle.subscribe_pool_created("test", replaced.append)
    pool_lifecycle.subscribe_pool_created("test", seen.append)
    pool = small_pool()
    assert seen == [pool] and replaced == []


# ----- index-K bytes per token -----
@pytest.mark.parametrize("head_dim", [64, 96, 128, 256])
def test_fp8_and_fp4_bytes_per_token_are_sglangs_own_whole_numbers(ext_active, head_dim):
    import sglang.srt.mem_cache.deepseek_v4_memory_pool as mp

    stock = compat.unwrap_to_original(mp.get_dsv4_indexer_bytes_per_token)
    for dtype, fp4 in (("fp8", False), ("fp4", True)):
        got = index_k.index_k_bytes_per_token(dtype, head_dim)
        assert type(got) is int and got == stock(head_dim, fp4)
    assert index_k.index_k_bytes_per_token("bf16", head_dim) == 2 * head_dim


def test_an_unknown_dtype_is_refused_naming_it_and_the_allowed_ones():
    with pytest.raises(ValueError, match=r"index-K dtype 'int8' is not one of 'fp8', 'bf16', 'fp4'"):
        index_k.index_k_bytes_per_token("int8", 128)


# ----- PD on SGLang 0.5.22: the refusal at each role's KV manager (called here on 0.5.23's classes) -----
def _queue(role: str, kv_pool):
    from sglang.srt.disaggregation.decode import DecodePreallocQueue
    from sglang.srt.disaggregation.prefill import PrefillBootstrapQueue

    queue = object.__new__(PrefillBootstrapQueue if role == "prefill" else DecodePreallocQueue)
    if kv_pool is not None:
        queue.token_to_kv_pool = kv_pool  # a real queue needs a scheduler; the hook reads only its pool
    return queue


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_the_0_5_22_kv_manager_hook_refuses_bf16_naming_the_role_and_lets_others_through(
    ext_active, index_k_dtype, role
):
    index_k_dtype("bf16")
    with pytest.raises(errors.Bf16IndexKUnsupported) as excinfo:
        pd._before_init_kv_manager(_queue(role, small_pool()))
    cls = "PrefillBootstrapQueue" if role == "prefill" else "DecodePreallocQueue"
    assert "SGLang 0.5.22 has no pd_kv_layout" in str(excinfo.value) and f"({cls})" in str(excinfo.value)
    index_k_dtype("fp8")
    assert pd._before_init_kv_manager(_queue(role, small_pool())) is None
    assert pd._before_init_kv_manager(_queue(role, None)) is None


def test_a_layout_that_already_carries_the_tag_is_kept(bf16_small_pool):
    tagged = "v4,c4:v4,c128:v4,c4idx:bf16"
    assert pd._after_pd_kv_layout(tagged, bf16_small_pool) is None  # HookRegistry keeps SGLang's string


# ----- HiCache -----
def test_npu_index_k_regions_are_left_as_sglang_returns_them(bf16_small_pool, monkeypatch):
    from sglang.srt.mem_cache.hybrid_cache import hybrid_pool_assembler as asm

    stock = asm._dsv4_indexer_regions.__wrapped__(bf16_small_pool, 256)
    assert hicache._after_indexer_regions(stock, bf16_small_pool, 256) is not None
    monkeypatch.setattr(bf16_small_pool.c4_indexer_kv_pool, "has_npu_storage", True, raising=False)
    assert hicache._after_indexer_regions(stock, bf16_small_pool, 256) is None


def test_the_stack_build_is_handed_its_arguments_and_a_build_without_a_kvcache_is_untagged(bf16_small_pool):
    from sglang.srt.mem_cache.memory_pool_host import LogicalHostPool

    calls = []

    def body(*args, **kwargs):
        calls.append((args, kwargs))
        return LogicalHostPool(4 * 256, 256, layout="layer_first")

    anchor = hicache._around_build_stack(body, "positional", kvcache=bf16_small_pool, params=None)
    assert calls == [(("positional",), {"kvcache": bf16_small_pool, "params": None})]
    assert anchor.storage_format_tag == hicache.L3_FORMAT_TAG
    assert hicache._around_build_stack(body, params=None).storage_format_tag is None


def test_an_anchor_with_a_format_tag_of_its_own_keeps_it_before_the_dtype_tag(bf16_small_pool):
    from sglang.srt.mem_cache.memory_pool_host import LogicalHostPool

    class TaggedAnchor(LogicalHostPool):
        storage_format_tag = "token-major"

    class AlreadyTagged(LogicalHostPool):
        storage_format_tag = f"token-major-{hicache.L3_FORMAT_TAG}"

    def build(cls):
        return hicache._around_build_stack(lambda **_: cls(4 * 256, 256, layout="layer_first"), kvcache=bf16_small_pool)

    assert build(TaggedAnchor).storage_format_tag == f"token-major-{hicache.L3_FORMAT_TAG}"
    assert build(AlreadyTagged).storage_format_tag == f"token-major-{hicache.L3_FORMAT_TAG}"


def _linker_params(kv_pool):
    from types import SimpleNamespace

    return SimpleNamespace(token_to_kv_pool_allocator=SimpleNamespace(get_kvcache=lambda: kv_pool))


def test_the_linker_factory_is_handed_its_arguments_unchanged_and_a_refusal_names_the_backend(
    ext_active, index_k_dtype
):
    index_k_dtype("fp8")
    fp8_pool, calls = small_pool(), []
    params = _linker_params(fp8_pool)

    def factory(*args, **kwargs):
        calls.append((args, kwargs))
        return "linker"

    arguments = dict(backend="mooncake", config="config", components={"c"}, forward_stream="stream")
    assert hicache._around_create_external_linker(factory, "server_args", params, **arguments) == "linker"
    assert calls == [(("server_args", params), arguments)]
    index_k_dtype("bf16")
    with pytest.raises(errors.Bf16IndexKUnsupported, match=r"\(backend 'mooncake'\)"):
        hicache._around_create_external_linker(factory, "server_args", _linker_params(small_pool()), **arguments)


def test_the_0_5_22_linker_pool_group_hook_refuses_bf16_and_hands_sglang_its_arguments(ext_active, index_k_dtype):
    from sglang.srt.mem_cache.hybrid_cache import linker_pool_assembler

    build, calls = linker_pool_assembler._build_deepseek_v4_device_pool_group, []

    def recording(*args, **kwargs):
        calls.append((args, kwargs))
        return build(*args, **kwargs)

    index_k_dtype("fp8")
    fp8_pool = small_pool()
    group = hicache._around_dsv4_linker_pool_group(recording, fp8_pool, 256, ())
    assert type(group) is type(build(fp8_pool, 256))
    hicache._around_dsv4_linker_pool_group(recording, fp8_pool, 256, mtp_draft_device_pools=())
    assert calls == [((fp8_pool, 256, ()), {}), ((fp8_pool, 256), {"mtp_draft_device_pools": ()})]
    index_k_dtype("bf16")
    with pytest.raises(errors.Bf16IndexKUnsupported, match=r"\(backend --unified-cache-external-linker-backend\)"):
        hicache._around_dsv4_linker_pool_group(recording, small_pool(), 256)
    assert len(calls) == 2


# ----- the fp4 budget and what the configurator recorded -----
@pytest.fixture
def fp4_log_afresh(ext_active, monkeypatch):
    monkeypatch.setattr(sizing, "_fp4_budget_logged", threading.Event())  # log-once per process: reset


def _fp4_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("fp4 index-K")]


def test_the_stock_fp4_budget_is_logged_with_both_figures_and_the_switch(
    fp4_log_afresh, index_k_dtype, monkeypatch, caplog
):
    index_k_dtype("fp4")
    monkeypatch.setenv("SGLANG_DSV4_FP4_BUDGET", "stock")
    with caplog.at_level(logging.WARNING, logger=sizing.logger.name):
        with sized_pool(enable_deepseek_v4_fp4_indexer=True, build=False, **RATIO_MODE):
            pass
    (line,) = _fp4_lines(caplog)
    assert f"stock {FP8} B per token while the pool allocates {FP4} B" in line
    assert "(SGLANG_DSV4_FP4_BUDGET=stock)" in line


def test_an_fp8_budget_says_nothing_of_fp4(fp4_log_afresh, index_k_dtype, caplog):
    index_k_dtype("fp8")
    with caplog.at_level(logging.WARNING, logger=sizing.logger.name):
        with sized_pool(build=False, **RATIO_MODE) as (configurator, _, _):
            assert configurator.indexer_bytes_per_token == FP8
    assert _fp4_lines(caplog) == []


@pytest.mark.parametrize("speculative", [None, "EAGLE"])
def test_the_recorded_budget_carries_the_speculative_inflation(ext_active, index_k_dtype, speculative):
    """With one MTP draft layer over the 43 target layers the configurator inflates by 44/43; without, by 1."""
    index_k_dtype("fp8")
    with sized_pool(build=False, speculative=speculative, **RATIO_MODE):
        recorded = index_k_budget.last_budget()
    layers = dsv4_model.load_model().num_hidden_layers
    expected = Fraction(layers + 1, layers) if speculative else Fraction(1)
    assert Fraction(recorded.spec_inflation).limit_denominator(1000) == expected


def test_a_pool_built_other_than_asked_is_logged_with_the_dtype_the_record_reports(ext_active, index_k_dtype, caplog):
    index_k_dtype("fp8")
    with caplog.at_level(logging.WARNING, logger=pool_hook.logger.name):
        with dsv4_model.cpu_server_args(enable_deepseek_v4_fp4_indexer=True):
            small_pool()
    (line,) = [r.getMessage() for r in caplog.records if "was requested, but SGLang built" in r.getMessage()]
    assert "SGLANG_DSV4_INDEX_K_DTYPE=fp8 was requested, but SGLang built a fp4 c4 indexer pool" in line
    assert line.endswith("report index_k_dtype=fp4")
