"""Stand-ins and CUDA-launch stubs for the bf16 indexer hook tests (tests/unit/hooks/test_indexer.py).

The SGLang methods under test are always the real (hooked) class functions; what is stood in
here is only what a real server would have built around them:

- :class:`BackendStandIn`: SGLang's DSV4 attention backend reduced to the attributes the
  indexer and compressor mixins read. It subclasses the REAL ``C4IndexerBackendMixin`` and
  ``CompressorBackendMixin``, so every method it runs (hooked or not) is SGLang's own.
- :func:`c4_indexer` / :class:`IndexerCompressorStandIn`: a ``C4Indexer`` made with
  ``object.__new__`` (no weights, no CUDA) and the c4 compressor fields the store reads.
- :func:`decode_plan` / :func:`prefill_plan`: SGLang's real ``CompressorDecodePlan`` /
  ``CompressorPrefillPlan`` tuples holding plan bytes in the C++ struct layouts of
  ``compress_v2.cuh`` (``DecodePlan``, ``CompressPlan``), as SGLang's CUDA planner writes them.
- :class:`CudaStubs`: replacements for the CUDA-only launches the paths reach (our Triton
  launchers, SGLang's JIT kernels, DeepGEMM). Each records its calls; where tests check
  numerics the stub computes with the float64 references of ``kernels_sm120.reference``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from sglang.srt.layers.attention.dsa.dsa_topk_backend import DSATopKBackend
from sglang.srt.layers.attention.dsv4.compressor import Compressor
from sglang.srt.layers.attention.dsv4.compressor_v2 import CompressorBackendMixin
from sglang.srt.layers.attention.dsv4.indexer import C4Indexer, C4IndexerBackendMixin

from kernels_sm120 import reference

N_HEADS = 64  # DeepSeek-V4-Flash index_n_heads
HEAD_DIM = 128  # index_head_dim
C4_PAGE = 64  # compressed slots per index-K page (256 full tokens / 4)
FIRST_C4_LAYER = 2  # V4-Flash: layers 2, 4, 6, ... own a c4 indexer


def rope_table(max_pos: int = 4096, rope_dim: int = 64, base: float = 10000.0) -> torch.Tensor:
    """complex64 ``[max_pos, rope_dim/2]``, the layout of SGLang's ``freqs_cis``."""
    inv = base ** (-torch.arange(0, rope_dim, 2, dtype=torch.float64) / rope_dim)
    angles = torch.outer(torch.arange(max_pos, dtype=torch.float64), inv)
    return torch.polar(torch.ones_like(angles), angles).to(torch.complex64)


class Projection:
    """``ReplicatedLinear`` on CPU: ``(x @ weight.T, None)``."""

    def __init__(self, weight: torch.Tensor):
        self.weight = weight

    def __call__(self, x: torch.Tensor):
        return F.linear(x, self.weight), None


def c4_indexer(
    *,
    layer_id: int,
    q_lora_rank: int,
    freqs_cis: torch.Tensor,
    use_fp4_indexer: bool = False,
    compressor=None,
    generator: torch.Generator | None = None,
) -> C4Indexer:
    """A ``C4Indexer`` (the real class) with the attributes ``compute_q`` / ``compute_weights`` read."""
    g = generator
    indexer = object.__new__(C4Indexer)
    # Plain attributes: nn.Module.__init__ never ran, so bypass Module.__setattr__ bookkeeping.
    indexer.__dict__.update(
        layer_id=layer_id,
        n_heads=N_HEADS,
        n_local_heads=N_HEADS,
        head_dim=HEAD_DIM,
        index_topk=512,
        use_fp4_indexer=use_fp4_indexer,
        weight_scale=HEAD_DIM**-0.5 * N_HEADS**-0.5,  # as C4Indexer.__init__ sets it
        freqs_cis=freqs_cis,
        wq_b=Projection(
            torch.randn(N_HEADS * HEAD_DIM, q_lora_rank, generator=g).div(math.sqrt(q_lora_rank)).to(torch.bfloat16)
        ),
        weights_proj=Projection(torch.randn(N_HEADS, q_lora_rank, generator=g).to(torch.bfloat16)),
        compressor=compressor,
        alt_streams=None,
    )
    return indexer


