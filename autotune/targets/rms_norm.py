"""rms_norm: y = x / sqrt(mean(x^2) + eps) * weight over the last dim; math in fp32, output in x's dtype.

Llama applies it before attention and before the MLP; the built-in model calls it once per forward
(layer 0's input) and uses fused_add_rms_norm everywhere else, as vLLM's Llama does.

Tolerances: torch.testing's per-dtype defaults (base.DEFAULT_TOLERANCES), no override: correct Triton
kernels pass them in fp32, bf16 and fp16 on every case (tests/verify/test_correct.py), and the
checker's fp64-golden fallback accepts results that round differently but are no less accurate.
"""

import torch

from autotune.targets.base import (
    ROW_DIRECTIONS,
    ROW_REDUCTION_ADVICE,
    ForeignOp,
    Target,
    activations,
    norm_weight,
    quiet_rows,
    random_rows,
    random_widths,
    rows_and_width,
    rowwise_shapes,
    upcast,
)
from autotune.targets.space import row_space


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = upcast(x)
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * upcast(weight)).to(x.dtype)


def make_inputs(shape, dtype, gen, kind):
    x = (activations(shape, torch.float32, gen, kind) * quiet_rows(shape, gen)).to(dtype)
    return x, norm_weight(shape[-1], dtype, gen), 1e-5


def random_shapes(rng):
    """One [rows, width] per drawn width, rows above 32 and prime; the narrowest also as [2, tokens, width]
    (with 2 * tokens < 64, so that the CPU's row cut keeps both leading dims) and one as a 1-D [width]: the op
    normalises the last dim of any shape, and a kernel that takes x.shape[0] as the row count is wrong."""
    widths = random_widths(rng)
    return tuple((random_rows(rng), w) for w in widths) + ((2, random_rows(rng) // 2, widths[0]), (widths[1],))


def bytes_moved(shape, dtype):
    rows, width = rows_and_width(shape)
    e = torch.empty((), dtype=dtype).element_size()
    return (2 * rows * width + width) * e  # read x and weight, write y


def flops(shape, dtype):
    rows, width = rows_and_width(shape)
    return 4 * rows * width  # square, sum, scale, weight


TARGET = Target(
    name="rms_norm",
    summary="RMSNorm over the last dim: x * rsqrt(mean(x^2) + eps) * weight, fp32 math, output in x's dtype",
    reference=rms_norm,
    make_inputs=make_inputs,
    bytes_moved=bytes_moved,
    flops=flops,
    default_shapes=((1, 4096), (64, 4096), (256, 4096)),
    edge_shapes=((1, 128), (7, 1000), (3, 5120), (2, 8192), (1024, 64)),  # 1-D and 3-D: random_shapes
    layouts=("contiguous", "offset0", "padded"),  # vLLM's rms_norm takes a row stride (input.stride(-2))
    scalar_values={"eps": (1e-6, 1e-5)},
    scalar_from_model={"eps": "rms_norm_eps"},
    model_shapes=rowwise_shapes((("hidden_size", 1),)),
    random_shapes=random_shapes,
    # vLLM's _C::rms_norm(out, input, weight, eps) and SGLang's sgl_kernel::rmsnorm(out, input, weight, eps, ...)
    # take their output first; vLLM IR's vllm_ir::rms_norm(x, weight, eps, ...) (ir_enable_torch_wrap) does not.
    foreign_ops=(ForeignOp("vllm_ir::rms_norm"), ForeignOp("_C::rms_norm", case_arg=1),
                 ForeignOp("sgl_kernel::rmsnorm", case_arg=1),  # SGLang on a GPU: (out, input, weight, eps, pdl)
                 ForeignOp("sgl_kernel::rmsnorm_cpu")),  # SGLang's CPU build: (input, weight, eps)
    search=row_space("rms_norm.py.j2"),
    dims=("hidden",),
    advice=ROW_REDUCTION_ADVICE,
    directions=ROW_DIRECTIONS,
    example="rms_norm.py",
)
