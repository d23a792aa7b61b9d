"""No integrity path blocks the host, on a GPU: index tensors on the host (``--hicache-io-backend direct``)
and on the device (``kernel``), through the tracker and through the integrity hooks on SGLang's real pools.

Two independent checks around every call, each of which fails on a host wait:

* CUDA's sync debug mode (``torch.cuda.set_sync_debug_mode("error")``): PyTorch raises at any synchronising
  call of its own (a blocking copy, ``.item()``, ``torch.unique`` of a device tensor, ...);
* a GPU hold: every stream the calls are enqueued on first runs ``torch.cuda._sleep`` for about 1.5 s. The
  host must come back from all the calls while the holds still run; a wait the debug mode does not see
  (CUDA staging a copy from pageable memory behind the stream's work) would outlast them.

Afterwards the device finishes and the tracker's counts show the work was done: every page checked, and a
page changed between load and read caught. The unfixed tracker moved host indices with a blocking
``.to(device)`` per layer: the debug mode raises at the first ``record``. About 5 s without SGLang, plus
SGLang's bootstrap (shared with the other GPU tests) for the hook part.
"""

from __future__ import annotations

import contextlib
import types

import pytest

pytestmark = pytest.mark.gpu

PAGE = 256
ROWS = 16  # device page rows per c4 layer used here
HOLD_S = 1.5


@pytest.fixture(scope="module")
def cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: run tests/run_gpu_tests.sh on a CUDA GPU machine")
    from benchmarks.sglang_gpu import race

    return types.SimpleNamespace(torch=torch, hold_cycles=int(race.sleep_rate_cycles_per_us() * HOLD_S * 1e6))


@contextlib.contextmanager
def _host_must_not_wait(cuda, streams):
    """Hold ``streams`` on the GPU, run the body under sync debug mode "error", then check no hold had ended."""
    torch = cuda.torch
    torch.cuda.synchronize()
    holds = []
    for stream in streams:
        with torch.cuda.stream(stream):
            torch.cuda._sleep(cuda.hold_cycles)
            done = torch.cuda.Event()
            done.record(stream)
            holds.append(done)
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(0)
    ended = [i for i, done in enumerate(holds) if done.query()]
    torch.cuda.synchronize()
    assert not ended, (
        f"the GPU hold of stream(s) {ended} had ended when the host came back from the integrity "
        f"calls: one of them waited for the device ({HOLD_S} s hold)"
    )


def _indices(torch, kind, values):
    """Index tensors as the io backend hands them over: pageable host memory (direct) or the device (kernel)."""
    t = torch.as_tensor(values, dtype=torch.int64)
    return t if kind == "direct" else t.to("cuda")


@pytest.mark.parametrize("io_backend", ["direct", "kernel"])
def test_tracker_record_expect_verify_forget_poll_never_block_the_host(cuda, io_backend):
    from sglang_dsv4_ext.runtime.index_k import integrity as ii

    torch = cuda.torch
    g = torch.Generator(device="cuda").manual_seed(5)
    buffers = [torch.randint(0, 256, (ROWS, 8448), dtype=torch.uint8, device="cuda", generator=g) for _ in range(2)]
    tracker = ii.IntegrityTracker("full", buffers, 32)
    backup, load, reader = (torch.cuda.Stream() for _ in range(3))

    # Made before the held cycle: a CUDA index tensor built from a Python list is itself a pageable copy (a sync),
    # which is the test's doing, not the tracker's.
    freed = _indices(torch, io_backend, [31])

    def cycle(rows, keys, corrupt=False):
        with torch.cuda.stream(backup):
            tracker.record_all_layers(rows, keys)
        tracker.forget(freed)  # a page freed elsewhere (the scheduler's stream)
        load.wait_stream(backup)  # SGLang loads a page only after its backup finished
        with torch.cuda.stream(load):
            tracker.begin_load()
            for layer in range(2):
                tracker.expect(layer, rows, keys)
            if corrupt:
                buffers[1][3, 100] ^= 1  # a wrong copy: what the reader sees differs from what was backed up
        reader.wait_stream(load)  # the reader waits for its layer's load event
        with torch.cuda.stream(reader):
            for layer in range(2):
                tracker.verify(layer, requests=("req-1",))
            tracker.poll()

    rows, keys = _indices(torch, io_backend, range(ROWS)), _indices(torch, io_backend, range(ROWS))
    cycle(rows, keys)  # warm-up: Triton compiles its kernels (host work that needs the device once)
    tracker.drain()
    checked = tracker.pages_checked
    assert checked == 2 * ROWS and tracker.mismatches == 0
    with _host_must_not_wait(cuda, [backup, load, reader, torch.cuda.current_stream()]):
        cycle(rows, keys, corrupt=True)
    mismatch = tracker.drain()
    assert tracker.pages_checked == checked + 2 * ROWS  # the held cycle verified every page once done
    assert mismatch is not None and (mismatch.layer, mismatch.page, mismatch.count) == (1, 3, 1)


_STACK = []  # built once per process: see _sglang_stack


