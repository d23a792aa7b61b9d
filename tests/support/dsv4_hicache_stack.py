"""SGLang's real DeepSeek-V4 HiCache stack on CPU, for tests that move index-K pages the way a server does.

:func:`build` runs SGLang's own ``build_deepseek_v4_hicache_stack`` over a real ``DeepSeekV4TokenToKVPool``:
the real ``HostPoolGroup`` (a ``LogicalHostPool`` KV anchor and the ``DeepSeekV4PagedHostPool`` mirrors,
the c4 indexer one among them) and the real ``HybridCacheController`` (``--hicache-io-backend direct``,
``layer_first``). With ``l3_dir`` the controller's real ``attach_storage_backend("file")`` adds SGLang's
file backend (``HiCacheFile``); its threads are stopped again at once, so the test runs the bodies of
the backup and prefetch threads itself (``_page_backup``, ``_page_transfer``), in order.

Stubbed, because they cannot run on CPU (each is covered on the GPU by ``tests/gpu/``):
``cudaHostRegister`` of the host buffers (``pool_host.common._cuda_host_register``, and the pools'
``pin_memory`` flag set to False to match, which the file backend's bounce pages read), sgl_kernel's
``transfer_kv_direct`` (replaced by its plain-torch stand-in, ``benchmarks/sglang_gpu/standins.py``)
and the device allocator (a duck handing out fresh device pages, as ``benchmarks/sglang_gpu/race.py``).
"""

from __future__ import annotations

import threading
import types

import torch

from benchmarks.sglang_gpu import race, standins
from sglang_dsv4_ext.tools.sglang_cpu import dsv4_model
from tests.support import gate_doubles as gd

PAGE = 256
HOST_PAGES = 4  # --hicache-ratio 0.25 of the pool's 16 full pages: small, so freed pages come back soon


class FreshDevicePages(race.DuckAllocator):
    """The race replay's duck allocator, except that every ``alloc`` gets pages not handed out before."""

    def __init__(self, pool):
        super().__init__(pool, None)
        self.size_full = pool.size
        self.next_page = 1  # page 0 is the null page
        self.swa_attn_allocator = types.SimpleNamespace(alloc=lambda n: None, free=lambda i: None)

    def alloc(self, need_size: int):
        start = self.next_page * PAGE
        self.next_page += -(-need_size // PAGE)
        return torch.arange(start, start + need_size)

    def free(self, indices) -> None:
        pass


def _attach_file_backend(controller, group, l3_dir: str) -> None:
    from sglang.srt.runtime_context import get_parallel

    with get_parallel().override(tp_rank=0, pp_rank=0, attn_tp_rank=0, attn_cp_rank=0, attn_dcp_rank=0):
        controller.attach_storage_backend(
            "file", storage_backend_extra_config={"file_storage_path": l3_dir}, host_pools=group.entries
        )
    controller._stop_storage_threads()  # the test runs the threads' bodies itself


def build(monkeypatch, l3_dir: str | None = None):
    """``SimpleNamespace(pool, group, controller, anchor, c4_host)``; the c4 indexer's device pages hold
    random bytes (a different pattern per page)."""
    import sglang.srt.mem_cache.memory_pool_host as mph
    import sglang.srt.mem_cache.pool_host.common as host_common
    from sglang.srt.mem_cache.hicache_storage import PoolName
    from sglang.srt.mem_cache.hybrid_cache import hybrid_pool_assembler as asm

    monkeypatch.setattr(host_common, "_cuda_host_register", lambda *a, **k: None)
    monkeypatch.setattr(mph, "transfer_kv_direct", standins.transfer_kv_direct, raising=False)
    pool = gd.build_pool(start_layer=0, end_layer=len(gd.RATIOS))  # a server's stage bounds (the builder checks them)
    params = types.SimpleNamespace(
        page_size=PAGE,
        token_to_kv_pool_allocator=FreshDevicePages(pool),
        tp_cache_group=race._single_rank_group(),
        attn_cp_cache_group=None,
        attn_tp_cache_group=None,
        pp_cache_group=None,
        mtp_draft_device_pools=(),
    )
    ratio = HOST_PAGES / (pool.size // PAGE)
    with dsv4_model.cpu_server_args(hicache_ratio=ratio, hicache_io_backend="direct", hicache_mem_layout="layer_first"):
        group, controller = asm.build_deepseek_v4_hicache_stack(
            params=params, kvcache=pool, load_cache_event=threading.Event(), storage_backend=None
        )
        for entry in group.entries:  # their buffers were never registered (above): nothing is pinned on CPU
            if hasattr(entry.host_pool, "pin_memory"):
                entry.host_pool.pin_memory = False
        if l3_dir is not None:
            _attach_file_backend(controller, group, l3_dir)
    for layer, buf in enumerate(pool.c4_indexer_kv_pool.index_k_with_scale_buffer):
        g = torch.Generator().manual_seed(100 + layer)
        list.__getitem__(pool.c4_indexer_kv_pool.index_k_with_scale_buffer, layer).copy_(
            torch.randint(0, 256, buf.shape, dtype=torch.uint8, generator=g)
        )
    return types.SimpleNamespace(
        pool=pool,
        group=group,
        controller=controller,
        anchor=group.get_pool(PoolName.KV),
        c4_host=group.get_pool(PoolName.DEEPSEEK_V4_C4_INDEXER),
    )


def c4_sidecar() -> list[object]:
    """The c4 indexer transfer UnifiedRadixCache adds to every KV transfer (its SidecarPoolSpec pairs it with KV)."""
    from sglang.srt.mem_cache.hicache_storage import PoolName, PoolTransfer

    return [PoolTransfer(name=PoolName.DEEPSEEK_V4_C4_INDEXER, indices_from_pool=PoolName.KV)]


def tokens(pages) -> torch.Tensor:
    """Token indices of whole pages."""
    return (torch.as_tensor(pages)[:, None] * PAGE + torch.arange(PAGE)).flatten()


def pages_of(token_indices: torch.Tensor) -> list[int]:
    return (token_indices[::PAGE] // PAGE).tolist()


def load(stack, host_tokens: torch.Tensor) -> torch.Tensor:
    """The controller's real load (KV anchor + c4 indexer sidecar) into fresh device pages; returns them."""
    device_tokens = stack.controller.load(host_tokens, node_id=7, extra_pools=c4_sidecar())
    stack.controller.start_loading()
    return device_tokens


def read_c4_layers(pool, rids=("req-7",)) -> None:
    """SGLang's real C4Indexer.forward entry for every c4 layer (the backend call stubbed: it needs CUDA metadata)."""
    from sglang.srt.layers.attention.dsv4.indexer import C4Indexer

    backend = types.SimpleNamespace(forward_c4_indexer=lambda **kw: None)
    batch = types.SimpleNamespace(token_to_kv_pool=pool, rids=list(rids))
    for model_layer, mapping in enumerate(pool.layer_mapping):
        if mapping is None or mapping.compress_ratio != 4:
            continue
        indexer = C4Indexer.__new__(C4Indexer)
        indexer.layer_id = model_layer
        indexer.alt_streams = None
        C4Indexer.forward(indexer, None, None, batch, backend)


def c4_rows(pool, device_tokens: torch.Tensor) -> list[torch.Tensor]:
    """The c4 indexer device rows of ``device_tokens``' pages, per layer (copies)."""
    rows = torch.as_tensor(pages_of(device_tokens))
    return [
        list.__getitem__(pool.c4_indexer_kv_pool.index_k_with_scale_buffer, layer)[rows].clone()
        for layer in range(len(pool.c4_indexer_kv_pool.index_k_with_scale_buffer))
    ]
