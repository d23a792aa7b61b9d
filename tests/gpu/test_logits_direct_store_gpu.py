"""The logits kernels' direct store (``LogitsConfig.direct_store``) on a real GPU: the same bits as ``tl.store``.

The direct store writes each key's sum with inline PTX from the product's layout instead of moving it
through shared memory first (``paged_mqa_logits.store_logits``). Triton's interpreter runs no PTX, so
the CPU tests cannot run it: here every decode tiling of every configuration set (one row, few rows,
many rows; bf16 and fp8 keys) runs with and without it on the same inputs into NaN-poisoned outputs,
and the two outputs must agree bit for bit, unwritten columns included. The values themselves are
checked against float64 by ``test_kernels_gpu.py`` and ``test_fp8_logits_gpu.py`` over the same tilings.

Hopper's wgmma gives each warp whole rows of the product; SM120's mma.sync splits a row's heads over two
warps, so there a key's sum is held by eight lanes and each thread stores four of them. With
``DISABLE_MMA_V3=1`` Triton uses mma.sync on this GPU too (for fp8 keys widened to fp16, not SM120's e4m3
form, but with its layout): each case runs with both, and checks that the kernel it ran was built that way.
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
    "few rows": [9000, 0, 1, 63, 64, 65, 2049],
    "many rows": [0, 1, 63, 64, 65, 1000, 2047, 9000] + [int(x) for x in torch.randint(1, 9000, (32,))],
}


@pytest.fixture
def dev():
    torch.seed()
    return torch.device("cuda")


@pytest.fixture(scope="module")
def mma_sync_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("triton-cache-mma-sync")


@pytest.fixture(params=["wgmma", "mma.sync"])
def product(request, monkeypatch, mma_sync_cache):
    """Which tensor-core product Triton builds. The kernel's in-process builds are dropped before and after each
    case, and mma.sync builds (``DISABLE_MMA_V3=1``) go to a compile cache of their own, so a case never runs a
    build of the other kind, whichever of them Triton's cache keys tell apart."""
    from kernels_sm120.paged_mqa_logits import paged_mqa_logits_kernel

    if request.param == "mma.sync":
        monkeypatch.setenv("DISABLE_MMA_V3", "1")
        monkeypatch.setenv("TRITON_CACHE_DIR", str(mma_sync_cache))
    held = dict(paged_mqa_logits_kernel.device_caches)  # the other tests' builds, kept loaded (and their graphs valid)
    paged_mqa_logits_kernel.device_caches.clear()
    yield request.param
    paged_mqa_logits_kernel.device_caches.clear()
    paged_mqa_logits_kernel.device_caches.update(held)


def compiled_ptx() -> list[str]:
    """The PTX of every build of the logits kernel this process holds (this case's: ``product`` drops the others)."""
    from kernels_sm120.paged_mqa_logits import paged_mqa_logits_kernel

    return [k.asm["ptx"] for cache, *_ in paged_mqa_logits_kernel.device_caches.values() for k in cache.values()]


def both_stores(cfg, lens, key_fp8, dev, product):
    tilings = [dataclasses.replace(cfg, direct_store=direct) for direct in (False, True)]
    (plain, direct), written = logits_of_tilings(lens, tilings, key_fp8=key_fp8, device=dev)
    torch.cuda.synchronize()
    assert not torch.isnan(plain[written]).any(), "every column below a row's length must be written"
    tensor_core = "mma.sync" if product == "mma.sync" else "wgmma"
    direct_builds = [ptx for ptx in compiled_ptx() if "@p st.global.b32" in ptx]
    assert direct_builds and all(tensor_core in ptx for ptx in direct_builds), (
        f"the direct store ran in {len(direct_builds)} build(s), not all of them with {tensor_core}"
    )
    return plain, direct


@pytest.mark.parametrize("key_fp8", [True, False], ids=["fp8", "bf16"])
@pytest.mark.parametrize("batch", sorted(LENGTHS))
@pytest.mark.parametrize("name", sorted(dispatch.CONFIGS))
def test_direct_store_matches_tl_store(dev, name, batch, key_fp8, product):
    lens = LENGTHS[batch]
    cfg = dispatch.CONFIGS[name].logits_for(len(lens), key_fp8=key_fp8)
    plain, direct = both_stores(cfg, lens, key_fp8, dev, product)
    torch.testing.assert_close(direct, plain, rtol=0, atol=0, equal_nan=True)
