"""bf16 vs fp8 index-K through SGLang 0.5.23's own C4 indexer on a GPU: top-512 agreement with float64.

What runs: ``C4IndexerBackendMixin.forward_c4_indexer`` (SGLang's, with the extension's activated hooks)
on a real ``DeepSeekV4TokenToKVPool`` on cuda, once over a bf16 index-K pool (the extension's pool hook
builds it when ``SGLANG_DSV4_INDEX_K_DTYPE=bf16`` at pool creation) and once over SGLang's fp8 pool,
from identical inputs (compressed key rows, ``q_lora``, ``x``, positions, page tables):
  * bf16: keys stored by our Triton store (``kernels_sm120.store_index_k_bf16``, what the store hook
    launches) into the buffer from the pool's getter; ``C4Indexer.compute_q`` (hooked: our Triton
    index-Q); the hooked ``forward_c4_indexer`` (our Triton paged logits) and SGLang's torch top-k;
  * fp8: keys by SGLang's own index-K writer ``set_index_k_scale_buffer`` (its Triton kernel), fed
    the keys quantized as SGLang's JIT store does (stand-in below); ``compute_q`` (SGLang's; its JIT
    quantizer stood in below); SGLang's torch logits (``SGLANG_FP8_PAGED_MQA_LOGITS_TORCH=1``) and
    SGLang's torch top-k.
Both paths' selected pool slots are compared with the top-512 of float64 logits over float64 keys and
queries (``kernels_sm120.reference``), per layer shape (decode rows, prefill rows).

Run (GPU):  python -m benchmarks.sglang_gpu.indexer_topk   (--help)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import sys
from dataclasses import dataclass
from types import SimpleNamespace
from typing import NamedTuple

from sglang_dsv4_ext.config import IndexKDtype, configured, environment_override, load_config

N_HEADS = 64  # DeepSeek-V4-Flash index_n_heads
HEAD_DIM = 128
C4_PAGE = 64
FULL_PAGE = 256
TOPK = 512
FP8_E4M3_MAX = 448.0
TORCH_LOGITS_ENV = "SGLANG_FP8_PAGED_MQA_LOGITS_TORCH"


class Shape(NamedTuple):
    name: str
    mode: str  # "decode" | "prefill"
    rows: int
    pages: int  # index-K pages in each row's page table (64 c4 slots each)


SHAPES = (
    Shape("decode", "decode", rows=64, pages=64),  # 64 requests, up to 4096 c4 keys (16K tokens) each
    Shape("prefill", "prefill", rows=256, pages=64),  # one request's 256-token chunk at 15-16K tokens
)


class FP8StandIn(NamedTuple):
    op: str
    called_from: str
    does: str


FP8_PATH_STANDINS = [
    FP8StandIn(
        "SGLang JIT fused_q_indexer_rope_hadamard_quant (kernels/jit/csrc/deepseek_v4/main_norm_rope.cuh)",
        "C4Indexer.compute_q (layers/attention/dsv4/indexer.py), fp8 index-K",
        "RoPE on the last 64 dims and Hadamard/sqrt(128) in float64, then per (token, head) fp32 scale "
        "max(1e-4, amax)/448, e4m3 values; weights_out = weight * weight_scale * scale (the kernel's rule)",
    ),
    FP8StandIn(
        "SGLang JIT fused norm+RoPE+indexer store (fused_norm_rope_v2.cuh, kIsIndexer)",
        "the compressor's index-K store, fp8 pool",
        "RMSNorm, RoPE, Hadamard in float64; per-token fp32 scale max(1e-4, amax)/448, e4m3 values; "
        "written by SGLang's own DeepSeekV4TokenToKVPool.set_index_k_scale_buffer (its Triton kernel)",
    ),
]


def fused_q_fp8_standin(q, weight, weight_scale, freqs_cis, positions):
    """Stand-in for SGLang's JIT ``fused_q_indexer_rope_hadamard_quant`` (see FP8_PATH_STANDINS)."""
    import torch

    from kernels_sm120 import reference

    n, h, _ = q.shape
    q_rot, _ = reference.index_q_reference(q, torch.ones(n, h, device=q.device), 1.0, freqs_cis, positions, h)
    q32 = q_rot.to(torch.float32)
    scale = torch.clamp(q32.abs().amax(-1), min=1e-4) / FP8_E4M3_MAX  # [n, h]
    q_fp8 = (q32 / scale.unsqueeze(-1)).to(torch.float8_e4m3fn)
    weights_out = (weight.reshape(n, h).float() * weight_scale * scale).unsqueeze(-1)
    return q_fp8, weights_out


