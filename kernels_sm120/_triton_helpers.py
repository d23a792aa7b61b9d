"""Device helpers shared by the index-K store and index-Q kernels.

Both paths apply the same two transforms after their own prologue: RoPE on the trailing
64 of 128 dims with SGLang's DSV4 convention, then the 128-point Hadamard of
``rotate_activation`` (scale ``128**-0.5``). Keeping them here means the two kernels
cannot drift apart.

Layout (v4, see NOTES.md): a row of 128 is handled as its two halves of 64, each loaded
as a plain ``[BLOCK_M, 64]`` tile (contiguous columns, so 16-byte loads and stores). The
RoPE half is viewed as ``[BLOCK_M, 32, 2]`` (real, imag) pairs, and so is SGLang's
interleaved (cos, sin) table row; the size-2 axis lies inside each thread, so
``tl.split`` / ``tl.join`` cost nothing.

The Hadamard is a Walsh-Hadamard butterfly in fp32 registers, no matrix and no tensor
cores. Natural (Sylvester) order, the order of SGLang's butterflies and
``hadamard_transform``: for each bit ``b`` of the column index, the pair (i, i + 2**b)
with bit b of i clear becomes (x_i + x_j, x_i - x_j). The stages commute:

  * bit 6 (the two halves) is one add and one subtract of the two half tiles;
  * bits 0..5 inside each half: the 64 columns viewed as ``[8, 8]`` (col = 8 a + b);
    bits 0..2 (b, the eight columns one thread loads with one 16-byte load) are
    butterflies inside each thread; then a transpose to ``[b, a]`` and bits 3..5
    (a, spread over lanes) the same way, which Triton lowers to one exchange through
    warp shuffles and shared memory; then back to ``[a, b]`` for the store.

Each output is a sum of 128 signed terms done in fp32 (7 rounding steps, ~1e-7 relative),
scaled by ``128**-0.5``, and rounded once to bf16 by the caller, like SGLang's JIT
``fused_norm_rope_indexer`` / ``fused_q_indexer_rope_hadamard_quant``.

Earlier versions multiplied by the Hadamard matrix with ``tl.dot`` (bf16 hi + lo halves of
the fp32 operand): every operand went register -> shared memory -> ldmatrix with ~17
barriers per tile, and their loads were 4-byte (pair offsets hide the contiguity).

One host-side helper lives here too, for every launcher: :func:`interpreted`.
"""

import triton
import triton.language as tl


def interpreted(kernel: object) -> bool:
    """True where Triton's interpreter runs ``kernel`` (a module's kernel read at call time: TRITON_INTERPRET=1, or
    the CPU tests' ``interpreted_kernels``), which runs no PTX and takes CPU tensors."""
    return not isinstance(kernel, triton.runtime.jit.JITFunction)


@triton.jit
def _butterfly(t: tl.tensor, BLOCK_M: tl.constexpr, A: tl.constexpr, N: tl.constexpr, H: tl.constexpr) -> tl.tensor:
    """One butterfly stage on bit log2(H) of the last axis of ``t`` [BLOCK_M, A, N]."""
    G: tl.constexpr = N // (2 * H)
    u = tl.permute(tl.reshape(t, [BLOCK_M, A, G, 2, H]), [0, 1, 2, 4, 3])  # the bit's pair last
    lo, hi = tl.split(u)
    u = tl.permute(tl.join(lo + hi, lo - hi), [0, 1, 2, 4, 3])
    return tl.reshape(u, [BLOCK_M, A, N])


@triton.jit
def _wht8_last_axis(t: tl.tensor, BLOCK_M: tl.constexpr) -> tl.tensor:
    """8-point Walsh-Hadamard transform (unscaled) along the last axis of [BLOCK_M, 8, 8]."""
    t = _butterfly(t, BLOCK_M, 8, 8, 1)
    t = _butterfly(t, BLOCK_M, 8, 8, 2)
    return _butterfly(t, BLOCK_M, 8, 8, 4)


@triton.jit
def _wht64(x: tl.tensor, BLOCK_M: tl.constexpr) -> tl.tensor:
    """Unscaled natural-order 64-point Walsh-Hadamard transform of each row of [BLOCK_M, 64]."""
    t = tl.reshape(x, [BLOCK_M, 8, 8])  # [row, a, b], column = 8 a + b
    t = _wht8_last_axis(t, BLOCK_M)  # bits 0..2: inside each thread
    t = tl.permute(_wht8_last_axis(tl.permute(t, [0, 2, 1]), BLOCK_M), [0, 2, 1])  # bits 3..5
    return tl.reshape(t, [BLOCK_M, 64])


@triton.jit
def hadamard128(x0: tl.tensor, x1: tl.tensor, BLOCK_M: tl.constexpr) -> tuple[tl.tensor, tl.tensor]:
    """``[x0 | x1] @ H128 / sqrt(128)`` as its two halves, from fp32 halves [BLOCK_M, 64]."""
    SCALE: tl.constexpr = 128**-0.5
    out0 = _wht64(x0 + x1, BLOCK_M)
    out1 = _wht64(x0 - x1, BLOCK_M)
    return out0 * SCALE, out1 * SCALE


@triton.jit
def rope_interleaved(x: tl.tensor, freqs: tl.tensor, BLOCK_M: tl.constexpr) -> tl.tensor:
    """RoPE of fp32 [BLOCK_M, 64] (pairs (2k, 2k + 1) = (real, imag)) by the table rows
    ``freqs`` [BLOCK_M, 64] fp32 = (cos_k, sin_k) interleaved (``view_as_real(freqs_cis)``)."""
    x_re, x_im = tl.split(tl.reshape(x, [BLOCK_M, 32, 2]))
    cos, sin = tl.split(tl.reshape(freqs, [BLOCK_M, 32, 2]))
    y = tl.join(x_re * cos - x_im * sin, x_re * sin + x_im * cos)
    return tl.reshape(y, [BLOCK_M, 64])
