"""The fp4 route through SGLang's own C4 indexer on a GPU.

SGLang's ``forward_c4_indexer`` over an fp4 c4 pool with SGLang's TileLang switch on (SM120's default), where
stock SGLang raises "DeepSeek V4 FP4 indexer requires DeepGEMM indexer.": with the extension activated and
``SGLANG_DSV4_FP4_LOGITS=triton`` the logits are our fp4 kernel's and SGLang's torch top-k selects from them.

SGLang's own: the pool (``DeepSeekV4TokenToKVPool`` built under ``--enable-deepseek-v4-fp4-indexer``), its
fp4 key store (``set_index_k_fp4``, its Triton kernel), its fp4 q quantizer ``quantize_fp4_indexer_tensor``
(Triton), the backend mixin's ``forward_c4_indexer`` (hooked by ``activation.activate()``) and the top-k.
Skipped: the metadata's DeepGEMM schedule (as SGLang skips it for its torch logits; ours does not read it).
Stood in: SGLang's JIT CUDA kernel ``fused_q_indexer_rope_hadamard_fp4_quant`` (not in the GPU bundle): RoPE
and Hadamard in float64 (``kernels_sm120.reference.index_q_reference``), then SGLang's Triton quantizer
above, weights ``weight * weight_scale``; SGLang's own ``C4Indexer.compute_q`` calls it. The selected slots
are compared with the top-512 of float64 logits over the values SGLang's pool dequantizes
(``get_index_k_dequant``) and over SGLang's q bytes.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from benchmarks.sglang_gpu import indexer_topk as it

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

SGLANGS_ERROR = "DeepSeek V4 FP4 indexer requires DeepGEMM indexer."
SHAPE = it.Shape("decode", "decode", rows=16, pages=32)  # 16 requests, up to 2048 c4 keys each


@pytest.fixture
def fp4_server_args(sglang_gpu):
    """SGLang's server-args context with its fp4 indexer on (the pool reads it at creation)."""
    from sglang.srt.runtime_context import get_context

    override = get_context().override_server_args(
        device="cuda", page_size=it.FULL_PAGE, enable_deepseek_v4_fp4_indexer=True
    )
    override.install()
    yield
    override.restore()


@pytest.fixture
def routed(sglang_gpu, monkeypatch):
    from sglang_dsv4_ext.config import ENV_FP4_LOGITS
    from sglang_dsv4_ext.runtime import activation, compat

    activation.activate()
    monkeypatch.setenv(compat.TILELANG_INDEXER_SWITCH, "True")  # as SM120's model hook sets it
    monkeypatch.setenv(ENV_FP4_LOGITS, "triton")
    return ENV_FP4_LOGITS


def fp4_q_standin(q_values_out: dict):
    """Stand-in for the JIT ``fused_q_indexer_rope_hadamard_fp4_quant``: float64 RoPE + Hadamard, then SGLang's
    own fp4 quantizer; records the float64 values of the q bytes it returns (for the reference)."""
    from sglang.kernels.ops.quantization.fp4_indexer_quant import quantize_fp4_indexer_tensor

    from kernels_sm120 import reference as R

    def compute_q(q, weight, weight_scale, freqs_cis, positions):
        n, h, _ = q.shape
        q_rot, _ = R.index_q_reference(q, torch.ones(n, h, device=q.device), 1.0, freqs_cis, positions, h)
        q_fp4, q_sf = quantize_fp4_indexer_tensor(q_rot.to(torch.bfloat16).flatten(0, 1), rne=True)
        q_fp4, q_sf = q_fp4.view(n, h, 64), q_sf.view(n, h)
        u = q_fp4.view(torch.uint8)
        codes = torch.stack([u & 0x0F, u >> 4], dim=-1).flatten(-2)
        exps = torch.stack([(q_sf >> (8 * g)) & 0xFF for g in range(4)], dim=-1)
        q_values_out["q"] = R.fp4_values(codes, exps)
        weights_out = (weight.reshape(n, h).float() * weight_scale).unsqueeze(-1)
        return (q_fp4, q_sf), weights_out

    return compute_q


def fp4_pool(inp):
    from sglang_dsv4_ext.tools.sglang_cpu import dsv4_model

    pool = dsv4_model.small_pool([4], tokens=(SHAPE.pages + 1) * it.FULL_PAGE, page_size=it.FULL_PAGE, device="cuda")
    assert pool.c4_indexer_kv_pool.use_fp4_indexer, "the pool was not built with SGLang's fp4 layout"
    keys = (inp.kv * (1 + 3 * torch.rand(inp.kv.shape[0], 1, device=inp.kv.device))).to(torch.bfloat16)
    pool.set_index_k_fp4(0, inp.slots, keys)  # SGLang's own fp4 store
    return pool


