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


@pytest.mark.parametrize(
    "argv, names",
    [
        (["--only", "bogus"], ["--only", "bogus", "allowed: few, decode, bf16 decode"]),
        (["--match", "nonexistent"], ["--match 'nonexistent'", "fp8 decode: page tiles s3 (default)"]),
        (["--only", "few", "--match", "fp8 decode"], ["--match 'fp8 decode'", "['few']"]),
    ],
    ids=["unknown-group", "no-candidate", "none-in-the-group"],
)
def test_the_sweep_refuses_a_choice_that_leaves_no_candidate_before_any_gpu_work(capsys, argv, names):
    """A bad --only or --match is refused by name, with the allowed values, before the GPU is looked for (no
    traceback, nothing written: --out is never created)."""
    from benchmarks import kernels_fp8_tilings

    with pytest.raises(SystemExit) as exit_info:
        kernels_fp8_tilings.main([*argv, "--out", "/nonexistent/never-made"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and all(n in err for n in names), err


def test_the_profiler_driver_refuses_an_unknown_variant_by_name(capsys):
    from benchmarks import ncu_logits

    with pytest.raises(SystemExit) as exit_info:
        ncu_logits.main(["--variant", "fp8 decode", "--variant", "nope"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--variant: unknown ['nope']" in err and "'gather, whole pages'" in err, err