def fp8_keys(keys_f64):
    import torch

    k32 = keys_f64.to(torch.float32)
    scale = torch.clamp(k32.abs().amax(-1), min=1e-4) / FP8_E4M3_MAX
    return (k32 / scale.unsqueeze(-1)).to(torch.float8_e4m3fn), scale


def with_index_k_dtype(dtype: str):
    """The configuration in force with ``dtype`` index-K, handed to the pool and indexer calls in its body."""
    return configured(dataclasses.replace(load_config(), index_k_dtype=dtype))


class Projection:
    def __init__(self, weight):
        self.weight = weight

    def __call__(self, x):
        import torch.nn.functional as F

        return F.linear(x, self.weight), None


def make_indexer(layer_id: int, q_lora_rank: int, freqs_cis, gen, device):
    """SGLang's real ``C4Indexer`` class, made without weights loading (the attributes compute_q reads)."""
    import torch
    from sglang.srt.layers.attention.dsv4.indexer import C4Indexer

    ix = object.__new__(C4Indexer)
    ix.__dict__.update(
        layer_id=layer_id,
        n_heads=N_HEADS,
        n_local_heads=N_HEADS,
        head_dim=HEAD_DIM,
        index_topk=TOPK,
        use_fp4_indexer=False,
        weight_scale=HEAD_DIM**-0.5 * N_HEADS**-0.5,
        freqs_cis=freqs_cis,
        alt_streams=None,
        compressor=None,
        wq_b=Projection(
            (torch.randn(N_HEADS * HEAD_DIM, q_lora_rank, generator=gen) / math.sqrt(q_lora_rank))
            .to(torch.bfloat16)
            .to(device)
        ),
        weights_proj=Projection(torch.randn(N_HEADS, q_lora_rank, generator=gen).to(torch.bfloat16).to(device)),
    )
    return ix


def backend_class():
    from sglang.srt.layers.attention.dsa.dsa_topk_backend import DSATopKBackend
    from sglang.srt.layers.attention.dsv4.compressor_v2 import CompressorBackendMixin
    from sglang.srt.layers.attention.dsv4.indexer import C4IndexerBackendMixin

    class Backend(C4IndexerBackendMixin, CompressorBackendMixin):
        """SGLang's DSV4 backend reduced to what the indexer mixin reads; every method is SGLang's own."""

        def __init__(self, pool, forward_metadata):
            super().__init__()
            self.token_to_kv_pool = pool
            self.forward_metadata = forward_metadata
            self.dsa_topk_backend = DSATopKBackend.TORCH
            self.hisparse_coordinator = None
            self.enable_deepseek_v4_fp4_indexer = False

    return Backend


def build_pool(dtype: str, pages: int, device: str):
    from sglang_dsv4_ext.tools.sglang_cpu import dsv4_model

    tokens = (pages + 1) * FULL_PAGE
    with with_index_k_dtype(dtype):  # the index-K dtype is decided at pool creation
        return dsv4_model.small_pool([4], tokens=tokens, page_size=FULL_PAGE, device=device)


@dataclass
class Inputs:
    kv: object  # fp32 [slots, 128]: the compressor's output rows (pre norm)
    key_positions: object
    slots: object
    norm_weight: object
    eps: float
    freqs: object
    x: object
    q_lora: object
    positions: object
    seq_lens: object
    page_table: object
    indexer: object


