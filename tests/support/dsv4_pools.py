"""Build SGLang's real DSV4 pools at tiny sizes on CPU (through SGLang's own configurator and builder)."""

from __future__ import annotations

import contextlib

import pytest
import torch

from sglang_dsv4_ext.tools.sglang_cpu import dsv4_model

TINY_BUDGET_BYTES = 256 << 20  # fits the c128 state bias of 8 requests plus ~20K full tokens


# fp8/fp4-layout index-K readers and writers called on a bf16 pool (layer 2 is V4-Flash's first
# c4 layer). Shared by the plugin tests and the patched-source checks: both must refuse each one.
BF16_POOL_LAYOUT_MISUSES = [
    pytest.param(
        lambda p: p.set_index_k_scale_buffer(2, torch.tensor([0]), torch.zeros(1, 128), torch.zeros(1)), id="fp8-writer"
    ),
    pytest.param(lambda p: p.set_index_k_fp4(2, torch.tensor([0]), torch.zeros(1, 128)), id="fp4-writer"),
    pytest.param(
        lambda p: p.get_index_k_scale_buffer(2, torch.tensor([1]), torch.tensor([0]), 1, 1), id="fp8-nonpaged-gather"
    ),
    pytest.param(lambda p: p.get_low_ratio_index_k_fp4(2, torch.tensor([0])), id="fp4-reader"),
    pytest.param(lambda p: p.get_low_ratio_index_k_dequant(2), id="fp4-dequant"),
]


@contextlib.contextmanager
def sized_pool(
    *,
    budget_bytes: int = TINY_BUDGET_BYTES,
    start_layer: int = 0,
    end_layer: int | None = None,
    speculative: str | None = None,
    max_running_requests: int = 8,
    build: bool = True,
    model: dsv4_model.Dsv4Model | None = None,
    **server_args,
):
    """Run the real DSV4PoolConfigurator for a budget, then build the real pool from its result.

    ``model``: the architecture (default: the bundled DeepSeek-V4-Flash config).
    Yields ``(configurator, pool_config, pool)``; ``pool`` is None when ``build=False``.
    """
    model = model or dsv4_model.load_model()
    fields = dict(max_running_requests=max_running_requests, **server_args)
    if speculative:
        fields.update(
            speculative_algorithm=speculative,
            speculative_num_draft_tokens=2,
            speculative_num_steps=1,
            speculative_eagle_topk=1,
        )
    with dsv4_model.cpu_server_args(**fields):
        kvc = dsv4_model.kv_cache_configurator_stub(
            model, start_layer=start_layer, end_layer=end_layer, speculative=speculative
        )
        configurator = dsv4_model.make_configurator(kvc)
        pool_config = configurator.calculate_pool_sizes(budget_bytes, dsv4_model.PAGE_SIZE)
        pool = dsv4_model.build_pool(kvc, pool_config, max_running_requests=max_running_requests) if build else None
        yield configurator, pool_config, pool


def small_pool(compression_ratios=(0, 4, 128, 4), **pool_args):
    """A real DSV4 pool built without the configurator (``dsv4_model.small_pool``: ``tokens``, ``page_size``,
    ``device``, ``pool_class`` and more constructor arguments), every pool the tests build directly.

    The last configurator budget of this process is forgotten first: the pool's startup self-check compares
    with it, and a pool built without the configurator has none (another test may have run the configurator)."""
    from sglang_dsv4_ext.runtime.index_k import budget as index_k_budget

    index_k_budget.forget_budget()
    return dsv4_model.small_pool(compression_ratios, **pool_args)
