"""fused_add_rms_norm: residual add then RMSNorm in one pass, as vLLM's Llama layers use it.

Returns (rms_norm(x + residual) * weight, x + residual): the sum is formed in fp32, the norm is taken
of that fp32 sum, and both outputs are in x's dtype. Nothing is done in place.

Tolerances: torch.testing's per-dtype defaults (base.DEFAULT_TOLERANCES), no override: correct Triton
kernels pass them in fp32, bf16 and fp16 on every case (tests/verify/test_correct.py), and the
checker's fp64-golden fallback accepts results that round differently but are no less accurate.
"""

import torch

from autotune.targets.base import ForeignOp, Target, activations, norm_weight, quiet_rows, rows_and_width, upcast
from autotune.targets.rms_norm import TARGET as RMS_NORM
from autotune.targets.space import row_space


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                       eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    s = upcast(x) + upcast(residual)
    y = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + eps)
    return (y * upcast(weight)).to(x.dtype), s.to(x.dtype)


def make_inputs(shape, dtype, gen, kind):
    quiet = quiet_rows(shape, gen)  # the same rows of both, so that their sum is small there too
    x = (activations(shape, torch.float32, gen, kind) * quiet).to(dtype)
    residual = (activations(shape, torch.float32, gen, "normal") * quiet).to(dtype)
    return x, residual, norm_weight(shape[-1], dtype, gen), 1e-5


def bytes_moved(shape, dtype):
    rows, width = rows_and_width(shape)
    e = torch.empty((), dtype=dtype).element_size()
    return (4 * rows * width + width) * e  # read x, residual, weight; write y and the sum


def flops(shape, dtype):
    rows, width = rows_and_width(shape)
    return 5 * rows * width


TARGET = Target(
    name="fused_add_rms_norm",
    summary="residual add + RMSNorm: returns (rms_norm(x + residual) * weight, x + residual), fp32 math",
    reference=fused_add_rms_norm,
    make_inputs=make_inputs,
    bytes_moved=bytes_moved,
    flops=flops,
    default_shapes=RMS_NORM.default_shapes,  # the same hidden states as rms_norm normalises
    edge_shapes=RMS_NORM.edge_shapes,
    # x may come with padded rows (vLLM's kernel takes its row stride); the residual stream is always dense
    layouts=RMS_NORM.layouts,
    scalar_values=RMS_NORM.scalar_values,
    scalar_from_model=RMS_NORM.scalar_from_model,
    model_shapes=RMS_NORM.model_shapes,
    random_shapes=RMS_NORM.random_shapes,
    # (input, residual, weight, eps) in every engine; vLLM's and SGLang's update input and residual in place
    foreign_ops=(ForeignOp("vllm_ir::fused_add_rms_norm"), ForeignOp("_C::fused_add_rms_norm"),
                 ForeignOp("sgl_kernel::fused_add_rmsnorm"), ForeignOp("sgl_kernel::fused_add_rmsnorm_cpu")),
    search=row_space("fused_add_rms_norm.py.j2"),
    example="fused_add_rms_norm.py",
    dims=RMS_NORM.dims,
    advice=RMS_NORM.advice,
    directions=RMS_NORM.directions,
)
