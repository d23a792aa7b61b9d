"""Per-architecture launch configurations and the public entry points.

The architecture is read from the tensors' device at call time
(``torch.cuda.get_device_capability(device)``), never at import, so importing this
module touches no GPU. CPU tensors (Triton's interpreter, used by the CPU tests) get
the portable default.

Every SM120 configuration must fit 101376 B (99 KiB) of shared memory per block and
use mma.sync only; ``python -m kernels_sm120.aot`` compiles each configuration below
for sm_120a / sm_100a / sm_90a and prints the shared memory it needs.
"""

import functools
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import torch

from . import index_k_store, index_q
from . import paged_mqa_logits as logits_mod

SM120_MAX_SHARED_BYTES = 101376


@dataclass(frozen=True)
class StoreConfig:
    """index-K store: rows per tile; the grid is persistent, at most programs_per_sm
    programs per SM, each loading the norm weight once and looping over tiles."""

    block_m: int
    num_warps: int
    num_stages: int = 1
    programs_per_sm: int = 4
    prefetch: bool = True


@dataclass(frozen=True)
class ScatterConfig:
    """index-K scatter of transformed rows: rows per program."""

    block_m: int
    num_warps: int
    num_stages: int = 1


@dataclass(frozen=True)
class QConfig:
    """index-Q: (token, head) rows per tile; persistent grid as for the store."""

    block_m: int
    num_warps: int
    num_stages: int = 1
    programs_per_sm: int = 4
    prefetch: bool = True


@dataclass(frozen=True)
class LogitsConfig:
    """paged MQA logits: keys per tl.dot (block_n: a power of two >= 16, need not be
    whole 64-slot pages), the longest chunk of keys one program walks (max_chunk;
    shortened at run time for small grids), and the pipeline depth (num_stages)."""

    block_n: int
    max_chunk: int
    num_warps: int
    num_stages: int


@dataclass(frozen=True)
class ArchConfigs:
    name: str
    store: StoreConfig
    scatter: ScatterConfig
    q: QConfig
    logits: LogitsConfig


# Shared memory per block (bytes) for the logits kernel is about
# 16 KiB (q^T) + num_stages * block_n * 256 (key tiles); see NOTES.md for the AOT numbers.
# store / q (v4, butterfly Hadamard): 16-row tiles, 2 warps, next tile prefetched; 128 (store)
# / 115 (q) registers per thread (AOT, triton 3.6; same on sm_120a), so 8 such 64-thread programs
# fill an SM's 64K registers: 8 per SM = one persistent wave. Measured on the H200 (NOTES.md).
_PERSISTENT_STORE = StoreConfig(block_m=16, num_warps=2, programs_per_sm=8)
_PERSISTENT_Q = QConfig(block_m=16, num_warps=2, programs_per_sm=8)
_SCATTER = ScatterConfig(block_m=32, num_warps=4)
# H100/H200: 228 KiB shared memory per SM, wgmma. Logits: 3 x 32 KiB key stages + q = 113 KiB,
# two programs per SM; picked by the sweep in bench_kernels (NOTES.md).
_HOPPER_CLASS_LOGITS = LogitsConfig(block_n=128, max_chunk=2048, num_warps=4, num_stages=3)

CONFIGS: Dict[str, ArchConfigs] = {
    "sm90": ArchConfigs(
        name="sm90", store=_PERSISTENT_STORE, scatter=_SCATTER, q=_PERSISTENT_Q, logits=_HOPPER_CLASS_LOGITS,
    ),
    # B200/GB200 (sm_100a): 228 KiB per SM like Hopper; Triton lowers tl.dot to tcgen05.
    # Not measured here: same tiling as sm90.
    "sm100": ArchConfigs(
        name="sm100", store=_PERSISTENT_STORE, scatter=_SCATTER, q=_PERSISTENT_Q, logits=_HOPPER_CLASS_LOGITS,
    ),
    # RTX PRO 6000 / RTX 50xx (sm_120a): 99 KiB per block, ~100 KiB per SM, mma.sync only.
    # Logits: 3 stages of 16 KiB key tiles (2 in shared memory, 48.5 KiB with q) fit twice per
    # SM; ~1.8 TB/s over 188 SMs needs ~10 KiB in flight per SM, well covered. Store / q: the
    # H200's tiling (1 KiB shared memory per program on sm_120a). Not measured on SM120.
    "sm120": ArchConfigs(
        name="sm120", store=_PERSISTENT_STORE, scatter=_SCATTER, q=_PERSISTENT_Q,
        logits=LogitsConfig(block_n=64, max_chunk=1024, num_warps=4, num_stages=3),
    ),
    # Anything else (sm80/sm86/sm89, sm110, the CPU interpreter): small, safe tiles.
    "default": ArchConfigs(
        name="default",
        store=StoreConfig(block_m=16, num_warps=4),
        scatter=ScatterConfig(block_m=16, num_warps=4),
        q=QConfig(block_m=16, num_warps=4),
        logits=LogitsConfig(block_n=64, max_chunk=512, num_warps=4, num_stages=2),
    ),
}