def make_inputs(shape: Shape, seed: int, device: str, q_lora_rank: int = 256) -> Inputs:
    import torch

    gen = torch.Generator().manual_seed(seed)
    max_pos = (shape.pages + 1) * FULL_PAGE + 8
    inv = 10000.0 ** (-torch.arange(0, 64, 2, dtype=torch.float64) / 64)
    angles = torch.outer(torch.arange(max_pos, dtype=torch.float64), inv)
    freqs = torch.polar(torch.ones_like(angles), angles).to(torch.complex64).to(device)
    slots = torch.arange(C4_PAGE, (shape.pages + 1) * C4_PAGE)  # pages 1..pages
    key_positions = (slots - C4_PAGE) * 4 + 3  # compressed token i closes full tokens 4i..4i+3
    kv = torch.randn(slots.numel(), HEAD_DIM, generator=gen)
    kv += 0.5 * torch.randn(1, HEAD_DIM, generator=gen)  # a shared direction, so logits are not pure noise
    rows = shape.rows
    width = shape.pages * C4_PAGE
    if shape.mode == "decode":
        seq_lens = torch.randint(width // 4, width + 1, (rows,), generator=gen)
    else:  # consecutive tokens of one request: c4 length grows by one every 4 tokens
        start = (width - rows // 4) * 4
        seq_lens = (start + torch.arange(rows) + 1) // 4
    page_table = torch.stack([torch.randperm(shape.pages, generator=gen) + 1 for _ in range(rows)]).to(torch.int32)
    positions = seq_lens * 4 - 1
    ix = make_indexer(0, q_lora_rank, freqs, gen, device)
    x = torch.randn(rows, q_lora_rank, generator=gen).to(torch.bfloat16)
    q_lora = torch.randn(rows, q_lora_rank, generator=gen).to(torch.bfloat16)
    return Inputs(
        kv=kv.to(device),
        key_positions=key_positions.to(device),
        slots=slots.to(device),
        norm_weight=(1 + 0.1 * torch.randn(HEAD_DIM, generator=gen)).to(device),
        eps=1e-6,
        freqs=freqs,
        x=x.to(device),
        q_lora=q_lora.to(device),
        positions=positions.to(device),
        seq_lens=seq_lens.to(torch.int32).to(device),
        page_table=page_table.to(device),
        indexer=ix,
    )


def run_indexer(pool, inp: Inputs, shape: Shape, dtype: str):
    """SGLang's forward_c4_indexer (hooked) on ``pool``; returns the selected slots [rows, 512]."""
    import torch

    selected = launch_indexer(pool, inp, shape, dtype)
    torch.cuda.synchronize()
    return selected


def launch_indexer(pool, inp: Inputs, shape: Shape, dtype: str):
    """:func:`run_indexer` without waiting for the GPU (benchmarks/capture_cost.py times the host side)."""
    import torch
    from sglang.srt.layers.attention.dsv4 import indexer as sg_indexer
    from sglang.srt.layers.attention.dsv4 import metadata as sg_metadata
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    with environment_override({TORCH_LOGITS_ENV: "1"}), with_index_k_dtype(dtype):
        md = sg_metadata.PagedIndexerMetadata(
            page_size=FULL_PAGE,
            compressed_page_size=C4_PAGE,
            page_table=inp.page_table,
            compressed_seq_lens=inp.seq_lens,
            use_topk_v2=False,
        )
        core = SimpleNamespace(
            positions=inp.positions,
            c4_out_loc=None,
            c4_sparse_raw_indices=None,
            c4_sparse_page_indices=torch.full((shape.rows, TOPK), -7, dtype=torch.int32, device=inp.x.device),
        )
        backend = backend_class()(
            pool, SimpleNamespace(indexer_metadata=md, core_metadata=core, c4_compress_metadata=None)
        )
        mode = ForwardMode.DECODE if shape.mode == "decode" else ForwardMode.EXTEND
        batch = SimpleNamespace(
            forward_mode=mode,
            _original_forward_mode=None,
            tbo_parent_token_range=None,
            batch_size=shape.rows,
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
    return core.c4_sparse_page_indices


def store_bf16(pool, inp: Inputs) -> None:
    import kernels_sm120

    cache = pool.get_index_k_with_scale_buffer(0)
    kernels_sm120.store_index_k_bf16(inp.kv, inp.norm_weight, inp.eps, inp.freqs, inp.key_positions, inp.slots, cache)


def store_fp8(pool, inp: Inputs) -> None:
    from kernels_sm120 import reference

    keys = reference.index_k_transform_reference(inp.kv, inp.norm_weight, inp.eps, inp.freqs, inp.key_positions)
    k_fp8, scale = fp8_keys(keys)
    pool.set_index_k_scale_buffer(0, inp.slots, k_fp8, scale)


def reference_slots(inp: Inputs, shape: Shape):
    """Per row: the float64 top-512 as pool slots (every slot for rows with <= 512 keys)."""
    import torch

    from kernels_sm120 import reference

    keys = reference.index_k_transform_reference(inp.kv, inp.norm_weight, inp.eps, inp.freqs, inp.key_positions)
    n_slots = (shape.pages + 1) * C4_PAGE
    key_rows = torch.zeros(n_slots, HEAD_DIM, dtype=torch.float64, device=keys.device)
    key_rows[inp.slots] = keys
    q = inp.indexer.wq_b(inp.q_lora)[0]
    w = inp.indexer.weights_proj(inp.x)[0]
    q_ref, w_ref = reference.index_q_reference(q, w, inp.indexer.weight_scale, inp.freqs, inp.positions, N_HEADS)
    max_len = shape.pages * C4_PAGE
    logits = reference.paged_mqa_logits_reference(q_ref, key_rows, w_ref, inp.seq_lens, inp.page_table, max_len)
    out = []
    for r in range(shape.rows):
        n = int(inp.seq_lens[r])
        t = logits[r, :n].topk(min(TOPK, n)).indices
        out.append(set((inp.page_table[r, t // C4_PAGE].long() * C4_PAGE + t % C4_PAGE).tolist()))
    return out


def agreement(selected, ref_sets, seq_lens) -> list[float]:
    values = []
    for r, ref in enumerate(ref_sets):
        got = {s for s in selected[r].tolist() if s >= 0}
        k = min(TOPK, int(seq_lens[r]))
        values.append(len(got & ref) / k if k else 1.0)
    return values


def run(seeds=(0, 1, 2), device: str = "cuda", log=print) -> dict:
    import sglang.srt.layers.attention.dsv4.indexer as sg_indexer
    import torch

    from sglang_dsv4_ext.runtime import activation

    activation.activate()
    rows = []
    original_q = sg_indexer.fused_q_indexer_rope_hadamard_quant
    sg_indexer.fused_q_indexer_rope_hadamard_quant = fused_q_fp8_standin
    try:
        for shape in SHAPES:
            bf16, fp8 = IndexKDtype.BF16, IndexKDtype.FP8
            pools = {d: build_pool(d, shape.pages, device) for d in (bf16, fp8)}
            kinds = {d: type(p.c4_indexer_kv_pool).__name__ for d, p in pools.items()}
            per: dict[str, list[float]] = {d: [] for d in pools}
            both_same = []
            for seed in seeds:
                inp = make_inputs(shape, seed, device)
                store_bf16(pools[bf16], inp)
                store_fp8(pools[fp8], inp)
                ref = reference_slots(inp, shape)
                sel = {d: run_indexer(pools[d], inp, shape, d).cpu() for d in pools}
                for d in per:
                    per[d] += agreement(sel[d], ref, inp.seq_lens.cpu())
                both_same += [
                    float(torch.equal(sel[bf16][r].sort().values, sel[fp8][r].sort().values)) for r in range(shape.rows)
                ]
            for d, vals in per.items():
                rows.append(
                    {
                        "shape": shape.name,
                        "rows": shape.rows * len(seeds),
                        "pages": shape.pages,
                        "index_k": d,
                        "pool": kinds[d],
                        "mean": statistics.mean(vals),
                        "min": min(vals),
                        "p10": statistics.quantiles(vals, n=10)[0] if len(vals) > 1 else vals[0],
                    }
                )
            log(
                f"  {shape.name}: bf16 mean {statistics.mean(per[bf16]):.4f}, fp8 mean "
                f"{statistics.mean(per[fp8]):.4f}; identical selections {sum(both_same):.0f}/{len(both_same)}"
            )
    finally:
        sg_indexer.fused_q_indexer_rope_hadamard_quant = original_q
    return {"rows": rows, "standins": [s._asdict() for s in FP8_PATH_STANDINS]}


def format_table(rows) -> str:
    head = (
        f"{'shape':<8} {'rows':>5} {'keys/row<=':>10} {'index-K':<7} {'pool class':<28} "
        f"{'mean':>7} {'p10':>7} {'min':>7}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['shape']:<8} {r['rows']:>5} {r['pages'] * C4_PAGE:>10} {r['index_k']:<7} {r['pool']:<28} "
            f"{r['mean']:>7.4f} {r['p10']:>7.4f} {r['min']:>7.4f}"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.sglang_gpu.indexer_topk",
        description="Top-512 agreement with a float64 reference of SGLang's C4 indexer over bf16 (ours) and fp8 "
        "(SGLang's torch fallback) index-K, per layer shape, on a GPU.",
    )
    p.add_argument("--seeds", type=int, default=3, help="input draws per shape (default %(default)s)")
    p.add_argument("--out", default=os.environ.get("OUT"), help="folder for the JSON result (default $OUT)")
    args = p.parse_args(argv)
    if args.seeds < 1:
        print(f"indexer_topk: --seeds must be >= 1, got {args.seeds}", file=sys.stderr)
        return 2
    from benchmarks.sglang_gpu import bootstrap

    if not bootstrap.prepare_for_main("indexer_topk"):
        return 2
    result = run(seeds=tuple(range(args.seeds)))
    print(format_table(result["rows"]))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "indexer_topk.json"), "w") as fh:
            json.dump(result, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
