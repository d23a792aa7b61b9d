"""SGLANG_DSV4_FP8_LOGITS: the indexer hook routes SGLang's SM120 fp8 logits to kernels_sm120's fp8 kernel.

The hook under test is the real ``_around_forward_c4_indexer`` (runtime/hooks/indexer.py). The ``original`` it wraps
is a stand-in for SGLang's ``C4IndexerBackendMixin.forward_c4_indexer`` reduced to the one thing this route
touches: it looks up ``fp8_paged_mqa_logits_torch_sm120`` in SGLang's indexer module at call time (as
``forward_c4_indexer`` does: ``fn = fp8_paged_mqa_logits_torch_sm120``) and calls it with SGLang's arguments
(a full forward needs SGLang's model, pools and metadata). The logits functions are SGLang's real ones,
run on CPU tensors; our Triton kernel runs under Triton's interpreter. Which kernel ran is told from the
numbers: SGLang's torch path rounds its bf16 product to bf16 (about 2e-3 off the float64 logits), ours is
exact to 1e-6.
"""

from __future__ import annotations

import types

import pytest
import torch

from kernels_sm120 import _triton_helpers, paged_mqa_logits
from kernels_sm120 import reference as R
from sglang_dsv4_ext.config import ENV_FP8_LOGITS
from sglang_dsv4_ext.errors import ConfigError
from sglang_dsv4_ext.runtime import compat
from sglang_dsv4_ext.runtime.hooks import indexer as hook
from sglang_dsv4_ext.runtime.index_k import fp8_logits
from tests.support.triton_interpreter import interpreted_kernels


@pytest.fixture
def sg_indexer():
    from sglang.srt.layers.attention.dsv4 import indexer

    return indexer


@pytest.fixture
def interp():
    with interpreted_kernels(_triton_helpers, paged_mqa_logits):
        yield


def fp8_args(heads=16, lens=(70, 200, 1)):
    g = torch.Generator().manual_seed(5)
    rows, width = len(lens), 4
    cache = R.fp8_index_k_pages(torch.randn(rows * width * 64, 128, generator=g))
    table = torch.arange(rows * width, dtype=torch.int32).view(rows, width)
    q = (torch.randn(rows, 1, heads, 128, generator=g) * 4).to(torch.float8_e4m3fn)
    w = torch.randn(rows, heads, generator=g)
    return q, cache, w, torch.tensor(lens, dtype=torch.int32), table, width * 64


def sglang_forward_stand_in(sg_indexer, args):
    """Stands in for forward_c4_indexer: the logits function is looked up in SGLang's module per call."""

    def original(self, x, q_lora, c4_indexer, forward_batch, **kwargs):
        q, cache, w, seq, table, max_len = args
        fn = sg_indexer.fp8_paged_mqa_logits_torch_sm120
        return fn(q, cache, w, seq, table, None, max_len, clean_logits=False)

    return original


def run_hook(sg_indexer, args):
    fp8_backend = types.SimpleNamespace(token_to_kv_pool=types.SimpleNamespace(c4_indexer_kv_pool=object()))
    c4 = types.SimpleNamespace(use_fp4_indexer=False)
    return hook._around_forward_c4_indexer(sglang_forward_stand_in(sg_indexer, args), fp8_backend, None, None, c4, None)


def errors(out, args):
    q, cache, w, seq, table, max_len = args
    ref = R.fp8_paged_mqa_logits_reference(q, cache, w, seq, table, max_len)
    mask = torch.arange(max_len)[None, :] < seq.long()[:, None]
    return ((out[mask].double() - ref[mask]).norm() / ref[mask].norm()).item()


def test_triton_routes_sglangs_sm120_logits_to_ours(interp, sg_indexer, monkeypatch):
    monkeypatch.setenv(ENV_FP8_LOGITS, "triton")
    original = sg_indexer.fp8_paged_mqa_logits_torch_sm120
    args = fp8_args()
    out = run_hook(sg_indexer, args)
    assert errors(out, args) < 1e-6  # ours (SGLang's bf16 bmm is ~2e-3 off)
    assert fp8_logits.last_kernel() == fp8_logits.OURS
    assert fp8_logits.logits_kernel("fp8", "triton", "triton") == f"last call: {fp8_logits.OURS}"
    assert sg_indexer.fp8_paged_mqa_logits_torch_sm120 is original  # restored after the call


def test_sglang_keeps_sglangs_logits(sg_indexer, monkeypatch):
    monkeypatch.setenv(ENV_FP8_LOGITS, "sglang")
    args = fp8_args()
    out = run_hook(sg_indexer, args)
    assert 1e-4 < errors(out, args) < 1e-2  # SGLang's own torch path ran


def test_a_call_outside_ours_runs_sglangs_function(sg_indexer, monkeypatch):
    """12 heads: not a power of two (ours needs a tensor-core tile); SGLang's function takes it."""
    monkeypatch.setenv(ENV_FP8_LOGITS, "triton")
    args = fp8_args(heads=12)
    expected = sg_indexer.fp8_paged_mqa_logits_torch_sm120(*args[:5], None, args[5], clean_logits=False)
    out = run_hook(sg_indexer, args)
    assert torch.equal(out, expected)
    assert fp8_logits.last_kernel().startswith("SGLang's fp8_paged_mqa_logits_torch_sm120 (q heads 12")


