"""Page ids two or three tiles ahead (``LogitsConfig.ids_ahead``) on a real GPU: the same bits as one tile ahead.

The one-page tilings (interleaved parts, bf16 and fp8 keys; the item grid with page tiles) load each tile's
page id ahead of its key tile; with ``ids_ahead=2`` the id comes two tiles ahead and (fp8) each tile's scales
are loaded from an id already back (``paged_mqa_logits._page_tiles``). Only the order of the loads changes, so
both must write the same bits: every such tiling of every configuration set (and of the tiling sweep's
candidates) runs both ways on the same inputs
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


def takes_page_tiles(cfg, key_fp8: bool) -> bool:
    """Whether the kernel runs this tiling one page per tile (``_page_tiles``): interleaved parts, or one row per
    program with page_block 0 and 64-key tiles (fp8 keys only with their scales ahead)."""
    one_page = cfg.rows_per_program == 1 and cfg.page_block == 0 and cfg.block_n == 64
    return cfg.interleaved or (one_page and (cfg.scales_ahead or not key_fp8))


def one_page_tilings(key_fp8: bool):
    """pytest params (key_fp8, label, tiling, batch): every configuration set's tiling for each batch, and each
    other sweep candidate of ``benchmarks/kernels_fp8_tilings.py`` for the many-row batch, where the tiling takes
    one page per tile (tilings that differ only in ``ids_ahead`` or ``direct_store`` once)."""
    from benchmarks.kernels_fp8_tilings import candidates

    def plain(cfg):
        return dataclasses.replace(cfg, ids_ahead=1, direct_store=False)

    params, seen, kinds = [], set(), {True: "fp8", False: "bf16"}
    for name in sorted(dispatch.CONFIGS):
        for batch, lens in LENGTHS.items():
            cfg = dispatch.CONFIGS[name].logits_for(len(lens), key_fp8=key_fp8)
            if takes_page_tiles(cfg, key_fp8):
                params.append(pytest.param(key_fp8, name, cfg, batch, id=f"{kinds[key_fp8]}-{name}-{batch}"))
                seen.add(plain(cfg))
    for label, (_group, kind, cfg) in sorted(candidates().items()):
        if (kind == "fp8") == key_fp8 and takes_page_tiles(cfg, key_fp8) and plain(cfg) not in seen:
            params.append(pytest.param(key_fp8, label, cfg, "many rows", id=f"{label}-many rows"))
            seen.add(plain(cfg))
    return params


@pytest.mark.parametrize("key_fp8", [True, False], ids=["fp8", "bf16"])
def test_some_tiling_takes_one_page_per_tile(key_fp8):
    assert one_page_tilings(key_fp8), "no tiling takes one page per tile: the test below checks nothing"


@pytest.mark.parametrize("key_fp8, label, cfg, batch", one_page_tilings(True) + one_page_tilings(False))
def test_ids_ahead_match_one_ahead(key_fp8, label, cfg, batch):
    torch.seed()
    lens = LENGTHS[batch]
    ahead = (1, 2, 3) if key_fp8 else (1, 2)
    tilings = [dataclasses.replace(cfg, ids_ahead=a) for a in ahead]
    (one, *others), written = logits_of_tilings(lens, tilings, key_fp8=key_fp8, device=torch.device("cuda"))
    torch.cuda.synchronize()
    assert not torch.isnan(one[written]).any(), "every column below a row's length must be written"
    for out in others:
        torch.testing.assert_close(out, one, rtol=0, atol=0, equal_nan=True)
