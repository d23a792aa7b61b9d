"""SGLANG_DSV4_INDEX_K_CAPTURE on a GPU: SGLang's own hooked C4 indexer (benchmarks/sglang_gpu/indexer_topk.py).

The CPU tests (tests/unit/hooks/test_index_k_capture.py) stub the CUDA launches; here the bf16
path runs for real on CUDA (our Triton store and logits, SGLang's torch top-k), so capture's CUDA
side runs too: the sampled row numbers from pinned memory, the gather from the device cache, non-blocking
copies into pinned host memory, the CUDA event the writer thread waits on. Checked against the pool and
against what the indexer selected, never against the capture code's own output; and, under CUDA's sync debug
mode, that a capturing call (and the store's note of its fp32 keys) never makes the host wait for the GPU.
"""

from types import SimpleNamespace

import pytest
import torch

from benchmarks.sglang_gpu import indexer_topk
from sglang_dsv4_ext.config import CaptureConfig, ExtConfig, IndexKDtype, configured

pytestmark = pytest.mark.gpu
REQUESTS = 4


def _expected_slots(inp, row: int) -> torch.Tensor:
    n = int(inp.seq_lens[row])
    t = torch.arange(n)
    table = inp.page_table[row].cpu().long()
    return table[t // indexer_topk.C4_PAGE] * indexer_topk.C4_PAGE + t % indexer_topk.C4_PAGE


def _float64_topk(rec, row: int, k: int):
    q = rec["q"][row].double()  # [H, D]
    keys = rec["k"] if rec["k"].dim() == 2 else rec["k"][row]
    n = int(rec["seq_lens"][row])
    logits = (torch.relu(keys[:n].double() @ q.T) * rec["weights"][row].double()).sum(-1)
    return logits.topk(min(k, n)).indices


def test_capture_on_gpu_holds_the_rows_the_indexer_read(sglang_gpu, tmp_path):
    from sglang_dsv4_ext.runtime import activation
    from sglang_dsv4_ext.runtime.index_k import capture as index_k_capture
    from sglang_dsv4_ext.tools.recall import cli as recall

    activation.activate()
    shape = indexer_topk.SHAPES[0]  # decode: one query row per request
    root = tmp_path / "capture"
    # Capture is decided when the pool is built: the configuration is handed to it, the environment untouched.
    capturing = ExtConfig(index_k_dtype=IndexKDtype.BF16, capture=CaptureConfig(directory=str(root), requests=REQUESTS))
    with configured(capturing):
        pool = indexer_topk.build_pool(IndexKDtype.BF16, shape.pages, "cuda")
        inp = indexer_topk.make_inputs(shape, 0, "cuda")
        indexer_topk.store_bf16(pool, inp)
        selected = indexer_topk.run_indexer(pool, inp, shape, IndexKDtype.BF16).cpu()
    capture = index_k_capture.capture_for(pool)
    assert capture is not None
    capture.flush()
    files = sorted(root.rglob("*.pt"))
    assert len(files) == REQUESTS and capture.writer.failed == 0
    cache = pool.get_index_k_with_scale_buffer(0)
    flat = cache.view(torch.bfloat16).reshape(-1, indexer_topk.HEAD_DIM).cpu()
    agreements = []
    for path in files:
        rec = torch.load(path, map_location="cpu", weights_only=True)
        (row,) = rec["query_rows"].tolist()
        slots = _expected_slots(inp, row)
        assert int(rec["seq_lens"][0]) == slots.numel()
        keys = rec["k"] if rec["k"].dim() == 2 else rec["k"][0]
        assert torch.equal(keys[: slots.numel()], flat[slots])  # exactly the pool rows its page table names
        # The captured q and weights reproduce the indexer's own selection (float64 vs the fp32 kernel).
        picked = _float64_topk(rec, 0, indexer_topk.TOPK)
        ref = set(slots[picked].tolist())
        got = {s for s in selected[row].tolist() if s >= 0}
        agreements.append(len(ref & got) / len(ref))
    assert min(agreements) >= 0.97, agreements
    result = recall.analyse(root, [512])
    by = {(r["format"], r["k"]): r for r in result["rows"]}
    # The keys were stored by the kernel directly, not through the store hook: no fp32 keys, bf16 is the reference.
    assert by[("bf16", 512)]["is_reference"] and by[("fp8", 512)]["reference"] == "bf16"
    assert 0.5 < by[("fp8", 512)]["recall"] < 1.0
    print("\n" + recall.format_table(result), f"\nagreement with the indexer's selection: {agreements}")


def test_a_capturing_call_never_waits_for_the_gpu(sglang_gpu, tmp_path, monkeypatch):
    """``torch.cuda.set_sync_debug_mode("error")`` around the store's note and the indexer call's record: any
    device->host sync (``.cpu()``, ``.item()``, a pageable copy) raises. Every host copy must be pinned. Then the
    writer thread's file passes recall's checks, among them: the Triton store's bf16 rows are the captured fp32
    keys rounded to bf16 (to within one bf16 step)."""
    import kernels_sm120
    from sglang_dsv4_ext.runtime.index_k import capture as index_k_capture
    from sglang_dsv4_ext.tools.recall import capture_files

    shape = indexer_topk.SHAPES[0]  # decode: one row per request, each its own page table
    pool = indexer_topk.build_pool("bf16", shape.pages, "cuda")
    inp = indexer_topk.make_inputs(shape, 1, "cuda")
    cache = pool.get_index_k_with_scale_buffer(0)
    kernels_sm120.store_index_k_bf16(inp.kv, inp.norm_weight, inp.eps, inp.freqs, inp.key_positions, inp.slots, cache)
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(shape.rows, indexer_topk.N_HEADS, indexer_topk.HEAD_DIM, generator=gen).to(torch.bfloat16).cuda()
    weights = torch.randn(shape.rows, indexer_topk.N_HEADS, generator=gen).cuda()
    batch = SimpleNamespace(
        rids=[f"r{i}" for i in range(shape.rows)], batch_size=shape.rows, extend_seq_lens_cpu=None, seq_lens_cpu=None
    )
    capture = index_k_capture.IndexKCapture(
        CaptureConfig(directory=str(tmp_path), requests=REQUESTS), frozenset({0}), tmp_path
    )
    host_copies = []
    to_host = index_k_capture._to_host

    def watched_to_host(t):
        host_copies.append(to_host(t))
        return host_copies[-1]

    monkeypatch.setattr(index_k_capture, "_to_host", watched_to_host)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        capture.note_stored(0, batch, inp.kv, inp.norm_weight, inp.eps, inp.freqs, inp.key_positions, inp.slots)
        capture.record(
            SimpleNamespace(layer_id=0, index_topk=indexer_topk.TOPK),
            batch,
            q,
            weights,
            inp.seq_lens,
            inp.page_table,
            cache,
        )
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert host_copies and all(t.is_pinned() for t in host_copies)
    capture.flush()
    files = sorted(tmp_path.glob("*.pt"))
    assert len(files) == REQUESTS and capture.writer.failed == 0
    for path in files:
        assert capture_files.load(path).k_fp32 is not None
