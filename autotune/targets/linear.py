"""linear: y = x @ weight.T through torch.nn.functional.linear, in x's dtype (the model's projections).

x [M, K], weight [N, K] in one dtype; y [M, N]. The reference is cuBLAS (on a GPU) or the CPU BLAS,
which a Triton kernel rarely beats: the target is here so that the agent can try, measured honestly.
Case shape (M, N, K), see `_gemm`.

Tolerances: torch.testing's per-dtype defaults. A fp32-accumulating kernel sums K products in another
order than the BLAS; where that exceeds fp32's atol of 1e-5 (K in the thousands), the checker's
fp64-golden fallback decides: the kernel passes when it is no less accurate than the reference itself.
"""

import torch
import torch.nn.functional as F

from autotune.targets import _gemm
from autotune.targets.base import ATOMIC_REDUCTIONS, ForeignOp, OpClass, Target, activations, layer_scaled, weights


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return F.linear(x, weight)


def make_inputs(shape, dtype, gen, kind):
    m, n, k = shape
    x = activations((m, k), dtype, gen, kind, spread=None, massive=False)  # layer_scaled spreads them
    if kind == "normal":
        x = layer_scaled(x, gen)
    weight = weights((n, k), gen).to(dtype)  # N(0, 1/K), y keeping x's scale, with outliers
    return x, weight


def bytes_moved(shape, dtype):
    m, n, k = shape
    return (m * k + n * k + m * n) * _gemm.element_size(dtype)


TARGET = Target(
    name="linear",
    atomic_tolerance=ATOMIC_REDUCTIONS,  # split-K / the top-k combine by tl.atomic_add: repeats may differ
    summary="plain GEMM y = x @ weight.T (torch.nn.functional.linear) in the activations' dtype",
    reference=linear,
    make_inputs=make_inputs,
    bytes_moved=bytes_moved,
    flops=_gemm.flops,
    default_shapes=_gemm.DEFAULT_SHAPES,
    edge_shapes=_gemm.EDGE_SHAPES,
    # F.linear in any eager PyTorch engine (input [..., K], weight [N, K], bias), the GEMMs it lowers to where it is
    # not recorded itself (aten::mm (x, weight.T [K, N]); aten::addmm (bias, x, weight.T)), vLLM's CPU GEMM
    # (_C::onednn_mm (out [M, N], x [M, K], bias, handler): every projection of vLLM 0.32's CPU build) and
    # SGLang's CPU one (weight_packed_linear (x, weight [N, K], bias, is_vnni)). Inside aten::linear the mm is
    # not counted again (an op inside a target op never is).
    foreign_ops=(ForeignOp("aten::linear"), ForeignOp("aten::mm", dims_rule=_gemm.shape_from_mm_dims),
                 ForeignOp("aten::addmm", case_arg=1, dims_rule=_gemm.shape_from_mm_dims),
                 ForeignOp("_C::onednn_mm", dims_rule=_gemm.shape_from_out_dims),
                 ForeignOp("sgl_kernel::weight_packed_linear")),
    shape_from_dims=_gemm.shape_from_dims,
    op_class=OpClass.COMPUTE_BOUND,  # at a decode step's few tokens the weight read bounds it: the floor says so
    search=_gemm.search_space("linear.py.j2"),
    dims=_gemm.DIMS,
    example="linear.py",
    cut_shape=_gemm.cut_shape,
    range_cuts=_gemm.range_cuts,
    concurrency_cuts=_gemm.concurrency_cuts,
    span_cuts=_gemm.span_cuts,
    model_shapes=_gemm.model_shapes,
    input_elements=_gemm.input_elements,
    output_elements=_gemm.output_elements,
)