def _sglang_stack(torch):
    """SGLang's real pool (cuda), c4 indexer host mirror (pinned) and host pool group with its KV anchor.

    Built once and reused with a fresh tracker: SGLang registers the host mirror with cudaHostRegister and
    never unregisters it, so a second mirror allocated where the first one was freed fails with
    cudaErrorHostMemoryAlreadyRegistered (and poisons the tests after it).
    """
    from sglang_dsv4_ext.runtime.index_k import integrity as ii

    if not _STACK:
        _STACK.append(_build_sglang_stack(torch))
    pool, host, anchor = _STACK[0]
    host._dsv4_integrity = ii.IntegrityTracker("full", list(host.device_buffers), host.num_host_pages)
    return pool, host, anchor


def _build_sglang_stack(torch):
    from sglang.srt.mem_cache.hicache_storage import PoolName
    from sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler import _dsv4_indexer_regions
    from sglang.srt.mem_cache.memory_pool_host import DeepSeekV4PagedHostPool, LogicalHostPool
    from sglang.srt.mem_cache.pool_host import HostPoolGroup, PoolEntry

    from sglang_dsv4_ext.runtime.hooks import integrity
    from sglang_dsv4_ext.runtime.index_k import integrity as ii
    from tests.support.dsv4_pools import small_pool

    tokens = (ROWS + 1) * PAGE
    pool = small_pool((0, 4, 128, 4), tokens=tokens, page_size=PAGE, device="cuda")
    (region,) = _dsv4_indexer_regions(pool, PAGE)
    host = DeepSeekV4PagedHostPool(
        pool_name=str(region.name),
        device_buffers=region.device_buffers,
        item_bytes=region.item_bytes,
        num_host_pages=2 * ROWS,
        slot_page_size=PAGE,
        layout="layer_first",
        pin_memory=True,
        page_aligned_only=region.page_aligned_only,
    )
    host._dsv4_integrity = ii.IntegrityTracker("full", list(region.device_buffers), host.num_host_pages)
    anchor = LogicalHostPool(2 * ROWS * PAGE, PAGE)
    group = HostPoolGroup(
        [
            PoolEntry(PoolName.KV, anchor, pool, lambda layer: layer, is_primary_index_anchor=True),
            PoolEntry(region.name, host, pool.c4_indexer_kv_pool, lambda layer: layer),
        ]
    )
    integrity._after_group_init(None, group, group.entries)  # what the HostPoolGroup.__init__ hook does
    return pool, host, anchor


@pytest.mark.parametrize("io_backend", ["direct", "kernel"])
def test_integrity_hooks_on_sglangs_pools_never_block_the_host(sglang_gpu, cuda, io_backend):
    """The hook functions themselves (called as HookRegistry calls them after SGLang's method returned; the
    transfers are not under test here), with the indices each io backend hands them."""
    from sglang_dsv4_ext.runtime.hooks import integrity

    torch = cuda.torch
    pool, host, anchor = _sglang_stack(torch)
    tracker = integrity.tracker_of(host)
    c4_layers = [i for i, m in enumerate(pool.layer_mapping) if m is not None and m.compress_ratio == 4]
    host_tokens = _indices(torch, io_backend, range(0, 4 * PAGE))  # host pages 0..3
    device_tokens = _indices(torch, io_backend, range(PAGE, 5 * PAGE))  # device pages 1..4
    batch = types.SimpleNamespace(token_to_kv_pool=pool, rids=["req-2"])
    backup, load, reader = (torch.cuda.Stream() for _ in range(3))
    anchor_pages = _indices(torch, "direct", range(8 * PAGE, 9 * PAGE))  # the anchor's own indices: host memory
    host_freed = _indices(torch, io_backend, range(9 * PAGE, 10 * PAGE))  # made outside the held cycle (see above)

    def cycle():
        with torch.cuda.stream(backup):
            integrity._after_backup(None, host, pool.c4_indexer_kv_pool, host_tokens, device_tokens, io_backend)
        integrity._after_anchor_free(None, anchor, anchor_pages)
        integrity._after_anchor_alloc(anchor_pages, anchor, PAGE)
        integrity._after_free(None, host, host_freed)
        load.wait_stream(backup)
        with torch.cuda.stream(load):
            for layer in range(host.layer_num):
                integrity._after_load_layer(
                    None, host, pool.c4_indexer_kv_pool, host_tokens, device_tokens, layer, io_backend
                )
        reader.wait_stream(load)
        with torch.cuda.stream(reader):
            for model_layer in c4_layers:
                integrity._after_c4_indexer_forward(
                    None, types.SimpleNamespace(layer_id=model_layer), None, None, batch, None
                )

    cycle()  # warm-up (Triton compiles)
    tracker.drain()
    checked = tracker.pages_checked
    assert checked == 4 * host.layer_num and tracker.mismatches == 0
    with _host_must_not_wait(cuda, [backup, load, reader, torch.cuda.current_stream()]):
        cycle()
    tracker.drain()
    assert tracker.pages_checked == checked + 4 * host.layer_num and tracker.mismatches == 0
