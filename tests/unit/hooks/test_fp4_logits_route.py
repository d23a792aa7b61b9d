"""SGLANG_DSV4_FP4_LOGITS: where SGLang's forward_c4_indexer would raise on the fp4 indexer, the indexer hook
routes DeepGEMM's fp4 logits to kernels_sm120's fp4 kernel.

What SGLang 0.5.23 does, read from its installed ``forward_c4_indexer``: with ``use_fp4_indexer`` on CUDA,
``if envs.SGLANG_OPT_USE_TILELANG_INDEXER.get(): raise RuntimeError("DeepSeek V4 FP4 indexer requires DeepGEMM
indexer.")``, else ``from deep_gemm import fp8_fp4_paged_mqa_logits as fn`` and
``fn((q_fp4, q_sf), cache [pages, 64, 1, 68], weights, seq_lens [R, 1], page_table, metadata, max_len, False)``.
SM120's defaults turn that switch on. The hook under test is the real ``_around_forward_c4_indexer``; the
``original`` it wraps stands in for SGLang's ``forward_c4_indexer`` reduced to exactly those lines (a full
forward needs SGLang's model, pools and metadata). The switch is SGLang's real ``envs`` field and the module is
the installed ``deep_gemm``; DeepGEMM's kernel itself needs a GPU, so where a test needs it called, a recorder
stands in for it and says so. Our Triton kernel runs under Triton's interpreter.
"""

from __future__ import annotations

import types

import pytest
import torch

from kernels_sm120 import _triton_helpers, paged_logits_fp4, paged_mqa_logits
from kernels_sm120 import reference as R
from sglang_dsv4_ext.config import ENV_FP4_LOGITS
from sglang_dsv4_ext.errors import ConfigError
from sglang_dsv4_ext.runtime import compat
from sglang_dsv4_ext.runtime.hooks import indexer as hook
from sglang_dsv4_ext.runtime.index_k import fp8_logits
from sglang_dsv4_ext.tools.recall import formats
from tests.support.triton_interpreter import interpreted_kernels

SGLANGS_ERROR = "DeepSeek V4 FP4 indexer requires DeepGEMM indexer."


@pytest.fixture
def interp():
    with interpreted_kernels(_triton_helpers, paged_mqa_logits, paged_logits_fp4):
        yield


@pytest.fixture
def envs():
    from sglang.srt.environ import envs

    return envs


@pytest.fixture
def deep_gemm():
    import deep_gemm

    return deep_gemm


@pytest.fixture
def switch_on(monkeypatch):
    """SGLang's TileLang switch as SM120's model hook sets it (``envs.SGLANG_OPT_USE_TILELANG_INDEXER.set(True)``)."""
    monkeypatch.setenv(compat.TILELANG_INDEXER_SWITCH, "True")


def fp4_args(heads=16, lens=(70, 200, 1)):
    g = torch.Generator().manual_seed(11)
    rows, width = len(lens), 4
    keys = torch.randn(rows * width * 64, 128, generator=g) * 3
    k_codes, k_exps = formats.fp4_quantize(keys)
    q_codes, q_exps = formats.fp4_quantize(torch.randn(rows, heads, 128, generator=g) * 3)
    table = torch.arange(rows * width, dtype=torch.int32).view(rows, width)
    q = R.fp4_q(q_codes, q_exps)
    w = torch.randn(rows, heads, generator=g)
    seq = torch.tensor(lens, dtype=torch.int32)
    reference = R.paged_mqa_logits_reference(
        formats.fp4_dequantize(q_codes, q_exps), formats.fp4_dequantize(k_codes, k_exps), w, seq, table, width * 64
    )
    return q, R.fp4_index_k_pages(k_codes, k_exps), w, seq, table, width * 64, reference


def sglang_forward_stand_in(args):
    """Stands in for forward_c4_indexer's fp4 lines: the switch test, then DeepGEMM's function imported per call."""
    from sglang.srt.environ import envs

    def original(self, x, q_lora, c4_indexer, forward_batch, **kwargs):
        if envs.SGLANG_OPT_USE_TILELANG_INDEXER.get():
            raise RuntimeError(SGLANGS_ERROR)
        from deep_gemm import fp8_fp4_paged_mqa_logits as fn

        q, cache, w, seq, table, max_len, _ = args
        return fn(q, cache, w, seq.unsqueeze(-1), table, None, max_len, False)

    return original


def run_hook(args):
    backend = types.SimpleNamespace(token_to_kv_pool=types.SimpleNamespace(c4_indexer_kv_pool=object()))
    c4 = types.SimpleNamespace(use_fp4_indexer=True)
    return hook._around_forward_c4_indexer(sglang_forward_stand_in(args), backend, None, None, c4, None)


