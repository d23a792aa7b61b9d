"""bf16 index-K data path hooks inside SGLang's DSV4 C4 indexer, on CPU.

Every method called here is SGLang 0.5.23's real (hooked) class function, run on stand-in
instances (``tests/support/indexer_doubles.py``) that carry a REAL DSV4 pool built through SGLang's
configurator and builder. Stubbed, because they are CUDA-only launches: our Triton launchers
(``kernels_sm120.*``; they need a GPU or Triton's interpreter, tested in
``tests/unit/kernels_sm120/test_semantics.py``, and run interpreted end to end in section 4
here), SGLang's JIT kernels (``compress_forward``, ``compress_norm_rope_store``,
``fused_q_indexer_rope_hadamard_*``, the paged-MQA schedule) and DeepGEMM. Where a test checks numerics the
stub of our kernel is the float64 reference of
``kernels_sm120.reference``; SGLang's top-k transform (torch backend) is real.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch
from sglang.srt.layers.attention.dsv4 import compressor_v2 as sg_compressor
from sglang.srt.layers.attention.dsv4 import indexer as sg_indexer
from sglang.srt.layers.attention.dsv4 import metadata as sg_metadata
from sglang.srt.model_executor.forward_batch_info import ForwardMode

from kernels_sm120 import reference
from sglang_dsv4_ext import errors
from sglang_dsv4_ext.runtime import activation
from sglang_dsv4_ext.runtime.hooks import indexer as indexer_patch
from sglang_dsv4_ext.runtime.index_k.dtype import index_k_bytes_per_token
from tests.support import indexer_doubles as dbl
from tests.support.dsv4_pools import sized_pool
from tests.support.gate_doubles import StreamWaits
from tests.support.triton_interpreter import all_kernel_modules, interpreted_kernels

C4IndexerBackendMixin = sg_indexer.C4IndexerBackendMixin
CompressorBackendMixin = sg_compressor.CompressorBackendMixin
C4Indexer = sg_indexer.C4Indexer

RATIO_MODE = dict(swa_full_tokens_ratio=0.1, _swa_full_tokens_ratio_explicitly_set=True)
LAYER = dbl.FIRST_C4_LAYER
Q_LORA_RANK = 32  # the stand-in wq_b / weights_proj input width (V4-Flash: 1024 / 4096)
HOOKED = {
    "forward_indexer_compressor": (CompressorBackendMixin, indexer_patch._around_forward_unified),
    "compute_q": (C4Indexer, indexer_patch._around_compute_q),
    "forward_c4_indexer": (C4IndexerBackendMixin, indexer_patch._around_forward_c4_indexer),
    "_can_use_nonpaged_indexer": (C4IndexerBackendMixin, indexer_patch._around_can_use_nonpaged),
}


@contextlib.contextmanager
def dsv4_pool(monkeypatch, dtype: str, **server_args):
    """A real DSV4 pool whose c4 indexer stores ``dtype`` index-K (fp4: SGLang's own flag)."""
    if dtype == "fp4":
        monkeypatch.delenv("SGLANG_DSV4_INDEX_K_DTYPE", raising=False)
        server_args["enable_deepseek_v4_fp4_indexer"] = True
    else:
        monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", dtype)
    with sized_pool(**RATIO_MODE, **server_args) as (_, _, pool):
        yield pool


def paged_metadata(page_table, seq_lens, monkeypatch=None, *, sm120_row_cap=None):
    """SGLang's real ``PagedIndexerMetadata`` (its schedule kernels stubbed, see CudaStubs).

    ``sm120_row_cap``: build it as on an SM120 card whose DeepGEMM row cap is this small, so
    SGLang itself splits the forward into row chunks (a list of schedules + rows_per_chunk).
    """
    if sm120_row_cap is not None:
        monkeypatch.setattr(sg_metadata, "_IS_SM120", True)
        monkeypatch.setattr(sg_metadata, "_SM120_INDEXER_M_CHUNK", sm120_row_cap)
    return sg_metadata.PagedIndexerMetadata(
        page_size=256,
        compressed_page_size=dbl.C4_PAGE,
        page_table=page_table,
        compressed_seq_lens=seq_lens,
        use_topk_v2=False,
    )


def forward_metadata(indexer_metadata=None, *, rows=0, topk=512, positions=None, plan=None, out_loc=None):
    core = SimpleNamespace(
        positions=positions if positions is not None else torch.zeros(rows, dtype=torch.int64),
        c4_sparse_page_indices=torch.full((rows, topk), -7, dtype=torch.int32),  # stale values to overwrite
        c4_sparse_raw_indices=None,
        c4_out_loc=out_loc,
    )
    return SimpleNamespace(indexer_metadata=indexer_metadata, core_metadata=core, c4_compress_metadata=plan)


def same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def slot_of(page_table_row: torch.Tensor, i: int) -> int:
    return int(page_table_row[i // dbl.C4_PAGE]) * dbl.C4_PAGE + i % dbl.C4_PAGE


# ---------------------------------------------------------------------------------------
# 1. Dispatch on the real classes: bf16 -> our kernels, fp8/fp4 -> SGLang's own code
# ---------------------------------------------------------------------------------------


def test_the_real_class_functions_carry_our_hooks(ext_active):
    for name, (cls, hook_fn) in HOOKED.items():
        assert activation.carries_hook(cls.__dict__[name], hook_fn), f"{cls.__name__}.{name} is not hooked"
    # forward_core_compressor (the attention compressor) stays SGLang's: only the indexer alias is hooked.
    assert not activation.carries_hook(
        CompressorBackendMixin.forward_core_compressor, indexer_patch._around_forward_unified
    )


def test_compute_q_bf16_uses_our_index_q_kernel(stubs, monkeypatch, rng):
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", "bf16")  # what the source form (patches/0006) decides from
    freqs = dbl.rope_table()
    ix = dbl.c4_indexer(layer_id=LAYER, q_lora_rank=Q_LORA_RANK, freqs_cis=freqs, generator=rng)
    q_lora = torch.randn(5, Q_LORA_RANK, generator=rng).to(torch.bfloat16)
    weight = torch.randn(5, dbl.N_HEADS, generator=rng).to(torch.bfloat16)
    positions = torch.tensor([0, 7, 100, 2047, 31])

    with indexer_patch.index_k_pool_scope(True):  # what forward_c4_indexer decides for a bf16 pool
        q_out, w_out = C4Indexer.compute_q(ix, q_lora, positions, weight)

    assert stubs.called("index_q_bf16") == 1 and stubs.called("fused_q_fp8") == 0 and stubs.called("fused_q_fp4") == 0
    call = stubs.calls["index_q_bf16"][0]
    q_proj = torch.nn.functional.linear(q_lora, ix.wq_b.weight)
    assert torch.equal(call["q"].reshape(5, -1), q_proj) and call["weight_scale"] == ix.weight_scale
    q_ref, w_ref = reference.index_q_reference(q_proj, weight, ix.weight_scale, freqs, positions)
    assert q_out.dtype == torch.bfloat16 and q_out.shape == (5, dbl.N_HEADS, dbl.HEAD_DIM)
    assert torch.equal(q_out, q_ref.to(torch.bfloat16))
    # SGLang's contract: weights [N, H, 1], here weight * weight_scale (no fp8 q scale folded in).
    assert w_out.shape == (5, dbl.N_HEADS, 1) and w_out.dtype == torch.float32
    torch.testing.assert_close(w_out.squeeze(-1).double(), w_ref)


@pytest.mark.parametrize("dtype", ["fp8", "fp4"])
def test_compute_q_fp8_fp4_stay_on_sglang_kernels(stubs, monkeypatch, rng, dtype):
    ix = dbl.c4_indexer(
        layer_id=LAYER,
        q_lora_rank=Q_LORA_RANK,
        freqs_cis=dbl.rope_table(),
        use_fp4_indexer=dtype == "fp4",
        generator=rng,
    )
    q_lora = torch.randn(3, Q_LORA_RANK, generator=rng).to(torch.bfloat16)
    weight = torch.randn(3, dbl.N_HEADS, generator=rng).to(torch.bfloat16)

    q_out, w_out = C4Indexer.compute_q(ix, q_lora, torch.arange(3), weight)

    sglang_kernel = "fused_q_fp4" if dtype == "fp4" else "fused_q_fp8"
    assert stubs.called(sglang_kernel) == 1 and stubs.called("index_q_bf16") == 0
    call = stubs.calls[sglang_kernel][0]
    assert call["weight"] is weight and call["weight_scale"] == ix.weight_scale
    if dtype == "fp8":
        assert q_out.dtype == torch.float8_e4m3fn  # exactly what SGLang's kernel returned
    else:
        q_fp4, q_sf = q_out
        assert q_fp4.dtype == torch.uint8 and q_sf.shape == (3, dbl.N_HEADS)


def test_compute_q_bf16_env_with_sglang_fp4_indexer_stays_fp4(stubs, monkeypatch, rng):
    """A C4Indexer built with SGLang's fp4 flag never takes the bf16 query path."""
    ix = dbl.c4_indexer(
        layer_id=LAYER, q_lora_rank=Q_LORA_RANK, freqs_cis=dbl.rope_table(), use_fp4_indexer=True, generator=rng
    )
    with indexer_patch.index_k_pool_scope(True):
        C4Indexer.compute_q(
            ix,
            torch.zeros(2, Q_LORA_RANK, dtype=torch.bfloat16),
            torch.arange(2),
            torch.zeros(2, dbl.N_HEADS, dtype=torch.bfloat16),
        )
    assert stubs.called("fused_q_fp4") == 1 and stubs.called("index_q_bf16") == 0


@pytest.mark.parametrize("pool_dtype,env_later", [("bf16", "fp8"), ("fp8", "bf16")])
def test_query_dtype_follows_the_pool_not_the_environment(stubs, monkeypatch, rng, pool_dtype, env_later):
    """compute_q takes forward_c4_indexer's decision from the pool; the environment is not re-read per call.

    The pool is built with one dtype, then the variable says the other (a child that inherited a
    different environment, or a test harness flipping it). Before, compute_q re-read the variable
    per call: bf16 queries went into SGLang's fp8 logits (or fp8 queries into ours).
    """
    with dsv4_pool(monkeypatch, pool_dtype) as pool:
        backend, ix, x, _ = _indexer_call(pool, rng)
        monkeypatch.setenv("SGLANG_DSV4_INDEX_K_DTYPE", env_later)
        _forward_c4_indexer(backend, ix, x)
    if pool_dtype == "bf16":
        assert [stubs.called(k) for k in ("index_q_bf16", "paged_mqa_logits_bf16", "fused_q_fp8")] == [1, 1, 0]
    else:
        assert [stubs.called(k) for k in ("index_q_bf16", "paged_mqa_logits_bf16", "fused_q_fp8")] == [0, 0, 1]
        assert stubs.called("deep_gemm_fp8_logits") == 1
    # Outside forward_c4_indexer no pool decision is in scope: SGLang's own query path.
    C4Indexer.compute_q(ix, x, torch.arange(x.shape[0]), torch.zeros(x.shape[0], dbl.N_HEADS, dtype=torch.bfloat16))
    assert stubs.called("index_q_bf16") == (1 if pool_dtype == "bf16" else 0)


def test_nonpaged_indexer_is_never_chosen_for_bf16(stubs, monkeypatch):
    """On inputs where SGLang picks its non-paged (fp8 gather + DeepGEMM) path, bf16 says no.

    SGLang answers False on any non-CUDA platform before reading its inputs, so the platform
    probes are stubbed to "CUDA, not capturing" (this box has no CUDA driver): SGLang's own
    function then answers True for the fp8 pool, and the hook answers False for bf16.
    """
    monkeypatch.setattr(sg_indexer, "is_cuda", lambda: True)
    monkeypatch.setattr(sg_indexer, "is_hip", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    answers = {}
    for dtype in ("fp8", "bf16"):
        with dsv4_pool(monkeypatch, dtype) as pool:
            md = paged_metadata(torch.ones(1, 4, dtype=torch.int32), torch.tensor([200], dtype=torch.int32))
            backend = dbl.BackendStandIn(pool, forward_metadata(md, rows=1))
            ix = dbl.c4_indexer(layer_id=LAYER, q_lora_rank=Q_LORA_RANK, freqs_cis=dbl.rope_table())
            answers[dtype] = C4IndexerBackendMixin._can_use_nonpaged_indexer(
                backend, c4_indexer=ix, forward_batch=dbl.forward_batch(ForwardMode.EXTEND), indexer_metadata=md
            )
    assert answers == {"fp8": True, "bf16": False}


def _forward_c4_indexer(backend, ix, x, mode=ForwardMode.DECODE):
    """SGLang's forward_c4_indexer on ``x`` (also the q_lora) with the compressor skipped, as the backend calls it."""
    C4IndexerBackendMixin.forward_c4_indexer(
        backend, x=x, q_lora=x, c4_indexer=ix, forward_batch=dbl.forward_batch(mode), skip_compressor=True
    )


def _indexer_call(pool, rng, *, rows=4, fp4=False):
    """Backend + C4Indexer + inputs for one paged forward_c4_indexer call over ``rows`` queries."""
    pages = pool.get_index_k_with_scale_buffer(LAYER).shape[0]
    page_table = (torch.arange(rows * 4, dtype=torch.int32).view(rows, 4) % (pages - 1)) + 1
    seq_lens = torch.tensor([100, 3, 256, 17][:rows], dtype=torch.int32)
    md = paged_metadata(page_table, seq_lens)
    backend = dbl.BackendStandIn(pool, forward_metadata(md, rows=rows, topk=8), fp4_indexer=fp4)
    ix = dbl.c4_indexer(
        layer_id=LAYER, q_lora_rank=Q_LORA_RANK, freqs_cis=dbl.rope_table(), use_fp4_indexer=fp4, generator=rng
    )
    x = torch.randn(rows, Q_LORA_RANK, generator=rng).to(torch.bfloat16)
    return backend, ix, x, md


@pytest.mark.parametrize("dtype", ["bf16", "fp8", "fp4"])
def test_forward_c4_indexer_dispatch(stubs, monkeypatch, rng, dtype):
    with dsv4_pool(monkeypatch, dtype) as pool:
        backend, ix, x, md = _indexer_call(pool, rng, fp4=dtype == "fp4")
        layer_buffer = pool.get_index_k_with_scale_buffer(LAYER)

        _forward_c4_indexer(backend, ix, x)

    out = backend.forward_metadata.core_metadata.c4_sparse_page_indices
    assert not (out == -7).any()  # SGLang's top-k transform wrote every row
    if dtype == "bf16":
        assert [stubs.called(k) for k in ("index_q_bf16", "paged_mqa_logits_bf16")] == [1, 1]
        assert stubs.called("deep_gemm_fp8_logits") == stubs.called("deep_gemm_fp4_logits") == 0
        assert stubs.called("fused_q_fp8") == stubs.called("fused_q_fp4") == 0
        call = stubs.calls["paged_mqa_logits_bf16"][0]
        assert call["q"].dtype == torch.bfloat16 and call["q"].shape == (4, dbl.N_HEADS, dbl.HEAD_DIM)
        assert call["index_k_cache"] is layer_buffer  # the whole layer, 256-B rows, no fp8 view
        assert call["max_seq_len"] == md.max_compressed_seq_len
        return
    for ours in dbl.CudaStubs.OURS:
        assert stubs.called(ours) == 0, ours
    name = "deep_gemm_fp4_logits" if dtype == "fp4" else "deep_gemm_fp8_logits"
    row_bytes = index_k_bytes_per_token(dtype, dbl.HEAD_DIM)
    assert stubs.called(name) == 1
    call = stubs.calls[name][0]
    # SGLang's own view of its own layout, on the pool's buffer of this layer.
    assert tuple(call["kv_cache"].shape) == (layer_buffer.shape[0], 64, 1, row_bytes)
    assert same_storage(call["kv_cache"], layer_buffer)
    assert call["schedule"] is md.deep_gemm_metadata
    # The stub's logits rise with the position: SGLang's top-k keeps each row's last 8 keys.
    row0 = out[0].tolist()
    assert sorted(row0) == sorted(slot_of(md.page_table[0], i) for i in range(92, 100))


@pytest.mark.parametrize("dtype", ["bf16", "fp8", "fp4"])
def test_forward_indexer_compressor_dispatch(stubs, monkeypatch, rng, dtype):
    with dsv4_pool(monkeypatch, dtype) as pool:
        plan = dbl.decode_plan([8, 9])
        backend = dbl.BackendStandIn(
            pool, forward_metadata(plan=plan, out_loc=torch.tensor([70, 0])), fp4_indexer=dtype == "fp4"
        )
        comp = dbl.IndexerCompressorStandIn(layer_id=LAYER, freqs_cis=dbl.rope_table(), generator=rng)
        layer_buffer = pool.get_index_k_with_scale_buffer(LAYER)

        CompressorBackendMixin.forward_indexer_compressor(
            backend,
            x=torch.zeros(2, 8),
            forward_batch=dbl.forward_batch(ForwardMode.DECODE),
            layer_id=LAYER,
            compressor=comp,
        )

    assert stubs.called("compress_forward") == 1  # SGLang's compressor kernel in both paths
    assert stubs.calls["compress_forward"][0]["plan"] is plan
    if dtype == "bf16":
        assert stubs.called("store_index_k_bf16") == 1 and stubs.called("compress_norm_rope_store") == 0
        assert stubs.calls["store_index_k_bf16"][0]["index_k_cache"] is layer_buffer
        return
    assert stubs.called("store_index_k_bf16") == 0 and stubs.called("compress_norm_rope_store") == 1
    call = stubs.calls["compress_norm_rope_store"][0]
    assert same_storage(call["kvcache"], layer_buffer) and call["use_fp4"] == (dtype == "fp4")


def test_attention_compressor_passes_through_on_a_bf16_pool(stubs, monkeypatch, rng):
    """The hooked alias only diverts the c4 indexer's compressor; another compressor on it runs stock."""
    with dsv4_pool(monkeypatch, "bf16") as pool:
        backend = dbl.BackendStandIn(pool, forward_metadata(plan=dbl.decode_plan([8]), out_loc=torch.tensor([3])))
        comp = dbl.IndexerCompressorStandIn(
            layer_id=LAYER, freqs_cis=dbl.rope_table(), generator=rng, is_in_indexer=False, head_dim=512
        )
        CompressorBackendMixin.forward_indexer_compressor(
            backend, torch.zeros(1, 8), dbl.forward_batch(ForwardMode.DECODE), LAYER, comp
        )
        assert stubs.called("store_index_k_bf16") == 0 and stubs.called("compress_norm_rope_store") == 1
        assert same_storage(stubs.calls["compress_norm_rope_store"][0]["kvcache"], pool.get_extra_key_buffer(LAYER))


def test_idle_batches_do_nothing(stubs, monkeypatch, rng):
    with dsv4_pool(monkeypatch, "bf16") as pool:
        backend, ix, x, _ = _indexer_call(pool, rng)
        comp = dbl.IndexerCompressorStandIn(layer_id=LAYER, freqs_cis=dbl.rope_table(), generator=rng)
        idle = dbl.forward_batch(ForwardMode.IDLE)
        C4IndexerBackendMixin.forward_c4_indexer(backend, x=x, q_lora=x, c4_indexer=ix, forward_batch=idle)
        CompressorBackendMixin.forward_indexer_compressor(backend, x, idle, LAYER, comp)
    assert set(stubs.calls) == {"paged_mqa_schedule"}  # only building the metadata ran


# ---------------------------------------------------------------------------------------
# 2. End to end on CPU: bf16 keys in the real pool -> logits -> SGLang's torch top-k
# ---------------------------------------------------------------------------------------


def _random_paged_batch(pool, rng, seq_lens, width):
    """Random bf16 index-K in every slot of pages 1.. of layer LAYER, and one page table per row."""
    pages = pool.get_index_k_with_scale_buffer(LAYER).shape[0]
    slots = torch.arange(dbl.C4_PAGE, pages * dbl.C4_PAGE)
    pool.set_index_k_fused(LAYER, slots, torch.randn(slots.numel(), dbl.HEAD_DIM, generator=rng).to(torch.bfloat16))
    page_table = torch.stack([torch.randperm(pages - 1, generator=rng)[:width] + 1 for _ in seq_lens]).to(torch.int32)
    return page_table, torch.tensor(seq_lens, dtype=torch.int32)


def _expected_page_indices(q, weights, pool, page_table, seq_lens, topk):
    """Top-k of the float64 reference logits, as pool slots; sequential (then -1) for short rows."""
    cache_rows = reference.index_k_cache_as_rows(pool.get_index_k_with_scale_buffer(LAYER))
    max_len = page_table.shape[1] * dbl.C4_PAGE
    logits = reference.paged_mqa_logits_reference(q, cache_rows, weights, seq_lens, page_table, max_len)
    expected = []
    for r, n in enumerate(seq_lens.tolist()):
        if n <= topk:  # SGLang takes every key of a short row in order, pads with -1
            expected.append([slot_of(page_table[r], i) for i in range(n)] + [-1] * (topk - n))
        else:
            expected.append(sorted(slot_of(page_table[r], i) for i in logits[r, :n].topk(topk).indices.tolist()))
    return expected


@pytest.mark.parametrize(
    "topk,seq_lens,width",
    [
        (8, [0, 5, 8, 9, 100, 300], 16),
        (512, [1000, 700, 513, 512, 40, 0], 16),
    ],
    ids=["k8", "k512"],
)
@pytest.mark.parametrize("chunked", [False, True], ids=["one-call", "row-chunks"])
def test_paged_bf16_branch_selects_reference_topk(stubs, monkeypatch, rng, topk, seq_lens, width, chunked):
    with dsv4_pool(monkeypatch, "bf16") as pool:
        page_table, lens = _random_paged_batch(pool, rng, seq_lens, width)
        md = paged_metadata(page_table, lens, monkeypatch, sm120_row_cap=2 if chunked else None)
        rows = len(seq_lens)
        positions = lens.long() * 4 + 3
        backend = dbl.BackendStandIn(pool, forward_metadata(md, rows=rows, topk=topk, positions=positions))
        freqs = dbl.rope_table()
        ix = dbl.c4_indexer(layer_id=LAYER, q_lora_rank=Q_LORA_RANK, freqs_cis=freqs, generator=rng)
        x = torch.randn(rows, Q_LORA_RANK, generator=rng).to(torch.bfloat16)
        q_lora = torch.randn(rows, Q_LORA_RANK, generator=rng).to(torch.bfloat16)

        C4IndexerBackendMixin.forward_c4_indexer(
            backend,
            x=x,
            q_lora=q_lora,
            c4_indexer=ix,
            forward_batch=dbl.forward_batch(ForwardMode.EXTEND),
            skip_compressor=True,
        )

        # What the queries are: SGLang's wq_b / weights_proj, then RoPE + Hadamard (float64 -> bf16).
        q_ref, w_ref = reference.index_q_reference(
            ix.wq_b(q_lora)[0], ix.weights_proj(x)[0], ix.weight_scale, freqs, positions
        )
        q_bf16, w32 = q_ref.to(torch.bfloat16), w_ref.float()
        expected = _expected_page_indices(q_bf16, w32, pool, page_table, lens, topk)

    out = backend.forward_metadata.core_metadata.c4_sparse_page_indices
    assert out.shape == (rows, topk)
    for r, n in enumerate(seq_lens):
        got = out[r].tolist()
        assert (got if n <= topk else sorted(got)) == expected[r], f"row {r} (length {n})"

    calls = stubs.calls["paged_mqa_logits_bf16"]
    if chunked:
        assert md.rows_per_chunk == 2 and isinstance(md.deep_gemm_metadata, list) and len(md.deep_gemm_metadata) == 3
    chunks = [slice(s, min(s + 2, rows)) for s in range(0, rows, 2)] if chunked else [slice(0, rows)]
    assert len(calls) == len(chunks)
    for call, rows_slice in zip(calls, chunks):
        assert torch.equal(call["q"], q_bf16[rows_slice])
        assert torch.equal(call["page_table"], page_table[rows_slice])
        assert torch.equal(call["seq_lens"], lens[rows_slice])
        assert call["max_seq_len"] == width * dbl.C4_PAGE


# ---------------------------------------------------------------------------------------
# 3. The compressor's store: plan decoding, slots, the gated getter
# ---------------------------------------------------------------------------------------


def _pool_rows(pool):
    return reference.index_k_cache_as_rows(pool.get_index_k_with_scale_buffer(LAYER))


def _run_store(pool, stubs, rng, plan, out_loc, mode):
    backend = dbl.BackendStandIn(pool, forward_metadata(plan=plan, out_loc=out_loc))
    comp = dbl.IndexerCompressorStandIn(layer_id=LAYER, freqs_cis=dbl.rope_table(), generator=rng)
    stubs.compressed_rows = torch.randn(plan[1].shape[0], dbl.HEAD_DIM, generator=rng)  # fp32, like compress_forward
    CompressorBackendMixin.forward_indexer_compressor(
        backend,
        x=torch.zeros(out_loc.numel(), 8),
        forward_batch=dbl.forward_batch(mode),
        layer_id=LAYER,
        compressor=comp,
    )
    return comp


def _assert_only_slots_written(pool, before, comp, rows, expected):
    """``expected``: slot -> (row of compress_forward's output, RoPE position)."""
    after = _pool_rows(pool)
    for slot, (row, position) in expected.items():
        want = reference.index_k_transform_reference(
            rows[row : row + 1], comp.norm.weight, comp.norm.variance_epsilon, comp.freqs_cis, torch.tensor([position])
        )
        assert torch.equal(after[slot], want[0].to(torch.bfloat16)), f"slot {slot}"
    changed = (after != before).any(dim=-1).nonzero().flatten().tolist()
    assert changed == sorted(expected)


def test_store_prefill_plan_writes_each_compressed_row_at_its_ragged_slot(stubs, monkeypatch, rng):
    # Two requests, 11 tokens: A = prefix 3 + 6 new (positions 3..8, ragged 0..5), B = 5 new
    # (positions 0..4, ragged 6..10). Groups close at A's positions 3 and 7 and B's position 3.
    # A CUDA-graph plan pads to 11 rows with invalid rows (ragged id 0): ragged 0 is a real
    # slot here, which the padding must not overwrite.
    out_loc = torch.zeros(11, dtype=torch.int64)
    out_loc[[0, 4, 9]] = torch.tensor([130, 131, 200])
    plan = dbl.prefill_plan([(4, 0), (8, 4), (4, 9)] + [dbl.INVALID] * 8)
    with dsv4_pool(monkeypatch, "bf16") as pool:
        before = _pool_rows(pool).clone()
        comp = _run_store(pool, stubs, rng, plan, out_loc, ForwardMode.EXTEND)
        _assert_only_slots_written(pool, before, comp, stubs.compressed_rows, {130: (0, 0), 131: (1, 4), 200: (2, 0)})
        state = pool.get_indexer_compress_states(LAYER).kv_score_buffer.kv_score

    call = stubs.calls["compress_forward"][0]
    assert call["kv_score_input"] is comp.kv_score_input and call["is_online"] is False
    assert call["compress_ratio"] == 4 and call["head_dim"] == 128
    assert call["kv_score_buffer"].shape[1:] == (4, 512) and same_storage(call["kv_score_buffer"], state)
    assert same_storage(call["ape"], comp.ape) and call["ape"].shape == (8, 128)


def test_store_decode_plan_writes_only_rows_that_close_a_group(stubs, monkeypatch, rng):
    # Four decoding requests at lengths 8, 9, 12, 6: only 8 and 12 close a 4-token group
    # (RoPE positions 4 and 8); the others carry out_loc 0, the dummy slot, and write nothing.
    out_loc = torch.tensor([140, 0, 141, 0])
    with dsv4_pool(monkeypatch, "bf16") as pool:
        marker = torch.full((1, dbl.HEAD_DIM), 3.0, dtype=torch.bfloat16)
        pool.set_index_k_fused(LAYER, torch.tensor([0]), marker)
        before = _pool_rows(pool).clone()
        comp = _run_store(pool, stubs, rng, dbl.decode_plan([8, 9, 12, 6]), out_loc, ForwardMode.DECODE)
        _assert_only_slots_written(pool, before, comp, stubs.compressed_rows, {140: (0, 4), 141: (2, 8)})
        assert torch.equal(_pool_rows(pool)[0], marker[0])


def test_store_writes_through_the_gated_getter_after_the_layer_load(stubs, monkeypatch, rng):
    """A HiCache load of this layer is pending: the store's buffer comes from SGLang's gated
    top-level getter, which makes the stream wait for the layer's load event first."""
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_GATE", "strict")
    with dsv4_pool(monkeypatch, "bf16") as pool:
        waits = StreamWaits.on(pool)
        waits.start_load()
        getter_calls = []
        class_getter = type(pool).get_index_k_with_scale_buffer  # SGLang's (gate hooks included)

        def observed_getter(layer_id):
            buffer = class_getter(pool, layer_id)
            getter_calls.append((layer_id, waits.covered(), buffer))
            return buffer

        monkeypatch.setattr(pool, "get_index_k_with_scale_buffer", observed_getter, raising=False)
        _run_store(pool, stubs, rng, dbl.decode_plan([8]), torch.tensor([140]), ForwardMode.DECODE)

    assert len(getter_calls) == 1
    layer_id, covered, buffer = getter_calls[0]
    assert layer_id == LAYER and covered >= LAYER - pool.start_layer  # the stream waited for this layer's load
    assert stubs.calls["store_index_k_bf16"][0]["index_k_cache"] is buffer


def test_logits_read_through_the_gated_getter_after_the_layer_load(stubs, monkeypatch, rng):
    monkeypatch.setenv("SGLANG_DSV4_INDEX_K_GATE", "strict")
    with dsv4_pool(monkeypatch, "bf16") as pool:
        backend, ix, x, _ = _indexer_call(pool, rng)
        waits = StreamWaits.on(pool)
        waits.start_load()
        _forward_c4_indexer(backend, ix, x)
        assert (waits.counter.consumer_index, LAYER) in waits.stream_waits
    assert stubs.called("paged_mqa_logits_bf16") == 1


# ---------------------------------------------------------------------------------------
# 4. Clear errors for what bf16 index-K does not support
# ---------------------------------------------------------------------------------------


def test_bf16_with_hisparse_is_refused(stubs, monkeypatch, rng):
    with dsv4_pool(monkeypatch, "bf16") as pool:
        backend, ix, x, _ = _indexer_call(pool, rng)
        backend.hisparse_coordinator = object()
        with pytest.raises(errors.Bf16IndexKUnsupported, match="HiSparse"):
            C4IndexerBackendMixin.forward_c4_indexer(
                backend, x=x, q_lora=x, c4_indexer=ix, forward_batch=dbl.forward_batch(ForwardMode.DECODE)
            )
    assert all(stubs.called(k) == 0 for k in dbl.CudaStubs.OURS)


def test_bf16_with_the_indexer_topk_capturer_is_refused(stubs, monkeypatch, rng):
    from sglang.srt.state_capturer.indexer_topk import set_global_indexer_capturer

    with dsv4_pool(monkeypatch, "bf16") as pool:
        backend, ix, x, _ = _indexer_call(pool, rng)
        set_global_indexer_capturer(object())
        try:
            with pytest.raises(errors.Bf16IndexKUnsupported, match="capturer"):
                C4IndexerBackendMixin.forward_c4_indexer(
                    backend, x=x, q_lora=x, c4_indexer=ix, forward_batch=dbl.forward_batch(ForwardMode.DECODE)
                )
        finally:
            set_global_indexer_capturer(None)


# ---------------------------------------------------------------------------------------
# 4. End to end with our real kernels (Triton's interpreter on CPU), not their references
# ---------------------------------------------------------------------------------------


@pytest.fixture
def interpreted_ours(stubs, monkeypatch):
    """Our real Triton launchers, run by Triton's interpreter; SGLang's JIT kernels stay stubbed."""
    import kernels_sm120
    from kernels_sm120 import dispatch

    for name in ("store_index_k_bf16", "index_q_bf16", "paged_mqa_logits_bf16"):
        monkeypatch.setattr(kernels_sm120, name, getattr(dispatch, name))
    with interpreted_kernels(*all_kernel_modules()):
        yield stubs


def test_bf16_store_then_select_end_to_end_with_the_real_kernels(interpreted_ours, monkeypatch, rng):
    """Store 128 compressed rows through the compressor hook, then select through forward_c4_indexer.

    Both run SGLang's real hooked class functions on a real pool with our real kernels; the
    expectations come from float64 references of the math applied to the raw inputs, never from
    what the kernels wrote.
    """
    stubs, topk, keys = interpreted_ours, 16, 128
    slots = torch.arange(dbl.C4_PAGE, dbl.C4_PAGE + keys)  # pages 1 and 2
    out_loc = slots.clone()
    plan = dbl.prefill_plan([(4 * (i + 1), i) for i in range(keys)])  # RoPE position of row i: 4 * i
    with dsv4_pool(monkeypatch, "bf16") as pool:
        comp = _run_store(pool, stubs, rng, plan, out_loc, ForwardMode.EXTEND)
        stored = _pool_rows(pool)[slots].double()
        rows_ref = reference.index_k_transform_reference(
            stubs.compressed_rows, comp.norm.weight, comp.norm.variance_epsilon, comp.freqs_cis, torch.arange(keys) * 4
        )
        assert (stored - rows_ref).norm() / rows_ref.norm() < 1e-2  # bf16 storage of the float64 rows

        seq_lens = [keys, 100, 17]
        page_table = torch.tensor([[1, 2]] * len(seq_lens), dtype=torch.int32)
        lens = torch.tensor(seq_lens, dtype=torch.int32)
        md = paged_metadata(page_table, lens)
        positions = torch.tensor([4 * n + 3 for n in seq_lens])
        backend = dbl.BackendStandIn(pool, forward_metadata(md, rows=len(seq_lens), topk=topk, positions=positions))
        freqs = dbl.rope_table()
        ix = dbl.c4_indexer(layer_id=LAYER, q_lora_rank=Q_LORA_RANK, freqs_cis=freqs, generator=rng)
        x = torch.randn(len(seq_lens), Q_LORA_RANK, generator=rng).to(torch.bfloat16)
        q_lora = torch.randn(len(seq_lens), Q_LORA_RANK, generator=rng).to(torch.bfloat16)
        C4IndexerBackendMixin.forward_c4_indexer(
            backend,
            x=x,
            q_lora=q_lora,
            c4_indexer=ix,
            forward_batch=dbl.forward_batch(ForwardMode.EXTEND),
            skip_compressor=True,
        )

    # float64 all the way from the raw inputs: queries, weights, keys, logits, top-k.
    q_ref, w_ref = reference.index_q_reference(
        ix.wq_b(q_lora)[0], ix.weights_proj(x)[0], ix.weight_scale, freqs, positions
    )
    logits = torch.einsum("rhd,td->rht", q_ref.double(), rows_ref.double()).relu()
    logits = (logits * w_ref.double().unsqueeze(-1)).sum(1)
    got = backend.forward_metadata.core_metadata.c4_sparse_page_indices
    for r, n in enumerate(seq_lens):
        want = {int(slots[i]) for i in logits[r, :n].topk(topk).indices.tolist()}
        overlap = len(want & set(got[r].tolist())) / topk
        assert overlap >= 14 / 16, (r, overlap)  # bf16 keys and queries: near ties at the boundary may swap
    assert stubs.called("paged_mqa_logits_bf16") == 0  # the stub was not used: the real kernel ran


def test_row_chunks_built_for_fewer_rows_than_the_queries_are_refused_as_sglang_refuses_them(stubs, monkeypatch, rng):
    """SGLang's paged branch asserts that its row-chunk schedules were built for as many rows as the queries
    have; without the same check the bf16 branch would pair chunk schedules and top-k plans with other rows."""
    with dsv4_pool(monkeypatch, "bf16") as pool:
        page_table, lens = _random_paged_batch(pool, rng, [5, 8, 9, 100], 16)
        md = paged_metadata(page_table, lens, monkeypatch, sm120_row_cap=2)
        rows = 6  # two more query rows than the metadata's four
        backend = dbl.BackendStandIn(pool, forward_metadata(md, rows=rows, topk=8))
        ix = dbl.c4_indexer(layer_id=LAYER, q_lora_rank=Q_LORA_RANK, freqs_cis=dbl.rope_table(), generator=rng)
        x = torch.randn(rows, Q_LORA_RANK, generator=rng).to(torch.bfloat16)
        with pytest.raises(RuntimeError, match="row-chunk schedules were built for 4 rows, got 6 query rows"):
            _forward_c4_indexer(backend, ix, x, ForwardMode.EXTEND)
    assert "paged_mqa_logits_bf16" not in stubs.calls  # refused before any logits were computed