class IndexerCompressorStandIn:
    """The c4 indexer's ``Compressor``: the fields the store reads, SGLang's own ``get_state_pool``.

    ``compute_kv_score`` (a bf16 GEMM producing the score input of ``compress_forward``)
    returns a fixed marker tensor so the tests can see it reach ``compress_forward``.
    """

    get_state_pool = Compressor.get_state_pool  # the real method: the pool's gated state getter

    def __init__(
        self,
        *,
        layer_id: int,
        freqs_cis: torch.Tensor,
        generator: torch.Generator | None = None,
        is_in_indexer: bool = True,
        head_dim: int = HEAD_DIM,
        ratio: int = 4,
    ):
        self.layer_id = layer_id
        self.is_in_indexer = is_in_indexer
        self.ratio = ratio
        self.head_dim = head_dim
        self.rotate = is_in_indexer
        self.overlap = ratio == 4
        self.ape = torch.randn(ratio, (1 + self.overlap) * head_dim, generator=generator)
        self.norm = SimpleNamespace(weight=1 + 0.1 * torch.randn(head_dim, generator=generator), variance_epsilon=1e-6)
        self.freqs_cis = freqs_cis
        self.kv_score_input = torch.randn(8, 2 * (1 + self.overlap) * head_dim, generator=generator)

    def compute_kv_score(self, x, forward_batch):
        return self.kv_score_input


class BackendStandIn(C4IndexerBackendMixin, CompressorBackendMixin):
    """SGLang's DSV4 backend as the indexer/compressor mixins see it, on a real DSV4 pool."""

    def __init__(
        self, pool, forward_metadata, *, topk_backend: DSATopKBackend = DSATopKBackend.TORCH, fp4_indexer: bool = False
    ):
        super().__init__()  # the mixins' own __init__: topk backend, debug flag, flashinfer transform
        self.token_to_kv_pool = pool
        self.forward_metadata = forward_metadata
        self.dsa_topk_backend = topk_backend
        self.hisparse_coordinator = None
        self.enable_deepseek_v4_fp4_indexer = fp4_indexer


def forward_batch(mode) -> SimpleNamespace:
    """The ForwardBatch fields the indexer/compressor paths read (batch-size-1 extend shape)."""
    return SimpleNamespace(
        forward_mode=mode,
        _original_forward_mode=None,
        tbo_parent_token_range=None,
        batch_size=1,
        attn_cp_metadata=None,
        seq_lens=None,
        seq_lens_cpu=None,
        extend_seq_lens_cpu=None,
        extend_seq_lens=None,
        extend_start_loc=None,
        extend_num_tokens=None,
        req_pool_indices=None,
    )


# --- compressor plans in SGLang's C++ byte layouts ------------------------------------------


def decode_plan(seq_lens: Sequence[int]):
    """``CompressorDecodePlan``; per request
    ``DecodePlan{u32 seq_len, i32 write_loc, i32 read_page_0, i32 read_page_1}``."""
    from sglang.kernels.ops.attention.dsv4 import CompressorDecodePlan

    words = torch.tensor([[s, 0, 0, 0] for s in seq_lens], dtype=torch.int32)
    return CompressorDecodePlan(4, words.view(torch.uint8))


INVALID = None  # a padding row of a CUDA-graph prefill plan (CompressPlan::invalid())


