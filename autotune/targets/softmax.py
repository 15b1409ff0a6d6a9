"""softmax over the last dim, fp32 math, output in x's dtype; the attention probabilities of the model.

Attention scores come masked with -inf (causal and padding), so rows with -inf entries are the normal
case; a row that is all -inf gives NaN, as torch.softmax does.

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
    random_rows,
    random_widths,
    rows_and_width,
    upcast,
)
from autotune.targets.space import row_space


def softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(upcast(x), dim=-1).to(x.dtype)


def make_inputs(shape, dtype, gen, kind):
    x = activations(shape, dtype, gen, kind)
    if kind == "normal":  # attention's masks: each row's tail -inf (causal), half the rows' head too (left padding,
        # a sliding window's start); a round-15 attacker's online softmax gave NaN after a chunk of only -inf and passed
        # while every mask was a tail
        rows, width = rows_and_width(shape)
        keep = torch.randint(1, width + 1, (rows, 1), generator=gen)
        start = torch.randint(0, width, (rows, 1), generator=gen) * (torch.rand((rows, 1), generator=gen) < 0.5)
        cols = torch.arange(width)[None, :]
        mask = (cols >= keep) | (cols < torch.minimum(start, keep - 1))  # every row keeps a key
        x = x.reshape(rows, width).masked_fill(mask, float("-inf")).reshape(shape)
    return (x,)


def model_shapes(dims, rows):
    """Attention scores [heads, queries, context] at the longest context the preset serves."""
    return ((int(dims["num_heads"]), rows, int(dims["max_seq_len"])),)


def random_shapes(rng):
    widths = random_widths(rng)  # the model's scores are 3-D; 2-D and 1-D rows are softmax's contract too
    return tuple((rng.choice((3, 5, 7)), random_rows(rng), w) for w in widths) + ((random_rows(rng), widths[1]),
                                                                                  (widths[0],))


def bytes_moved(shape, dtype):
    rows, width = rows_and_width(shape)
    e = torch.empty((), dtype=dtype).element_size()
    return 2 * rows * width * e


def flops(shape, dtype):
    rows, width = rows_and_width(shape)
    return 4 * rows * width  # max, sub+exp, sum, div


def edge_rows(shape, params, dtype):
    """Rows whose answer a running max gets wrong: all -inf (NaN out), NaN in the first lane, -inf across the
    first block, +inf at the end."""
    width = shape[-1]
    x = torch.randn(4, width)
    x[0] = float("-inf")
    x[1, 0] = float("nan")
    x[2, :min(params["max_block"], width)] = float("-inf")
    x[3, -1] = float("inf")
    yield "edge rows", (x.to(dtype),)


TARGET = Target(
    name="softmax",
    summary="softmax over the last dim (attention probabilities, -inf masked), fp32 math, output in x's dtype",
    reference=softmax,
    make_inputs=make_inputs,
    bytes_moved=bytes_moved,
    flops=flops,
    default_shapes=((32, 1, 1024), (32, 128, 128), (8, 512, 512)),
    edge_shapes=((1, 1, 1), (1, 7, 1000), (2, 1, 5000), (1, 1024, 64)),
    layouts=("contiguous", "offset0"),  # the model passes dense scores (views of a matmul's output)
    model_shapes=model_shapes,
    random_shapes=random_shapes,
    foreign_ops=(ForeignOp("aten::_softmax"),),  # what torch.softmax runs in any engine's trace
    search=row_space("softmax.py.j2", sweep_inputs=edge_rows),
    dims=("keys",),  # a row of attention scores per (head, query), leading dims [heads, queries]
    advice=ROW_REDUCTION_ADVICE + (
        "A running max and sum (online softmax) reads a wide row once instead of twice; a row that is all -inf "
        "gives NaN, as torch.softmax does.",),
    directions=ROW_DIRECTIONS,
    example="softmax.py",
)
