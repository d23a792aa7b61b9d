"""Run our Triton kernels through Triton's interpreter on CPU tensors, inside this process.

The interpreter is enabled for the given modules only, without TRITON_INTERPRET (which Triton
reads when a kernel is decorated, so setting it in a test would be too late for our modules and
would also turn every SGLang kernel imported elsewhere in the session into an interpreted one).
``interpreted_kernels`` swaps the modules' ``@triton.jit`` functions (and Triton's own
``tl.sum``-style library functions) for interpreted ones and patches three interpreter gaps,
restoring everything afterwards:
  * bf16 ``tl.dot``: the interpreter stores bf16 as uint16 and multiplies the raw bits (fp16
    operands are widened too: numpy would accumulate them in fp16);
  * fp32 -> bf16 casts: the interpreter truncates, GPUs round to nearest even;
  * fp32 -> fp8 e4m3 casts: the interpreter's conversion is wrong at the top of each binade
    (125.0 -> 64.0); GPUs round to nearest even (torch's conversion does the same);
  * nested device-function calls leave triton.language.core patched.
Nothing of our code is stubbed.
"""

import contextlib

import numpy as np
import torch
import triton.language as tl


def all_kernel_modules():
    """Every module of ``kernels_sm120`` that defines ``@triton.jit`` functions."""
    from kernels_sm120 import _triton_helpers, index_k_store, index_q, paged_logits_fp4, paged_mqa_logits

    return (_triton_helpers, index_k_store, index_q, paged_mqa_logits, paged_logits_fp4)


@contextlib.contextmanager
def interpreted_kernels(*modules):  # noqa: C901  one block that must undo every patch it makes
    import triton.experimental.gluon  # noqa: F401  mangle_type imports it lazily; it must see the real stdlib
    import triton.language.standard as tl_standard
    import triton.runtime.interpreter as interp_mod
    from triton.runtime.interpreter import InterpretedFunction, InterpreterBuilder, TensorHandle, _convert_float
    from triton.runtime.jit import JITFunction

    _MISSING = object()

    orig_dot, orig_cast = InterpreterBuilder.create_dot, InterpreterBuilder.cast_impl
    orig_fp_to_fp = InterpreterBuilder.create_fp_to_fp

    def widen_bf16(h):
        if h.dtype.scalar == tl.bfloat16:
            return TensorHandle(_convert_float(h.data, tl.bfloat16, tl.float32, None).view(np.float32), tl.float32)
        if h.dtype.scalar == tl.float16:  # numpy would sum fp16 products in fp16; tensor cores sum in fp32
            return TensorHandle(h.data.astype(np.float32), tl.float32)
        return h

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        return orig_dot(self, widen_bf16(a), widen_bf16(b), d, input_precision, max_num_imprecise_acc)

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            out = torch.from_numpy(np.ascontiguousarray(src.data)).to(torch.bfloat16)
            return TensorHandle(out.view(torch.int16).numpy().view(np.uint16), tl.bfloat16)
        return orig_cast(self, src, dst_type)

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.float8e4nv:
            out = torch.from_numpy(np.ascontiguousarray(src.data)).to(torch.float8_e4m3fn)
            return TensorHandle(out.view(torch.uint8).numpy(), tl.float8e4nv)
        return orig_fp_to_fp(self, src, dst_type, rounding_mode)

    # Nested device-function calls (tl.sum from triton.language.standard) patch Triton's
    # language objects again and never undo it. Record the value each attribute had before
    # its first patch in this block and put every one back on exit, or later real
    # compilations (the AOT tests) would run against the interpreter's builtins.
    originals = {}
    orig_set_attr = interp_mod._LangPatchScope.set_attr

    def recording_set_attr(self, obj, name, value):
        originals.setdefault((id(obj), name), (obj, name, vars(obj).get(name, _MISSING)))
        orig_set_attr(self, obj, name, value)

    saved = []
    InterpreterBuilder.create_dot, InterpreterBuilder.cast_impl = create_dot, cast_impl
    InterpreterBuilder.create_fp_to_fp = create_fp_to_fp
    interp_mod._LangPatchScope.set_attr = recording_set_attr
    try:
        for mod in (tl, tl_standard, *modules):
            for name, obj in list(vars(mod).items()):
                if isinstance(obj, JITFunction):
                    saved.append((mod, name, obj))
                    setattr(mod, name, InterpretedFunction(obj.fn))
        yield
    finally:
        interp_mod._LangPatchScope.set_attr = orig_set_attr
        for obj, name, value in originals.values():
            if value is _MISSING:
                if name in vars(obj):
                    delattr(obj, name)
            else:
                setattr(obj, name, value)
        InterpreterBuilder.create_dot, InterpreterBuilder.cast_impl = orig_dot, orig_cast
        InterpreterBuilder.create_fp_to_fp = orig_fp_to_fp
        for mod, name, obj in saved:
            setattr(mod, name, obj)
