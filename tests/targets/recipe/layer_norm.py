"""layer_norm: y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias over the last dim; fp32 math, output in x's
dtype. A throwaway target: tests/targets/test_recipe.py copies this file to autotune/targets/layer_norm.py of a
temporary copy of the project (with its template and example beside it), to prove that the README's three files
make a target. Not part of the package.

Tolerances: torch.testing's per-dtype defaults (base.DEFAULT_TOLERANCES), no override.
"""

import torch

from autotune.targets.base import (Target, activations, norm_weight, random_rows, random_widths, rows_and_width,
                                   rowwise_shapes, upcast)
from autotune.targets.space import row_space


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    xf = upcast(x)
    mean = xf.mean(-1, keepdim=True)
    var = (xf - mean).pow(2).mean(-1, keepdim=True)
    return ((xf - mean) * torch.rsqrt(var + eps) * upcast(weight) + upcast(bias)).to(x.dtype)


def make_inputs(shape, dtype, gen, kind):
    x = activations(shape, dtype, gen, kind)
    bias = (0.1 * torch.randn(shape[-1], generator=gen)).to(dtype)
    return x, norm_weight(shape[-1], dtype, gen), bias, 1e-5


def random_shapes(rng):
    return tuple((random_rows(rng), w) for w in random_widths(rng))


def bytes_moved(shape, dtype):
    rows, width = rows_and_width(shape)
    return (2 * rows * width + 2 * width) * torch.empty((), dtype=dtype).element_size()  # x, w, b in; y out


def flops(shape, dtype):
    rows, width = rows_and_width(shape)
    return 7 * rows * width


TARGET = Target(
    name="layer_norm",
    summary="LayerNorm over the last dim: (x - mean) * rsqrt(var + eps) * weight + bias, fp32 math",
    reference=layer_norm,
    make_inputs=make_inputs,
    bytes_moved=bytes_moved,
    flops=flops,
    default_shapes=((1, 4096), (64, 4096)),
    edge_shapes=((1, 128), (7, 1000), (2, 8192)),
    model_shapes=rowwise_shapes((("hidden_size", 1),)),
    random_shapes=random_shapes,
    search=row_space("layer_norm.py.j2"),
    example="layer_norm.py",
)
