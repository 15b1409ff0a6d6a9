"""fused_add_rms_norm_quant: residual add + RMSNorm + dynamic per-token int8 quantization, in one pass.

What the built-in model runs before its qkv and gate_up projections with `model.quant=w8a8` (int8 weights
and int8 activations): the unfused sequence is `fused_add_rms_norm` then `per_token_int8` of its output,
and that sequence is the reference, so a fused kernel must give what the two ops give one after the other:

    y, s = fused_add_rms_norm(x, residual, weight, eps)   # y and s in x's dtype (y rounded to it)
    scale = max(|y|) / 127 per row (fp32, [rows, 1]), at least 1e-10 / 127 (an all-zero row); a NaN in y is
            left out of the max, as a GPU's max does (fmaxf, Triton's tl.max)
    q = round-half-to-even(y / scale) clamped to [-127, 127], int8; 0 where y / scale is NaN
    returns (q, scale, s)

A row with a NaN or Inf in x has a NaN in y (Inf * rsqrt(Inf) is NaN): its scale is the max of the row's other
|y| (1e-10 / 127 when y is all NaN) and its q is 0 where y is NaN: the cast of NaN to an integer has no value, so
the contract names one. vLLM's `_C::rms_norm_dynamic_per_token_quant` is the same fusion (scale = max|y| / 127,
its block max by fmaxf, which drops NaN), and SGLang's and vLLM's Triton per-token quantizers take tl.max: one
that propagated NaN into the scale would not be what the engines compute.

Tolerances: the scale and the sum at torch.testing's per-dtype defaults. The int8 output may be off by one
in at most `QUANT_FLIPS` of its values and nowhere by more: a value whose y / scale lies within a rounding
error of k + 0.5 rounds either way when the kernel sums the row in another order (an fp32 ulp of rstd moves
y / scale by ~1e-5 at 127). The correct example kernel is off by one in 1 of 1,436,874 values in fp32 and
in none in bf16 and fp16 (normal, large and NaN/Inf inputs, shapes [25, 4096], [64, 2048], [7], [2, 3, 1000],
two seeds, under the interpreter with the checker's bf16 rounding: autotune/verify/interp/launch.py); a kernel that
truncates instead of rounding, scales by 128, or quantizes y before rounding it to x's dtype is off in 5% to
55% of them (tests/verify/test_new_targets.py).
"""

import dataclasses

import torch

from autotune.targets.base import DEFAULT_TOLERANCES, ForeignOp, Target, numel, rows_and_width
from autotune.targets.fused_add_rms_norm import TARGET as FUSED_ADD
from autotune.targets.fused_add_rms_norm import fused_add_rms_norm
from autotune.targets.space import row_space

QUANT_FLIPS = 1e-3  # share of int8 values that may be off by one (see the module docstring)


def per_token_int8(y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric dynamic per-token int8 of y [..., W]: (q int8 [..., W], scale fp32 [..., 1]), y ~= q * scale.
    fp64 in (the checker's golden run) stays fp64 until the cast."""
    yf = y.double() if y.dtype == torch.float64 else y.float()
    magnitude = torch.where(torch.isnan(yf), 0.0, yf.abs())  # a GPU's max drops NaN (fmaxf)
    scale = magnitude.amax(-1, keepdim=True).clamp(min=1e-10) / 127  # an all-zero row: scale > 0, q = 0
    v = yf / scale
    v = torch.where(torch.isnan(v), 0.0, v)  # where y is NaN, q is 0
    return torch.round(v).clamp(-127, 127).to(torch.int8), scale.to(yf.dtype)


def fused_add_rms_norm_quant(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                             eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    y, s = fused_add_rms_norm(x, residual, weight, eps)
    q, scale = per_token_int8(y)
    return q, scale, s


def bytes_moved(shape, dtype):
    rows, width = rows_and_width(shape)
    e = torch.empty((), dtype=dtype).element_size()
    # read x, residual, weight; write the sum (x's dtype), q (1 byte) and one fp32 scale per row
    return (3 * rows * width + width) * e + rows * width + 4 * rows


def flops(shape, dtype):
    rows, width = rows_and_width(shape)
    return 8 * rows * width  # add, square, sum, scale, weight, |y|, max, divide


TARGET = Target(
    name="fused_add_rms_norm_quant",
    summary="residual add + RMSNorm + per-token int8: returns (q int8, scale fp32 [rows, 1], x + residual)",
    reference=fused_add_rms_norm_quant,
    make_inputs=FUSED_ADD.make_inputs,  # the same residual stream as fused_add_rms_norm sees
    bytes_moved=bytes_moved,
    flops=flops,
    default_shapes=FUSED_ADD.default_shapes,
    edge_shapes=FUSED_ADD.edge_shapes,
    tolerances={d: dataclasses.replace(t, int_off_by_one=QUANT_FLIPS) for d, t in DEFAULT_TOLERANCES.items()},
    layouts=FUSED_ADD.layouts,
    scalar_values=FUSED_ADD.scalar_values,
    scalar_from_model=FUSED_ADD.scalar_from_model,
    model_shapes=FUSED_ADD.model_shapes,
    random_shapes=FUSED_ADD.random_shapes,
    # vLLM: rms_norm_dynamic_per_token_quant(out, input, weight, scales, var_epsilon, scale_ub, residual)
    foreign_ops=(ForeignOp("_C::rms_norm_dynamic_per_token_quant", case_arg=1),),
    search=row_space("fused_add_rms_norm_quant.py.j2", own_sweep=True),  # three outputs: the costliest row op
    example="fused_add_rms_norm_quant.py",
    dims=FUSED_ADD.dims,
    directions=FUSED_ADD.directions,
    advice=FUSED_ADD.advice + (
        "max |y| needs the whole normed row before any value can be quantized: keep the row in registers when it "
        "fits; a wider row takes another pass over x and residual (re-adding them in fp32) rather than a round "
        "trip of y through memory. Round y to x's dtype before dividing by the scale, as the unfused ops do, and "
        "round half to even (torch.round); the int8 store is a quarter of fp32's bytes.",),
    output_elements=lambda shape: 2 * numel(shape) + rows_and_width(shape)[0],  # q, the sum, a scale per row
)