def arch_key(capability: Optional[Tuple[int, int]]) -> str:
    """(major, minor) -> a CONFIGS key. None (no CUDA device) -> "default"."""
    if capability is None:
        return "default"
    major, _minor = capability
    if major == 9:
        return "sm90"
    if major == 10:
        return "sm100"
    if major == 12:
        return "sm120"
    return "default"


@functools.lru_cache(maxsize=None)
def _cuda_props(index: int) -> Tuple[Tuple[int, int], int]:
    props = torch.cuda.get_device_properties(index)
    return (props.major, props.minor), props.multi_processor_count


def configs_for(device: torch.device) -> ArchConfigs:
    """The configuration set for tensors on ``device`` (read at call time)."""
    if device.type != "cuda":
        return CONFIGS["default"]
    index = device.index if device.index is not None else torch.cuda.current_device()
    return CONFIGS[arch_key(_cuda_props(index)[0])]


def num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 4  # the interpreter: any small number gives short chunks
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _cuda_props(index)[1]


def store_index_k_bf16(
    kv: torch.Tensor,
    norm_weight: torch.Tensor,
    norm_eps: float,
    freqs_cis: torch.Tensor,
    positions: torch.Tensor,
    out_loc: torch.Tensor,
    index_k_cache: torch.Tensor,
    *,
    page_size: int = 64,
    config: Optional[StoreConfig] = None,
) -> None:
    """Fused RMSNorm + RoPE + Hadamard + bf16 scatter into one layer's index-K cache.
    Shapes: see ``kernels_sm120`` (package docstring)."""
    cfg = config or configs_for(kv.device).store
    index_k_store.store_index_k_norm_rope_hadamard(
        kv, norm_weight, norm_eps, freqs_cis, positions, out_loc, index_k_cache,
        page_size=page_size, block_m=cfg.block_m, max_programs=cfg.programs_per_sm * num_sms(kv.device),
        prefetch=cfg.prefetch, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )


def scatter_index_k_bf16(
    rows_bf16: torch.Tensor,
    out_loc: torch.Tensor,
    index_k_cache: torch.Tensor,
    *,
    page_size: int = 64,
    config: Optional[ScatterConfig] = None,
) -> None:
    """Scatter already-transformed bf16 rows into one layer's index-K cache."""
    cfg = config or configs_for(rows_bf16.device).scatter
    index_k_store.scatter_index_k_rows(
        rows_bf16, out_loc, index_k_cache,
        page_size=page_size, block_m=cfg.block_m, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )


def index_q_bf16(
    q: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: float,
    freqs_cis: torch.Tensor,
    positions: torch.Tensor,
    *,
    num_heads: int = 64,
    q_out: Optional[torch.Tensor] = None,
    weights_out: Optional[torch.Tensor] = None,
    config: Optional[QConfig] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """bf16 indexer q (RoPE + Hadamard) and fp32 head weights (weight * weight_scale)."""
    cfg = config or configs_for(q.device).q
    return index_q.index_q_rope_hadamard(
        q, weight, weight_scale, freqs_cis, positions,
        num_heads=num_heads, q_out=q_out, weights_out=weights_out,
        block_m=cfg.block_m, max_programs=cfg.programs_per_sm * num_sms(q.device),
        prefetch=cfg.prefetch, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )


def paged_mqa_logits_bf16(
    q: torch.Tensor,
    index_k_cache: torch.Tensor,
    weights: torch.Tensor,
    seq_lens: torch.Tensor,
    page_table: torch.Tensor,
    max_seq_len: int,
    *,
    out: Optional[torch.Tensor] = None,
    config: Optional[LogitsConfig] = None,
) -> torch.Tensor:
    """fp32 [rows, max_seq_len] logits over bf16 paged index-K; -inf past each row."""
    cfg = config or configs_for(q.device).logits
    return logits_mod.paged_mqa_logits(
        q, index_k_cache, weights, seq_lens, page_table, max_seq_len,
        out=out, block_n=cfg.block_n, max_chunk=cfg.max_chunk, num_sms=num_sms(q.device),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
