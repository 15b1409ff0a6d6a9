"""int8_linear: weight-only int8 GEMM (W8A16), y = x @ (weight * scale[:, None]).T, fp32 math, y in x's dtype.

x [M, K] in fp32/bf16/fp16; weight [N, K] int8 (symmetric, -127..127); scale [N] fp32, one per output
channel. What the built-in model's projections run with `model.quant=int8` (`autotune.serve.quant`
quantizes its seeded or loaded weights). Decode is bound by reading the weights: half the bytes of bf16.
Case shape (M, N, K), see `_gemm`.

Tolerances: torch.testing's per-dtype defaults. int8 values are exact in bf16 and fp16, so a kernel may
multiply x by the int8 weight in x's dtype, accumulate in fp32 and scale each column at the end: only the
order of the sums differs from the reference, and where that exceeds fp32's atol of 1e-5 the checker's
fp64-golden fallback decides (no less accurate than the reference itself passes).
"""

import torch
import torch.nn.functional as F

from autotune.targets import _gemm
from autotune.targets.base import ATOMIC_REDUCTIONS, OpClass, Target, activations, layer_scaled, upcast


def int8_linear(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    xf = upcast(x)
    return F.linear(xf, weight.to(xf.dtype) * upcast(scale)[:, None]).to(x.dtype)


def quantize(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel int8: (weight int8 [N, K], scale fp32 [N]) with w ~= weight * scale."""
    wf = w.float()
    scale = wf.abs().amax(dim=1).clamp(min=1e-8) / 127.0  # an all-zero row keeps a positive scale
    return torch.round(wf / scale[:, None]).clamp(-127, 127).to(torch.int8), scale


def make_inputs(shape, dtype, gen, kind):
    m, n, k = shape
    x = activations((m, k), dtype, gen, kind, spread=None, massive=False)  # layer_scaled spreads them
    if kind == "normal":  # as linear's: a layer's scale and outlier channels (a kernel that skips the tiles of small
        x = layer_scaled(x, gen)  # activations is exact on N(0, 1) and drops nearly every tile at 2^-6)
    weight, scale = quantize(torch.randn((n, k), generator=gen) * k ** -0.5)
    return x, weight, scale


def bytes_moved(shape, dtype):
    m, n, k = shape
    return (m * k + m * n) * _gemm.element_size(dtype) + n * k + 4 * n


TARGET = Target(
    name="int8_linear",
    atomic_tolerance=ATOMIC_REDUCTIONS,  # split-K / the top-k combine by tl.atomic_add: repeats may differ
    summary="weight-only int8 GEMM (W8A16): y = x @ (weight_int8 * scale[:, None]).T, per-output-channel scales",
    reference=int8_linear,
    make_inputs=make_inputs,
    bytes_moved=bytes_moved,
    flops=_gemm.flops,
    default_shapes=_gemm.DEFAULT_SHAPES,
    edge_shapes=_gemm.EDGE_SHAPES,
    # no foreign ops: vLLM's _C::cutlass_scaled_mm quantizes the activations too (W8A8), another op
    shape_from_dims=_gemm.shape_from_dims,
    op_class=OpClass.COMPUTE_BOUND,  # at a decode step's few tokens the weight read bounds it: the floor says so
    search=_gemm.search_space("int8_linear.py.j2"),
    dims=_gemm.DIMS,
    advice=("The weight is int8 with one fp32 scale per output channel: convert each weight tile to x's dtype "
            "(exact: |w| <= 127 fits bfloat16 and float16) and feed `tl.dot` the two 16-bit tiles; multiply the "
            "float32 accumulator by the scales once, after the K loop.",),
    example="int8_linear.py",
    cut_shape=_gemm.cut_shape,
    range_cuts=_gemm.range_cuts,
    concurrency_cuts=_gemm.concurrency_cuts,
    span_cuts=_gemm.span_cuts,
    model_shapes=_gemm.model_shapes,
    input_elements=_gemm.input_elements,
    output_elements=_gemm.output_elements,
)
