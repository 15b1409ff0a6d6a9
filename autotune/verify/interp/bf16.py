"""bf16 arithmetic (and fp16 sums) as a GPU does it, where Triton 3.9's CPU interpreter works on the raw bits.

The interpreter stores bf16 as uint16 bit patterns and hands them to numpy as integers: `x * y` on bf16
tensors multiplied the patterns (`[1.5, 2, -3, .25] * [2, 3, .5, 4]` gave `[0, 0, -2, 2]`), `-x` took the
two's complement, comparisons and `maximum` ordered negative values backwards, and `tl.sum`/`tl.max` reduced
the patterns. Kernels that compute in bf16 on purpose (Liger's SwiGLU multiplies in the input's dtype, as
vLLM's CUDA activation kernels do) were judged on garbage.

Here each floating-point operation on bf16 operands decodes them to their values, computes exactly (float64:
bf16 sums and products are exact there, quotients and roots round once more, harmlessly, before the
round-to-odd step) and rounds the result once to bf16, to nearest even: what sm_90's native bf16 add/mul/fma
give, and what older GPUs give by widening to fp32 and rounding back. Selections (min, max, where) and
comparisons are exact on the values. Reductions: `tl.sum` adds pairwise, rounding every partial sum to bf16
(the shape of a GPU's in-register tree and warp shuffles); min/max reduce the values; scans and custom
combine functions run the interpreter's element-by-element path, whose every step goes through the rounded
operations above. fp16 elementwise needs none of this (numpy computes float16 with one rounding per operation),
but numpy sums float16 in float32: `tl.sum` and the scans of fp16 round every partial sum to fp16 here too, as
a GPU's fp16 reduction does (a sum that overflows 65504 on the GPU overflows here).
"""

from __future__ import annotations

import numpy as np
import triton.language as tl
from triton.runtime import interpreter

from autotune.verify.interp.numerics import bf16_bits_rtne


def _is_bf16(h) -> bool:
    """A handle holding bf16 bit patterns (comparison results carry the operands' dtype over bool data)."""
    return h.dtype.scalar == tl.bfloat16 and h.data.dtype == np.uint16


def values(bits: np.ndarray) -> np.ndarray:
    """bf16 bit patterns -> their values, as float64 (exact)."""
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def rounded(x) -> np.ndarray:
    """Real values -> bf16 bit patterns of the same shape, each rounded once to nearest even."""
    x = np.asarray(x, dtype=np.float64)
    return bf16_bits_rtne(x).reshape(x.shape)


def _handle(result: np.ndarray):
    """A float result rounded once to bf16; a comparison's booleans as the interpreter keeps them."""
    if result.dtype == np.bool_:
        return interpreter.TensorHandle(result, tl.bfloat16)
    return interpreter.TensorHandle(rounded(result), tl.bfloat16)


def _fp16(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16).astype(np.float64)  # numpy's float64 -> float16: correctly rounded


def _pairwise_sum(x: np.ndarray, axis: int, keep) -> np.ndarray:
    """Sum along `axis` in a tree, every partial sum rounded by `keep` to the storage type (a zero pads an odd
    count: exact)."""
    x = np.moveaxis(x, axis, 0)
    while x.shape[0] > 1:
        if x.shape[0] % 2:
            x = np.concatenate([x, np.zeros_like(x[:1])])
        x = keep(x[0::2] + x[1::2])
    return x[0]


def _is_fp16(h) -> bool:
    return h.dtype.scalar == tl.float16 and h.data.dtype == np.float16


