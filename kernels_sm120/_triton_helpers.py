"""Device helpers shared by the index-K store and index-Q kernels.

Both paths apply the same two transforms after their own prologue: RoPE on the trailing
64 of 128 dims with SGLang's DSV4 convention, then the 128-point Hadamard of
``rotate_activation`` (scale ``128**-0.5``). Keeping them here means the two kernels
cannot drift apart.

"Pair space" (v3, see NOTES.md): a row of 128 is loaded as two halves of 32 (even, odd)
column pairs, ``[BLOCK_M, 32, 2]`` tensors whose size-2 axis is contiguous in memory and
in each thread, so every load is a 16-byte vector load and ``tl.split`` costs nothing.
RoPE is then elementwise on (real, imag) = (even, odd) columns, with cos/sin split the
same way from SGLang's interleaved table row. The Hadamard never needs the interleaved
row back: with ``H128 = [[H64, H64], [H64, -H64]]`` and H64's even / odd rows ``He`` /
``Ho``,

    x @ H128 = [(x0 + x1) @ H64 | (x0 - x1) @ H64],
    v @ H64  = v_even @ He + v_odd @ Ho.

Earlier versions gathered partner columns and cos/sin with scalar loads, which saturated
the L1 pipe (ncu: L1/TEX 89%, DRAM 12%), or used reshape/split/join on a [BLOCK_M, 128]
tile with a 128x128 matrix, which cost 255 registers.

Everything stays in fp32 until the caller rounds once to bf16, like SGLang's JIT
``fused_norm_rope_indexer`` / ``fused_q_indexer_rope_hadamard_quant``.
"""

import triton
import triton.language as tl


@triton.jit
def pair_offsets(PAIRS: tl.constexpr):
    """[PAIRS, 2] column offsets (2k, 2k + 1): (even, odd) = (real, imag) pairs."""
    k = tl.arange(0, PAIRS)
    two = tl.arange(0, 2)
    return 2 * k[:, None] + two[None, :]


@triton.jit
def hadamard_pair_matrices(N: tl.constexpr):
    """(He, Ho): the even and odd rows of the Sylvester Hadamard matrix H_N, bf16 [N/2, N].

    ``H[i, j] = (-1)**popcount(i & j)``: the natural-order transform that SGLang's
    butterflies and ``hadamard_transform`` compute. Exact in bf16 (+-1).
    """
    tl.static_assert(N <= 256, "popcount parity below handles N <= 256")
    k = tl.arange(0, N // 2)
    c = tl.arange(0, N)
    pe = (2 * k)[:, None] & c[None, :]
    po = (2 * k + 1)[:, None] & c[None, :]
    pe = pe ^ (pe >> 4)
    pe = pe ^ (pe >> 2)
    pe = pe ^ (pe >> 1)
    po = po ^ (po >> 4)
    po = po ^ (po >> 2)
    po = po ^ (po >> 1)
    he = tl.where((pe & 1) == 0, 1.0, -1.0).to(tl.bfloat16)
    ho = tl.where((po & 1) == 0, 1.0, -1.0).to(tl.bfloat16)
    return he, ho


@triton.jit
def _times_h(acc, y, h):
    """``acc + y @ h`` for fp32 ``y`` and a +-1 bf16 ``h`` on tensor cores, keeping ~16
    mantissa bits of ``y`` by splitting it into bf16 hi + lo parts (h is exact in bf16)."""
    hi = y.to(tl.bfloat16)
    lo = (y - hi.to(tl.float32)).to(tl.bfloat16)
    acc = tl.dot(hi, h, acc)
    return tl.dot(lo, h, acc)


@triton.jit
def hadamard128_pairs(x0_even, x0_odd, x1_even, x1_odd, he, ho, BLOCK_M: tl.constexpr):
    """``[x0 | x1] @ H128 / sqrt(128)`` as its two halves [BLOCK_M, 64] (fp32), from the
    even / odd columns of each half (fp32 [BLOCK_M, 32]) and ``hadamard_pair_matrices(64)``."""
    SCALE: tl.constexpr = 128**-0.5
    zero = tl.zeros([BLOCK_M, 64], dtype=tl.float32)
    out0 = _times_h(_times_h(zero, x0_even + x1_even, he), x0_odd + x1_odd, ho)
    out1 = _times_h(_times_h(zero, x0_even - x1_even, he), x0_odd - x1_odd, ho)
    return out0 * SCALE, out1 * SCALE


@triton.jit
def rope_pairs(x_re, x_im, cos, sin):
    """(x_re + i x_im) * (cos + i sin), elementwise."""
    return x_re * cos - x_im * sin, x_re * sin + x_im * cos
