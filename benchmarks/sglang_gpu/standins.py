"""Plain-torch stand-ins for the native ops that the GPU-tested SGLang paths call, and torch bridges.

Why: where SGLang's native packages are missing they are import stubs (:mod:`.stubs`); a tested path
that reaches one of their ops must run a plain-torch implementation instead, and say so. Each stand-in
is installed on the module attribute SGLang looks up at call time, and listed in :data:`STANDINS`
(the table in benchmarks/GPU-NOTES.md is printed from it).

How: :func:`install` binds them after SGLang's modules are imported. Ops that are JIT CUDA kernels of
SGLang's own (the fp8 index-K store and index-Q quantization) get stand-ins in the bf16-vs-fp8
comparison module itself, where they are listed too (:data:`FP8_PATH_STANDINS`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class StandIn(NamedTuple):
    op: str  # the native op
    called_from: str  # where SGLang 0.5.23 calls it on the tested path
    does: str  # what the plain-torch stand-in does
    bound_at: str  # module attribute the stand-in replaces


STANDINS: list[StandIn] = [
    StandIn(
        "sgl_kernel.kvcacheio.transfer_kv_direct",
        "DeepSeekV4PagedHostPool.load_to_device_per_layer (memory_pool_host.py), io backend 'direct', "
        "layer_first layout; reached from L2TransferEngine.submit_host_to_device per layer",
        "groups the (host row, device row) index pairs into runs that are contiguous on both sides and "
        "issues one Tensor.copy_(non_blocking=True) per run on the current (HiCache H2D) stream; pinned "
        "host rows, so each copy is an async DMA ordered on that stream like the native memcpy",
        "sglang.srt.mem_cache.memory_pool_host.transfer_kv_direct",
    ),
    StandIn(
        "sgl_kernel.weak_ref_tensor",
        "breakable_cuda_graph._weak_ref_if_tensor (eager_on_graph, at capture, for tensor arguments of an eager break)",
        "returns the tensor itself (a strong reference): the break's arguments stay alive as long as "
        "the graph, which the native weak view only assumes",
        "sglang.srt.model_executor.runner_backend_utils.weak_ref_tensor.weak_ref_tensor",
    ),
]


def transfer_kv_direct(src_layers, dst_layers, src_indices, dst_indices, page_size: int) -> None:
    """``sgl_kernel.kvcacheio.transfer_kv_direct`` in plain torch (see :data:`STANDINS`)."""
    if len(src_layers) != len(dst_layers):
        raise ValueError(f"transfer_kv_direct: {len(src_layers)} source layers vs {len(dst_layers)} destination")
    src_idx = src_indices.to("cpu", torch.int64)
    dst_idx = dst_indices.to("cpu", torch.int64)
    if src_idx.numel() != dst_idx.numel():
        raise ValueError(f"transfer_kv_direct: {src_idx.numel()} source vs {dst_idx.numel()} destination indices")
    for src, dst in zip(src_layers, dst_layers):
        for s, d, n in contiguous_runs(src_idx, dst_idx, page_size):
            dst[d : d + n].copy_(src[s : s + n], non_blocking=True)


def contiguous_runs(src_idx: torch.Tensor, dst_idx: torch.Tensor, page_size: int = 1):
    """``[(src_start, dst_start, length)]`` covering the index pairs in order, merged where both sides
    continue by one; ``page_size`` > 1 indices address tokens and are copied page by page."""
    if page_size < 1:
        raise ValueError(f"transfer_kv_direct: page_size must be >= 1, got {page_size}")
    s_list, d_list = src_idx.tolist(), dst_idx.tolist()
    runs = []
    for s, d in zip(s_list, d_list):
        if runs and runs[-1][0] + runs[-1][2] == s and runs[-1][1] + runs[-1][2] == d:
            runs[-1][2] += 1
        else:
            runs.append([s, d, 1])
    return [tuple(r) for r in runs]


def weak_ref_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """``sgl_kernel.weak_ref_tensor`` stand-in (see :data:`STANDINS`)."""
    return tensor


def install(ops=None) -> list[str]:
    """Bind the stand-ins (all, or those whose ``op`` is in ``ops``) where SGLang looks them up.

    Returns the bound attribute paths. ``weak_ref_tensor``'s module refuses to import without a GPU,
    so CPU tests bind only the transfer op.
    """
    import importlib

    bound = []
    for row, fn in zip(STANDINS, (transfer_kv_direct, weak_ref_tensor)):
        if ops is not None and row.op not in ops:
            continue
        module_name, attr = row.bound_at.rsplit(".", 1)
        module = importlib.import_module(module_name)
        setattr(module, attr, fn)
        bound.append(row.bound_at)
    return bound


# --- torch 2.14-only calls on the tested paths, bridged for the GPU image's torch 2.11 ----------------


class Bridge(NamedTuple):
    call: str
    called_from: str
    bridge: str


BRIDGES: list[Bridge] = []  # filled by bridge_torch() with what this torch actually lacked


def bridge_torch() -> list[Bridge]:
    """Add what SGLang 0.5.23's tested paths call but this torch lacks; record each bridge."""
    BRIDGES.clear()
    if not hasattr(torch.cpu, "Stream"):  # pragma: no cover - every torch >= 2.1 has it
        raise RuntimeError("torch.cpu.Stream is missing; this torch is too old for SGLang 0.5.23")
    return list(BRIDGES)
