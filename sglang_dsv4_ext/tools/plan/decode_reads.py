"""Bytes one decode step reads per request, by index-K dtype: the speed side of ``plan``'s trade-off.

A decode token of a request at context ``N`` (tokens), per layer of the stage:

  * every layer: its sliding window, ``min(N, window_size)`` rows of the SWA KV pool;
  * c4 layers: the indexer reads every c4 index-K row, ``N // 4`` of ``index_k_bytes_per_token``
    (fp8 132 B, bf16 256 B, fp4 68 B at head dim 128), and sparse attention its top-k selected c4 KV
    rows, ``min(index_topk, N // 4)``;
  * c128 layers: all ``N // 128`` c128 KV rows;
  * uncompressed layers (ratio 0): the window only.

A KV row is SGLang's FlashMLA-layout slot, ``qk_nope_head_dim + 2 * qk_rope_head_dim + 8`` bytes
(fp8 nope, bf16 rope, scales: ``DSV4PoolConfigurator.kv_bytes``, 584 B for V4-Flash); the pools pad
whole pages, not the rows a reader touches. ``tests/unit/cli/test_plan_decode_reads.py`` checks these
row sizes and layer counts against SGLang's real pools built on CPU. Only the index-K term depends on
the dtype. Weights, activations and the MTP draft layer are not counted: this compares the KV bytes
the choice changes, not a whole step.

No SGLang import: ``benchmarks/kernels.py`` uses it on the GPU machine beside the measured logits time.
"""

from __future__ import annotations

from collections.abc import Sequence

from sglang_dsv4_ext.config import IndexKDtype
from sglang_dsv4_ext.runtime.index_k.dtype import index_k_bytes_per_token

DEFAULT_CONTEXTS = (8192, 32768, 131072, 1048576)
# Ratios whose readers the formula above describes. DeepSeek-V4.1's ratio-1/2 layers read shared fp4
# index-K and KV sub-pools through their kv_source layers with a different indexer: not modelled, and
# said so rather than left out of a total that would then look complete.
MODELLED_RATIOS = (0, 4, 128)


def unmodelled_ratios(model, start_layer: int = 0, end_layer: int | None = None):
    """The compression ratios of the stage that :func:`decode_read_bytes` does not describe (sorted)."""
    end = model.num_hidden_layers if end_layer is None else end_layer
    return sorted({r for r in model.compress_ratios[start_layer:end] if r not in MODELLED_RATIOS})


def kv_row_bytes(model) -> int:
    """One compressed or SWA KV row of SGLang's FlashMLA layout (fp8 nope + bf16 rope + 8 B of scales)."""
    return model.qk_nope_head_dim + 2 * model.qk_rope_head_dim + 8


def decode_read_bytes(
    model, context: int, dtype: str, *, start_layer: int = 0, end_layer: int | None = None
) -> dict[str, int]:
    """Per-request bytes of one decode step at ``context`` tokens, split by reader (see module docstring)."""
    if not isinstance(context, int) or context < 1:
        raise ValueError(f"context must be a positive number of tokens, got {context!r}")
    unmodelled = unmodelled_ratios(model, start_layer, end_layer)
    if unmodelled:
        raise ValueError(f"decode reads of ratio {unmodelled} layers are not modelled")
    end = model.num_hidden_layers if end_layer is None else end_layer
    ratios = model.compress_ratios[start_layer:end]
    kv = kv_row_bytes(model)
    c4, c128 = ratios.count(4), ratios.count(128)
    reads = {
        "swa": len(ratios) * min(context, model.window_size) * kv,
        "indexer": c4 * (context // 4) * index_k_bytes_per_token(dtype, model.index_head_dim),
        "sparse_c4": c4 * min(model.index_topk, context // 4) * kv,
        "c128": c128 * (context // 128) * kv,
    }
    reads["total"] = sum(reads.values())
    return reads


def decode_reads_table(model, contexts: Sequence[int], dtypes: Sequence[str], **stage) -> dict[str, object]:
    """For each context: each dtype's bytes, the indexer's share and the ratio to fp8's total.

    ``{"not_modelled": reason}`` when the stage has layers the formula does not describe (V4.1's ratio 1/2).
    """
    unmodelled = unmodelled_ratios(model, **stage)
    if unmodelled:
        return {
            "not_modelled": f"the stage has ratio-{'/'.join(map(str, unmodelled))} layers (DeepSeek-V4.1's "
            "shared low-ratio indexer), whose decode reads this formula does not describe"
        }
    out = {}
    for n in contexts:
        per = {d: decode_read_bytes(model, n, d, **stage) for d in dtypes}
        fp8 = decode_read_bytes(model, n, IndexKDtype.FP8, **stage)["total"]
        out[str(n)] = {
            d: {**r, "indexer_share": r["indexer"] / r["total"], "vs_fp8": r["total"] / fp8} for d, r in per.items()
        }
    return out


# What bf16 index-K costs in c4 indexer time, measured (not derived from the bytes): the logits kernel's time
# over bf16 keys against stock SM120's default over its fp8 pool (SGLang's tilelang_fp8_paged_mqa_logits:
# model_hook.py sets SGLANG_OPT_USE_TILELANG_INDEXER on SM120) and against ours over the same fp8 pool
# (SGLANG_DSV4_FP8_LOGITS=triton). CUDA-graph medians, one run of all three kernels on the same inputs per card
# (`python -m benchmarks.kernels_fp8`; kernels_sm120/NOTES.md, "One run of every kernel and limit" for the H200,
# "One page per tile" for the H100, its last run); an SM120 card was not measured. The two cards disagree:
# TileLang's fp8 kernel leaves much of the H200's bandwidth idle and less of the H100's, so bf16's doubled bytes
# cost more against it on the H100. Card -> (label, low, high).
_INDEXER_TIME_LABELS = (
    "bf16 / stock SM120 fp8 (TileLang), uniform batches >= 34 MB of keys",
    "bf16 / stock SM120 fp8 (TileLang), uniform batches <= 17 MB",
    "bf16 / stock SM120 fp8 (TileLang), mixed-length batches",
    "bf16 / our fp8 kernel, uniform batches >= 34 MB",
)
_INDEXER_TIME_RANGES = {
    "NVIDIA H200, 2026-12-02": ((1.00, 1.12), (1.04, 1.22), (0.08, 0.73), (1.45, 1.67)),
    "NVIDIA H100, 2026-12-07": ((1.28, 1.37), (1.05, 1.43), (0.09, 0.91), (1.65, 1.89)),
}
MEASURED_INDEXER_TIME: dict[str, tuple[tuple[str, float, float], ...]] = {
    card: tuple((label, low, high) for label, (low, high) in zip(_INDEXER_TIME_LABELS, ranges, strict=True))
    for card, ranges in _INDEXER_TIME_RANGES.items()
}