def error(out, args):
    *_, seq, _, max_len, ref = args
    mask = torch.arange(max_len)[None, :] < seq.long()[:, None]
    return ((out[mask].double() - ref[mask]).norm() / ref[mask].norm()).item()


def test_where_sglang_raises_ours_computes_the_fp4_logits(interp, switch_on, envs, deep_gemm, monkeypatch):
    monkeypatch.setenv(ENV_FP4_LOGITS, "triton")
    original = deep_gemm.fp8_fp4_paged_mqa_logits
    args = fp4_args()
    out = run_hook(args)
    assert error(out, args) < 1e-6
    assert fp8_logits.last_kernel() == fp8_logits.OURS_FP4
    assert fp8_logits.logits_kernel("fp4", "triton", "triton") == f"last call: {fp8_logits.OURS_FP4}"
    assert deep_gemm.fp8_fp4_paged_mqa_logits is original  # restored after the call
    assert envs.SGLANG_OPT_USE_TILELANG_INDEXER.get() is True  # SGLang's switch as it was


def test_sglang_setting_leaves_sglangs_error(switch_on, monkeypatch):
    monkeypatch.setenv(ENV_FP4_LOGITS, "sglang")
    with pytest.raises(RuntimeError, match=SGLANGS_ERROR):
        run_hook(fp4_args())


def test_where_the_operator_turned_the_switch_off_deepgemm_runs_as_stock(monkeypatch, deep_gemm):
    """SGLANG_OPT_USE_TILELANG_INDEXER=0: stock SGLang calls DeepGEMM's kernel; nothing is routed. DeepGEMM's
    kernel needs a GPU, so a recorder stands in for it for this test (monkeypatch restores the real one)."""
    monkeypatch.setenv(ENV_FP4_LOGITS, "triton")
    monkeypatch.setenv(compat.TILELANG_INDEXER_SWITCH, "0")
    calls = []
    monkeypatch.setattr(deep_gemm, "fp8_fp4_paged_mqa_logits", lambda *a: calls.append(a) or "deepgemm's")
    assert run_hook(fp4_args()) == "deepgemm's" and len(calls) == 1


def test_a_call_outside_ours_runs_deepgemms_function(switch_on, monkeypatch, deep_gemm):
    """12 heads: not a power of two (ours needs a tensor-core tile), so DeepGEMM's function takes the call (a
    recorder stands in for it: its kernel needs a GPU)."""
    monkeypatch.setenv(ENV_FP4_LOGITS, "triton")
    calls = []
    monkeypatch.setattr(deep_gemm, "fp8_fp4_paged_mqa_logits", lambda *a, **k: calls.append(a) or "deepgemm's")
    assert run_hook(fp4_args(heads=12)) == "deepgemm's"
    assert len(calls) == 1 and len(calls[0]) == 8  # SGLang's eight arguments, passed on as given
    assert fp8_logits.last_kernel().startswith("SGLang's deep_gemm.fp8_fp4_paged_mqa_logits (q heads 12")


def test_the_fp8_pool_routes_nothing_of_deepgemm(switch_on, monkeypatch, deep_gemm):
    monkeypatch.setenv(ENV_FP4_LOGITS, "triton")
    original = deep_gemm.fp8_fp4_paged_mqa_logits
    with hook.fp4_logits_routed(True):
        assert deep_gemm.fp8_fp4_paged_mqa_logits.__wrapped__ is original
    with hook.fp4_logits_routed(False):
        assert deep_gemm.fp8_fp4_paged_mqa_logits is original


def test_the_router_keeps_deepgemms_signature(deep_gemm):
    import inspect

    names = list(inspect.signature(deep_gemm.fp8_fp4_paged_mqa_logits).parameters)
    assert list(inspect.signature(fp8_logits.fp4_router(deep_gemm.fp8_fp4_paged_mqa_logits)).parameters) == names


def test_bad_setting_names_the_variable_and_the_values(monkeypatch):
    from sglang_dsv4_ext.config import load_config

    monkeypatch.setenv(ENV_FP4_LOGITS, "deepgemm")
    with pytest.raises(
        ConfigError, match="SGLANG_DSV4_FP4_LOGITS='deepgemm' is not valid; allowed values: 'triton', 'sglang'"
    ):
        load_config()


def test_doctor_says_which_fp4_logits_kernel_the_configuration_runs(monkeypatch):
    from sglang_dsv4_ext.config import load_config
    from sglang_dsv4_ext.tools.doctor.cli import logits_kernel_choice

    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", "fp4")
    monkeypatch.setenv(ENV_FP4_LOGITS, "triton")
    assert logits_kernel_choice(load_config()).startswith(fp8_logits.OURS_FP4)
    monkeypatch.setenv(ENV_FP4_LOGITS, "sglang")
    assert logits_kernel_choice(load_config()).startswith(fp8_logits.FP4)
