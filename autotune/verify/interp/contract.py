"""fp contraction, which the interpreter never did and a GPU's compile does: with Triton's default
`enable_fp_fusion=True`, LLVM fuses a floating-point add or subtract with a multiply feeding it into one fma,
rounded once (NVPTX fuses aggressively: a product with other uses too; fp32 `fma.rn.f32`, bf16 `fma.rn.bf16x2`).
The interpreter rounds the product first. Which pairs a compile fuses depends on its basic blocks, which the
interpreter does not have; so each case draws one of the two extremes (`draw`, at the case's start, from the
operating system's randomness, which the candidate cannot see): every multiply-then-add fused, or none. A kernel
whose result depends on that rounding (an attacker's `s * up - p` that is 0 only unfused) fails on the cases of
the other kind; a correct kernel is within tolerance on both. A launch with `enable_fp_fusion=False` compiles
without fusion and runs unfused whatever the draw. fp32, fp16 and bf16 products are exact in float64, where the
fused sum is formed and then rounded once to the storage type; fp64 is never fused here.
"""

from __future__ import annotations

import secrets

import numpy as np
import triton.language as tl
from triton.runtime import interpreter

from autotune.verify.interp import bf16
from autotune.verify.interp.launch import current_launch

_FUSED_TYPES = (tl.float32, tl.float16, tl.bfloat16)
_fusing = [False]  # this case's draw


def draw() -> bool:
    """This case's kind: True, every multiply feeding an add or subtract fused; False, none."""
    _fusing[0] = bool(secrets.randbits(1))
    return _fusing[0]


def fusing() -> bool:
    launch = current_launch()
    return _fusing[0] and not (launch is not None and launch.options.get("enable_fp_fusion") is False)


def _values(h) -> np.ndarray:
    return bf16.values(h.data) if h.dtype.scalar == tl.bfloat16 else h.data.astype(np.float64)


def _stored(exact: np.ndarray, dtype) -> np.ndarray:
    if dtype == tl.bfloat16:
        return bf16.rounded(exact)
    return exact.astype(np.float32 if dtype == tl.float32 else np.float16)


def install() -> None:
    """From now on fadd/fsub take a fused product when the case drew fusion (module docstring)."""
    builder = interpreter.InterpreterBuilder
    if getattr(builder, "_autotune_contract", False):
        return
    fmul, fadd, fsub = builder.create_fmul, builder.create_fadd, builder.create_fsub

    def create_fmul(self, lhs, rhs):
        out = fmul(self, lhs, rhs)
        if out.dtype.scalar in _FUSED_TYPES and lhs.dtype.scalar == rhs.dtype.scalar == out.dtype.scalar:
            out._autotune_factors = (lhs, rhs)  # the exact product, should an add take it while fusing
        return out

    def fused(self, lhs, rhs, sign: float, plain):
        factors = getattr(lhs, "_autotune_factors", None) or getattr(rhs, "_autotune_factors", None)
        dtype = lhs.dtype.scalar
        if factors is None or not fusing() or rhs.dtype.scalar != dtype or dtype not in _FUSED_TYPES:
            return plain(self, lhs, rhs)
        exact = _values(factors[0]) * _values(factors[1])  # exact: at most 2 x 24 significant bits
        with np.errstate(all="ignore"):  # Inf and NaN as the fma gives them
            if getattr(lhs, "_autotune_factors", None) is not None:  # LLVM fuses the first operand's product
                total = exact + sign * _values(rhs)
            else:
                total = _values(lhs) + sign * exact
            return interpreter.TensorHandle(_stored(total, dtype), dtype)

    builder.create_fmul = create_fmul
    builder.create_fadd = lambda self, lhs, rhs: fused(self, lhs, rhs, 1.0, fadd)
    builder.create_fsub = lambda self, lhs, rhs: fused(self, lhs, rhs, -1.0, fsub)
    builder._autotune_contract = True
