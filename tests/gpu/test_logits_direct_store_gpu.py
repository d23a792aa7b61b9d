"""The logits kernels' direct store (``LogitsConfig.direct_store``) on a real GPU: the same bits as ``tl.store``.

The direct store writes each key's sum with inline PTX from the product's layout instead of moving it
through shared memory first (``paged_mqa_logits.store_logits``). Triton's interpreter runs no PTX, so
the CPU tests cannot run it: here every decode tiling of every configuration set (one row, few rows,
many rows; bf16 and fp8 keys) runs with and without it on the same inputs into NaN-poisoned outputs,
and the two outputs must agree bit for bit, unwritten columns included. The values themselves are
checked against float64 by ``test_kernels_gpu.py`` and ``test_fp8_logits_gpu.py`` over the same tilings.
"""

import dataclasses

import pytest
import torch

from kernels_sm120 import dispatch
from tests.support.logits_inputs import fp8_case, logits_inputs

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

# rows -> lengths: one row, few rows (a long one beside short ones), many rows (0, partial pages, long)
LENGTHS = {
    "one row": [9000],
    "few rows": [9000, 0, 1, 63, 64, 65, 2049],
    "many rows": [0, 1, 63, 64, 65, 1000, 2047, 9000] + [int(x) for x in torch.randint(1, 9000, (32,))],
}


@pytest.fixture
def dev():
    torch.seed()
    return torch.device("cuda")


def both_stores(run, cfg, rows, max_len, dev):
    outs = []
    for direct in (False, True):
        out = torch.full((rows, max_len), float("nan"), device=dev)
        run(dataclasses.replace(cfg, direct_store=direct), out)
        outs.append(out)
    torch.cuda.synchronize()
    return outs


@pytest.mark.parametrize("batch", sorted(LENGTHS))
@pytest.mark.parametrize("name", sorted(dispatch.CONFIGS))
def test_fp8_direct_store_matches_tl_store(dev, name, batch):
    lens = LENGTHS[batch]
    q, cache, w, seq, pt = fp8_case(dev, lens, 4096 // 64 * 4)
    cfg = dispatch.CONFIGS[name].logits_for(len(lens), key_fp8=True)
    max_len = pt.shape[1] * 64

    def run(c, out):
        dispatch.paged_mqa_logits_fp8(q, cache, w, seq, pt, max_len, out=out, config=c)

    plain, direct = both_stores(run, cfg, len(lens), max_len, dev)
    assert not torch.isnan(plain[0, : lens[0]]).any()
    torch.testing.assert_close(direct, plain, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("batch", sorted(LENGTHS))
@pytest.mark.parametrize("name", sorted(dispatch.CONFIGS))
def test_bf16_direct_store_matches_tl_store(dev, name, batch):
    lens = LENGTHS[batch]
    _k, q_exact, w, seq, pt, cache = logits_inputs(dev, lens, 4096 // 64 * 4)
    q = q_exact.to(torch.bfloat16).unsqueeze(1)
    cfg = dispatch.CONFIGS[name].logits_for(len(lens))
    max_len = pt.shape[1] * 64

    def run(c, out):
        dispatch.paged_mqa_logits_bf16(q, cache, w, seq, pt, max_len, out=out, config=c)

    plain, direct = both_stores(run, cfg, len(lens), max_len, dev)
    assert not torch.isnan(plain[0, : lens[0]]).any()
    torch.testing.assert_close(direct, plain, rtol=0, atol=0, equal_nan=True)
