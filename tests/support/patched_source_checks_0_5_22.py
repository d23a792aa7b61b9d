"""Checks of SGLang 0.5.22's sources with the 0.5.22 series (patches/sglang-0.5.22/) applied,
where the 0.5.22 form of a fix differs from the 0.5.23 form (the extension switched off).

Not collected by the normal run (no ``test_`` file prefix): tests/integration/test_series_releases.py
runs them in a pytest subprocess under a Python with SGLang 0.5.22, with the patched copy of its
sglang package first on ``sys.path``, next to tests/support/patched_source_checks.py and the
extension's behaviour tests, which hold on both releases. These two replace the ones that
name what only 0.5.23 has:

- PD: 0.5.22 has no ``pd_kv_layout()``; the index-K dtype rides in ``kv_cache_dtype``, which
  SGLang 0.5.22's own decode-side handshake compares (real ``CommonKVManager`` code against a
  prefill bootstrap served over loopback HTTP, tests/support/pd_handshake.py);
- HiCache: 0.5.22's host pool calls its whole-layer copy ``backup_from_device_all_layer``.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from tests.support.dsv4_pools import sized_pool
from tests.support.pd_handshake import decode_side_check
from tests.unit.hooks.test_bf16_storage import _indexer_host_pool

RATIO_MODE = dict(swa_full_tokens_ratio=0.1, _swa_full_tokens_ratio_explicitly_set=True)


@pytest.fixture(autouse=True)
def plugin_off(ext_active):
    assert not ext_active.activated, "these checks must run with SGLANG_DSV4_EXT=0"


@pytest.fixture(autouse=True)
def sglang_0_5_22():
    from sglang.srt.disaggregation.common.conn import PrefillServerInfo

    assert "kv_layout" not in PrefillServerInfo.__dataclass_fields__, "these checks are for SGLang 0.5.22"


def _pool(monkeypatch, dtype: str):
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", dtype)
    return sized_pool(**RATIO_MODE)


def _decode_side_check(prefill_dtype: str, decode_dtype: str):
    """SGLang 0.5.22's real decode-side handshake (tests/support/pd_handshake.py) with these kv_cache_dtype strings."""
    return decode_side_check({"kv_cache_dtype": prefill_dtype}, {"kv_cache_dtype_str": decode_dtype})


def test_pd_kv_cache_dtype_carries_the_index_k_dtype_and_sglang_refuses_the_pair(monkeypatch):
    from sglang.srt.disaggregation.utils import get_pd_kv_cache_dtype

    strings = {}
    for dtype in ("fp8", "bf16"):
        with _pool(monkeypatch, dtype) as (_, _, pool):
            strings[dtype] = get_pd_kv_cache_dtype("fp8_e4m3", pool)
    assert strings == {"fp8": "fp8_e4m3", "bf16": "fp8_e4m3,c4idx:bf16"}  # fp8 keeps the stock string
    assert get_pd_kv_cache_dtype("auto", SimpleNamespace()) == "auto"  # a pool of another model
    for prefill, decode in ((strings["bf16"], strings["fp8"]), (strings["fp8"], strings["bf16"])):
        with pytest.raises(RuntimeError, match="KV cache dtype mismatch") as excinfo:
            _decode_side_check(prefill, decode)
        assert prefill in str(excinfo.value) and decode in str(excinfo.value)
    assert _decode_side_check(strings["bf16"], strings["bf16"]) is True


def test_token_granular_index_k_transfers_refused_for_bf16(monkeypatch):
    with _pool(monkeypatch, "bf16") as (_, _, pool):
        _, host = _indexer_host_pool(pool, "layer_first")
        partial = torch.arange(100, dtype=torch.int64)  # not a multiple of the 256-token page
        with pytest.raises(ValueError, match="expects page-aligned indices"):
            host.backup_from_device_all_layer(None, partial, partial, "kernel")
        with pytest.raises(ValueError, match="expects page-aligned indices"):
            host.load_to_device_per_layer(None, partial, partial, 0, "kernel")