def run_forward(pool, inp):
    """SGLang's forward_c4_indexer (hooked) over the fp4 pool; the selected slots [rows, 512]."""
    from sglang.srt.layers.attention.dsv4 import indexer as sg_indexer
    from sglang.srt.layers.attention.dsv4 import metadata as sg_metadata
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    from sglang_dsv4_ext.config import environment_override

    # The metadata's DeepGEMM schedule (deep_gemm.get_paged_mqa_logits_metadata, a DeepGEMM op the GPU bundle
    # only stubs) is skipped as SGLang skips it for its torch logits; our fp4 kernel does not read it.
    with environment_override({it.TORCH_LOGITS_ENV: "1"}):
        md = sg_metadata.PagedIndexerMetadata(
            page_size=it.FULL_PAGE,
            compressed_page_size=it.C4_PAGE,
            page_table=inp.page_table,
            compressed_seq_lens=inp.seq_lens,
            use_topk_v2=False,
        )
    core = SimpleNamespace(
        positions=inp.positions,
        c4_out_loc=None,
        c4_sparse_raw_indices=None,
        c4_sparse_page_indices=torch.full((SHAPE.rows, it.TOPK), -7, dtype=torch.int32, device="cuda"),
    )
    backend = it.backend_class()(
        pool, SimpleNamespace(indexer_metadata=md, core_metadata=core, c4_compress_metadata=None)
    )
    backend.enable_deepseek_v4_fp4_indexer = True
    batch = SimpleNamespace(
        forward_mode=ForwardMode.DECODE,
        _original_forward_mode=None,
        tbo_parent_token_range=None,
        batch_size=SHAPE.rows,
        attn_cp_metadata=None,
        seq_lens=None,
        seq_lens_cpu=None,
        extend_seq_lens_cpu=None,
        extend_seq_lens=None,
        extend_start_loc=None,
        extend_num_tokens=None,
        req_pool_indices=None,
    )
    sg_indexer.C4IndexerBackendMixin.forward_c4_indexer(
        backend, x=inp.x, q_lora=inp.q_lora, c4_indexer=inp.indexer, forward_batch=batch, skip_compressor=True
    )
    torch.cuda.synchronize()
    return core.c4_sparse_page_indices.cpu()


def reference_sets(pool, inp, q_values):
    """Per row: the float64 top-512 slots over SGLang's dequantized keys and the q values of its bytes."""
    from kernels_sm120 import reference as R

    n_slots = (SHAPE.pages + 1) * it.C4_PAGE
    keys = pool.c4_indexer_kv_pool.get_index_k_dequant(0, torch.arange(n_slots, device="cuda")).double()
    w = (inp.indexer.weights_proj(inp.x)[0].float() * inp.indexer.weight_scale).double()
    logits = R.paged_mqa_logits_reference(q_values, keys, w, inp.seq_lens, inp.page_table, SHAPE.pages * it.C4_PAGE)
    out = []
    for r in range(SHAPE.rows):
        t = logits[r, : int(inp.seq_lens[r])].topk(min(it.TOPK, int(inp.seq_lens[r]))).indices
        out.append(set((inp.page_table[r, t // it.C4_PAGE].long() * it.C4_PAGE + t % it.C4_PAGE).tolist()))
    return out


def test_where_sglang_raises_the_route_selects_float64s_top_k(fp4_server_args, routed, monkeypatch):
    from sglang.srt.environ import envs

    from sglang_dsv4_ext.runtime.index_k import fp8_logits

    inp = it.make_inputs(SHAPE, seed=3, device="cuda")
    inp.indexer.use_fp4_indexer = True
    q_values: dict = {}
    monkeypatch.setattr(sglang_indexer_module(), "fused_q_indexer_rope_hadamard_fp4_quant", fp4_q_standin(q_values))
    pool = fp4_pool(inp)
    selected = run_forward(pool, inp)
    assert fp8_logits.last_kernel() == fp8_logits.OURS_FP4
    assert envs.SGLANG_OPT_USE_TILELANG_INDEXER.get() is True  # SGLang's switch as it was
    agree = it.agreement(selected, reference_sets(pool, inp, q_values["q"]), inp.seq_lens.cpu())
    assert min(agree) >= 0.98, agree  # near-ties at the 512th logit may swap between fp32 and float64
    assert sum(agree) / len(agree) >= 0.995, agree


def test_with_the_route_off_sglang_raises_as_stock(fp4_server_args, routed, monkeypatch):
    monkeypatch.setenv(routed, "sglang")
    inp = it.make_inputs(SHAPE, seed=4, device="cuda")
    inp.indexer.use_fp4_indexer = True
    monkeypatch.setattr(sglang_indexer_module(), "fused_q_indexer_rope_hadamard_fp4_quant", fp4_q_standin({}))
    pool = fp4_pool(inp)
    with pytest.raises(RuntimeError, match=SGLANGS_ERROR):
        run_forward(pool, inp)


def sglang_indexer_module():
    """SGLang's indexer module: ``C4Indexer.compute_q`` calls the fp4 q quantizer by this module's name."""
    from sglang.srt.layers.attention.dsv4 import indexer

    return indexer