def install() -> None:
    """From now on the interpreter computes bf16 elementwise arithmetic, comparisons and reductions on values,
    each result rounded to bf16 once. A second call does nothing."""
    builder = interpreter.InterpreterBuilder
    if getattr(builder, "_autotune_bf16_values", False):
        return
    builder._autotune_bf16_values = True
    binary, unary, fma, clamp = builder.binary_op, builder.unary_op, builder.create_fma, builder.create_clampf

    def binary_op(self, lhs, rhs, op):
        if not (_is_bf16(lhs) and _is_bf16(rhs)):
            return binary(self, lhs, rhs, op)
        with np.errstate(all="ignore"):  # Inf and NaN arise as on the GPU, silently
            return _handle(op(values(lhs.data), values(rhs.data)))

    def unary_op(self, arg, op):
        if not _is_bf16(arg):
            return unary(self, arg, op)
        with np.errstate(all="ignore"):
            return _handle(op(values(arg.data).astype(np.float32)).astype(np.float64))  # math in fp32, as lowered

    def create_fma(self, x, y, z):
        if not (_is_bf16(x) and _is_bf16(y) and _is_bf16(z)):
            return fma(self, x, y, z)
        with np.errstate(all="ignore"):
            return _handle(values(x.data) * values(y.data) + values(z.data))  # the product is exact: one rounding

    def create_clampf(self, arg, lo, hi, propagate_nans):
        if not (_is_bf16(arg) and _is_bf16(lo) and _is_bf16(hi)):
            return clamp(self, arg, lo, hi, propagate_nans)
        a, low, high = values(arg.data), values(lo.data), values(hi.data)
        clamped = np.fmin(np.fmax(a, low), high) if propagate_nans == interpreter._ir.PROPAGATE_NAN.NONE else \
            np.clip(a, low, high)
        return _handle(clamped)

    builder.binary_op, builder.unary_op, builder.create_fma, builder.create_clampf = (
        binary_op, unary_op, create_fma, create_clampf)
    # the builder's class attributes were bound to the old binary_op/unary_op by lambdas that look it up on
    # self at call time, so rebinding the two methods reaches every create_f* above
    _install_reductions()


def _install_reductions() -> None:
    reduce_ops, scan_ops = interpreter.ReduceOps, interpreter.ScanOps
    min_max, total = reduce_ops.min_max, reduce_ops.sum
    cumsum, cumprod = scan_ops.cumsum, scan_ops.cumprod

    def reduce_min_max(self, input, val_reduce_op, idx_reduce_op=None):
        value = input[0] if isinstance(input, tuple) else input
        if not _is_bf16(value.handle):
            return min_max(self, input, val_reduce_op, idx_reduce_op)
        decoded = self.to_tensor(values(value.handle.data).astype(np.float32), tl.float32)
        out = min_max(self, decoded, val_reduce_op, idx_reduce_op)
        if val_reduce_op is None:
            return out
        val = out[0] if idx_reduce_op else out
        bits = self.to_tensor(rounded(val.handle.data), tl.bfloat16)  # exact: a bf16 value
        return (bits, out[1]) if idx_reduce_op else bits

    def reduce_sum(self, input):
        bf16, fp16 = _is_bf16(input.handle), _is_fp16(input.handle)
        if not (bf16 or fp16):
            return total(self, input)
        data = values(input.handle.data) if bf16 else input.handle.data.astype(np.float64)
        keep = (lambda x: values(rounded(x))) if bf16 else _fp16
        if self.axis is None:
            result = _pairwise_sum(data.reshape(-1), 0, keep)
            result = result.reshape((1,) * data.ndim) if self.keep_dims else result
        else:
            result = _pairwise_sum(data, self.axis, keep)
            result = np.expand_dims(result, self.axis) if self.keep_dims else result
        return self.to_tensor(rounded(result) if bf16 else np.asarray(result, dtype=np.float16), input.dtype)

    def scan(fast):
        def apply(self, input):
            if _is_bf16(input.handle) or _is_fp16(input.handle):
                return self.generic_scan([input])  # each step through the rounded binary ops
            return fast(self, input)
        return apply

    reduce_ops.min_max, reduce_ops.sum = reduce_min_max, reduce_sum
    scan_ops.cumsum, scan_ops.cumprod = scan(cumsum), scan(cumprod)
