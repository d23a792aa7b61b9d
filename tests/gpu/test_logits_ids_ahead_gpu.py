"""Page ids two or three tiles ahead (``LogitsConfig.ids_ahead``) on a real GPU: the same bits as one tile ahead.

The one-page tilings (interleaved parts, bf16 and fp8 keys; fp8's item grid with page tiles) load each tile's
page id ahead of its key tile; with ``ids_ahead=2`` the id comes two tiles ahead and (fp8) each tile's scales
are loaded from an id already back (``paged_mqa_logits._page_tiles``). Only the order of the loads changes, so
both must write the same bits: every such tiling of every configuration set runs both ways on the same inputs
(page ids shuffled, so a tile that read another tile's page or scales would show) into NaN-poisoned outputs,
unwritten columns included. fp8 keys run ``ids_ahead=3`` too (ids three tiles ahead, scales two ahead). The CPU
tests run it under Triton's interpreter against float64 (``tests/unit/kernels_sm120/test_tiling_candidates.py``)
and check that the compiled loop keeps its cp.async (``test_aot.py``); here the compiled kernel runs.
"""

import dataclasses

import pytest
import torch

from kernels_sm120 import dispatch
from tests.support.logits_inputs import logits_of_tilings

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

# rows -> lengths: one row, few rows (a long one beside short ones), many rows (0, partial pages, long)
LENGTHS = {
    "one row": [9000],
    "one short row": [65],
    "few rows": [9000, 0, 1, 63, 64, 65, 129, 2049],
    "many rows": [0, 1, 63, 64, 65, 129, 1000, 2047, 9000] + [int(x) for x in torch.randint(1, 9000, (32,))],
}


def one_page_tilings(key_fp8: bool):
    """(config set, batch) pairs whose tiling takes one page per tile: where ``ids_ahead`` applies."""
    pairs = []
    for name in sorted(dispatch.CONFIGS):
        for batch, lens in LENGTHS.items():
            cfg = dispatch.CONFIGS[name].logits_for(len(lens), key_fp8=key_fp8)
            if cfg.interleaved or (key_fp8 and cfg.page_block == 0 and cfg.scales_ahead):
                pairs.append((name, batch))
    return pairs


@pytest.mark.parametrize("key_fp8", [True, False], ids=["fp8", "bf16"])
def test_some_tiling_takes_one_page_per_tile(key_fp8):
    assert one_page_tilings(key_fp8), "no configuration set has a one-page tiling: the test below checks nothing"


@pytest.mark.parametrize(
    "key_fp8, name, batch",
    [(True, *p) for p in one_page_tilings(True)] + [(False, *p) for p in one_page_tilings(False)],
)
def test_ids_ahead_match_one_ahead(key_fp8, name, batch):
    torch.seed()
    lens = LENGTHS[batch]
    cfg = dispatch.CONFIGS[name].logits_for(len(lens), key_fp8=key_fp8)
    ahead = (1, 2, 3) if key_fp8 else (1, 2)
    tilings = [dataclasses.replace(cfg, ids_ahead=a) for a in ahead]
    (one, *others), written = logits_of_tilings(lens, tilings, key_fp8=key_fp8, device=torch.device("cuda"))
    torch.cuda.synchronize()
    assert not torch.isnan(one[written]).any(), "every column below a row's length must be written"
    for out in others:
        torch.testing.assert_close(out, one, rtol=0, atol=0, equal_nan=True)