def prefill_plan(entries: Sequence[tuple[int, int] | None]):
    """``CompressorPrefillPlan``; entries are ``(seq_len, ragged_id)`` or :data:`INVALID`.

    ``CompressPlan{u32 seq_len, u16 ragged_id, u16 buffer_len, i32 read_page_0, i32 read_page_1}``;
    the invalid row is ``{0xFFFFFFFF, 0, 0, -1, -1}``.
    """
    from sglang.kernels.ops.attention.dsv4 import CompressorPrefillPlan

    rows = [[-1, 0, -1, -1] if e is None else [e[0], e[1] & 0xFFFF, -1, 0] for e in entries]
    plan_c = torch.tensor(rows, dtype=torch.int32).view(torch.uint8)
    plan_w = torch.zeros(len(rows), 8, dtype=torch.uint8)
    return CompressorPrefillPlan(4, plan_c, plan_w)


# --- CUDA-only launches, stubbed ------------------------------------------------------------


class CudaStubs:
    """Install with :meth:`install`; ``calls[name]`` lists the keyword view of every call.

    Our launchers (``kernels_sm120.*``) need a CUDA device (or Triton's slow interpreter),
    SGLang's ``compress_forward`` / ``compress_norm_rope_store`` / ``fused_q_indexer_rope_*``
    are JIT CUDA kernels, and DeepGEMM needs an NVIDIA GPU. Each stub is installed on the
    module attribute the code under test looks up at call time.
    """

    def __init__(self, monkeypatch):
        self.monkeypatch = monkeypatch
        self.calls: dict[str, list[dict]] = {}
        self.compressed_rows: torch.Tensor | None = None  # what compress_forward returns
        self.schedule_marker = torch.zeros(1, 2, dtype=torch.int32)

    def _record(self, name: str, **kwargs) -> None:
        self.calls.setdefault(name, []).append(kwargs)

    def called(self, name: str) -> int:
        return len(self.calls.get(name, []))

    def install(self) -> CudaStubs:
        import deep_gemm
        import sglang.kernels.ops.attention.dsv4 as sg_dsv4_ops
        import sglang.srt.layers.attention.dsv4.compressor_v2 as compressor_v2
        import sglang.srt.layers.attention.dsv4.indexer as sg_indexer

        import kernels_sm120

        mp = self.monkeypatch
        # ours
        mp.setattr(kernels_sm120, "store_index_k_bf16", self.store_index_k_bf16)
        mp.setattr(kernels_sm120, "index_q_bf16", self.index_q_bf16)
        mp.setattr(kernels_sm120, "paged_mqa_logits_bf16", self.paged_mqa_logits_bf16)
        # SGLang's JIT kernels
        mp.setattr(compressor_v2, "compress_forward", self.compress_forward)
        mp.setattr(compressor_v2, "compress_norm_rope_store", self.compress_norm_rope_store)
        mp.setattr(sg_indexer, "fused_q_indexer_rope_hadamard_quant", self.fused_q_fp8)
        mp.setattr(sg_indexer, "fused_q_indexer_rope_hadamard_fp4_quant", self.fused_q_fp4)
        mp.setattr(sg_dsv4_ops, "get_paged_mqa_logits_metadata", self.paged_mqa_schedule)
        # DeepGEMM
        mp.setattr(deep_gemm, "get_paged_mqa_logits_metadata", self.paged_mqa_schedule)
        mp.setattr(deep_gemm, "get_num_sms", lambda: 132)
        mp.setattr(deep_gemm, "fp8_paged_mqa_logits", self.deep_gemm_fp8_logits)
        mp.setattr(deep_gemm, "fp8_fp4_paged_mqa_logits", self.deep_gemm_fp4_logits)
        return self

    # --- our kernels: float64 references ---
    def store_index_k_bf16(self, kv, norm_weight, norm_eps, freqs_cis, positions, out_loc, index_k_cache):
        self._record(
            "store_index_k_bf16",
            kv=kv,
            norm_weight=norm_weight,
            norm_eps=norm_eps,
            freqs_cis=freqs_cis,
            positions=positions.clone(),
            out_loc=out_loc.clone(),
            index_k_cache=index_k_cache,
        )
        rows = reference.index_k_transform_reference(kv, norm_weight, norm_eps, freqs_cis, positions.long())
        reference.scatter_reference(index_k_cache, rows, out_loc)

    def index_q_bf16(self, q, weight, weight_scale, freqs_cis, positions, num_heads=64):
        self._record("index_q_bf16", q=q, weight=weight, weight_scale=weight_scale, positions=positions)
        q_out, w_out = reference.index_q_reference(q, weight, weight_scale, freqs_cis, positions, num_heads)
        return q_out.to(torch.bfloat16), w_out.float()

    def paged_mqa_logits_bf16(self, q, index_k_cache, weights, seq_lens, page_table, max_seq_len):
        self._record(
            "paged_mqa_logits_bf16",
            q=q,
            index_k_cache=index_k_cache,
            weights=weights,
            seq_lens=seq_lens,
            page_table=page_table,
            max_seq_len=max_seq_len,
        )
        rows = reference.index_k_cache_as_rows(index_k_cache)
        return reference.paged_mqa_logits_reference(q, rows, weights, seq_lens, page_table, max_seq_len).float()

    # --- SGLang's JIT kernels ---
    def compress_forward(
        self, kv_score_buffer, kv_score_input, ape, plan, *, head_dim, compress_ratio, out=None, is_online=False
    ):
        self._record(
            "compress_forward",
            kv_score_buffer=kv_score_buffer,
            kv_score_input=kv_score_input,
            ape=ape,
            plan=plan,
            head_dim=head_dim,
            compress_ratio=compress_ratio,
            is_online=is_online,
        )
        rows = plan[1].shape[0]
        if self.compressed_rows is None:
            return kv_score_input.new_zeros(rows, head_dim)
        assert self.compressed_rows.shape == (rows, head_dim), "the test's rows must match the plan"
        return self.compressed_rows.clone()

    def compress_norm_rope_store(self, kv, plan, **kwargs):
        self._record("compress_norm_rope_store", kv=kv, plan=plan, **kwargs)

    def fused_q_fp8(self, q, weight, weight_scale, freqs_cis, positions):
        self._record("fused_q_fp8", q=q, weight=weight, weight_scale=weight_scale, positions=positions)
        n, h, d = q.shape
        return torch.zeros(n, h, d, dtype=torch.float8_e4m3fn), weight.float().unsqueeze(-1) * weight_scale

    def fused_q_fp4(self, q, weight, weight_scale, freqs_cis, positions):
        self._record("fused_q_fp4", q=q, weight=weight, weight_scale=weight_scale, positions=positions)
        n, h, d = q.shape
        q_fp4 = torch.zeros(n, h, d // 2, dtype=torch.uint8)
        q_sf = torch.zeros(n, h, dtype=torch.int32)
        return (q_fp4, q_sf), weight.float().unsqueeze(-1) * weight_scale

    def paged_mqa_schedule(self, seq_lens, page_size, num_sms):
        self._record("paged_mqa_schedule", seq_lens=seq_lens.clone(), page_size=page_size)
        return self.schedule_marker

    # --- DeepGEMM ---
    def _deep_gemm_logits(self, name, q, kv_cache, weights, seq_lens, page_table, schedule, max_seq_len, clean):
        self._record(
            name,
            q=q,
            kv_cache=kv_cache,
            weights=weights,
            seq_lens=seq_lens,
            page_table=page_table,
            schedule=schedule,
            max_seq_len=max_seq_len,
        )
        rows = page_table.shape[0]
        return torch.arange(rows * max_seq_len, dtype=torch.float32).view(rows, max_seq_len)

    def deep_gemm_fp8_logits(self, *args):
        return self._deep_gemm_logits("deep_gemm_fp8_logits", *args)

    def deep_gemm_fp4_logits(self, *args):
        return self._deep_gemm_logits("deep_gemm_fp4_logits", *args)

    OURS = ("store_index_k_bf16", "index_q_bf16", "paged_mqa_logits_bf16")