def test_the_tilelang_function_is_routed_where_sglangs_switch_is_on(sg_indexer, monkeypatch):
    import importlib

    module_name, _, attribute = compat.TILELANG_FP8_LOGITS.rpartition(".")
    module = importlib.import_module(module_name)
    original = getattr(module, attribute)
    monkeypatch.setenv(ENV_FP8_LOGITS, "triton")
    monkeypatch.setenv(compat.TILELANG_INDEXER_SWITCH, "1")
    with hook.fp8_logits_routed(True):
        routed = getattr(module, attribute)
        assert routed is not original and routed.__wrapped__ is original
    assert getattr(module, attribute) is original
    with hook.fp8_logits_routed(False):  # the bf16 or fp4 pool: nothing routed
        assert getattr(module, attribute) is original


def test_bad_setting_names_the_variable_and_the_values(monkeypatch):
    from sglang_dsv4_ext.config import load_config

    monkeypatch.setenv(ENV_FP8_LOGITS, "tilelang")
    with pytest.raises(
        ConfigError, match="SGLANG_DSV4_FP8_LOGITS='tilelang' is not valid; allowed values: 'triton', 'sglang'"
    ):
        load_config()


def test_planned_kernel_says_what_each_configuration_runs():
    assert fp8_logits.planned_kernel("bf16", "triton", "triton") == fp8_logits.OURS_BF16
    assert fp8_logits.planned_kernel("fp4", "triton", "triton").startswith(fp8_logits.OURS_FP4)
    assert fp8_logits.planned_kernel("fp4", "triton", "sglang").startswith(fp8_logits.FP4)
    assert "SGLang's own" in fp8_logits.planned_kernel("fp8", "sglang", "triton")
    assert fp8_logits.planned_kernel("fp8", "triton", "triton").startswith(fp8_logits.OURS)


def fp8_one_row(width_pages):
    g = torch.Generator().manual_seed(9)
    cache = R.fp8_index_k_pages(torch.randn(width_pages * 64, 128, generator=g))
    table = torch.arange(width_pages, dtype=torch.int32).view(1, width_pages)
    q = (torch.randn(1, 1, 16, 128, generator=g) * 4).to(torch.float8_e4m3fn)
    w = torch.randn(1, 16, generator=g)
    return q, cache, w, torch.tensor([width_pages * 64 - 5], dtype=torch.int32), table, width_pages * 64


def tier_edges():
    """Each tier of TILELANG_FASTER at its edge (TileLang's), one page wider (ours), and one row past the last."""
    cases = []
    for rows, keys in fp8_logits.TILELANG_FASTER:
        cases += [(rows, keys, True), (rows, keys + 64, False)]
    return [*cases, (1, 64, True), (fp8_logits.TILELANG_FASTER[-1][0] + 1, 64, False)]


@pytest.mark.parametrize(("rows", "keys", "tilelang"), tier_edges())
def test_tilelang_takes_the_calls_where_it_measured_faster(rows, keys, tilelang):
    q = torch.empty(rows, 1, 64, 128, dtype=torch.float8_e4m3fn)
    table = torch.zeros(rows, keys // 64, dtype=torch.int32)
    assert (fp8_logits.tilelang_faster(fp8_logits.TILELANG, q, table) is not None) is tilelang
    assert fp8_logits.tilelang_faster("fp8_paged_mqa_logits_torch_sm120", q, table) is None


def test_the_router_hands_a_short_row_to_sglangs_tilelang_function(interp, sg_indexer):
    """At one row within the first tier of TILELANG_FASTER the router calls the function it routes (SGLang's
    TileLang kernel in serving; TileLang needs a GPU, so SGLang's torch function stands in for it under
    TileLang's name); one page past that width it runs ours."""
    sglang_fn = sg_indexer.fp8_paged_mqa_logits_torch_sm120
    routed = fp8_logits.router(fp8_logits.TILELANG, sglang_fn)
    edge_pages = fp8_logits.TILELANG_FASTER[0][1] // 64
    short = fp8_one_row(edge_pages)
    out = routed(*short[:5], None, short[5], clean_logits=False)
    assert torch.equal(out, sglang_fn(*short[:5], None, short[5], clean_logits=False))
    assert "TileLang measured within 2% of ours or faster" in fp8_logits.last_kernel()
    longer = fp8_one_row(edge_pages + 1)
    out = routed(*longer[:5], None, longer[5], clean_logits=False)
    assert errors(out, longer) < 1e-6
    assert fp8_logits.last_kernel() == fp8_logits.OURS


def test_doctor_says_which_logits_kernel_the_configuration_runs(monkeypatch):
    from sglang_dsv4_ext.config import load_config
    from sglang_dsv4_ext.tools.doctor.cli import logits_kernel_choice

    monkeypatch.setenv(ENV_FP8_LOGITS, "sglang")
    assert logits_kernel_choice(load_config()) == fp8_logits.planned_kernel("fp8", "sglang", "triton")
    monkeypatch.setenv(ENV_FP8_LOGITS, "triton")
    assert logits_kernel_choice(load_config()).startswith(fp8_logits.OURS)
    monkeypatch.setenv("SGLANG_DSV4_EXT", "0")
    assert logits_kernel_choice(load_config()) == "SGLang's own (the extension is off)"
    assert logits_kernel_choice(None).startswith("cannot tell")
