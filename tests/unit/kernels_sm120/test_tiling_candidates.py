"""Every candidate tiling of ``benchmarks/kernels_fp8_tilings.py`` is one the launcher takes, and computes the logits
of the float64 reference with it (Triton's interpreter, small inputs): a GPU call then never spends its time on a
refused or wrong candidate. Their speed needs a GPU (the benchmark, which checks each against float64 there first);
a direct-store candidate stores with ``tl.store`` here (the interpreter runs no PTX)."""

import pytest
import torch

from benchmarks.kernels_fp8_tilings import candidates
from kernels_sm120 import _triton_helpers, dispatch, paged_mqa_logits
from kernels_sm120 import reference as R
from tests.support.logits_inputs import fp8_case, logits_inputs
from tests.support.triton_interpreter import interpreted_kernels

LENS = [700, 0, 1, 65, 130]  # a long row beside short, empty and partial-page ones
WIDTH = 12  # pages of page table: 768 keys


@pytest.fixture
def interp():
    with interpreted_kernels(_triton_helpers, paged_mqa_logits):
        yield


def _rel_err(out, ref, written):
    return ((out[written].double() - ref[written]).norm() / ref[written].norm()).item()


@pytest.mark.parametrize("name", sorted(candidates()))
def test_candidate_tiling_computes_the_reference_logits(interp, name):
    _group, kind, cfg = candidates()[name]
    torch.manual_seed(20261207)
    max_len = WIDTH * 64
    out = torch.full((len(LENS), max_len), float("nan"))
    if kind == "fp8":
        q, cache, w, seq, pt = fp8_case(LENS, WIDTH, heads=16)
        dispatch.paged_mqa_logits_fp8(q, cache, w, seq, pt, max_len, out=out, config=cfg)
        ref = R.fp8_paged_mqa_logits_reference(q, cache, w, seq, pt, max_len)
    else:
        _k, q_exact, w, seq, pt, cache = logits_inputs(torch.device("cpu"), LENS, WIDTH)
        q = q_exact.to(torch.bfloat16)
        dispatch.paged_mqa_logits_bf16(q.unsqueeze(1), cache, w, seq, pt, max_len, out=out, config=cfg)
        ref = R.paged_mqa_logits_reference(q, R.index_k_cache_as_rows(cache), w, seq, pt, max_len)
    written = torch.arange(max_len)[None, :] < seq.long()[:, None]
    assert torch.isnan(out[~written]).all(), "columns past each row's length are not written"
    assert _rel_err(out, ref, written) < 1e-5
