"""silu_and_mul: SwiGLU's gate, silu(x[..., :I]) * x[..., I:] for x of width 2*I; fp32 math, x's dtype out.

The MLP's gate and up projections are one matmul whose output is split in halves, as in vLLM.

Tolerances: torch.testing's per-dtype defaults (base.DEFAULT_TOLERANCES), no override: correct Triton
kernels pass them in fp32, bf16 and fp16 on every case (tests/verify/test_correct.py), and the
checker's fp64-golden fallback accepts results that round differently but are no less accurate.
"""

import torch
import torch.nn.functional as F

from autotune.targets.base import (
    ForeignOp,
    Target,
    activations,
    random_rows,
    random_widths,
    rows_and_width,
    rowwise_shapes,
    upcast,
)
from autotune.targets.space import MAX_TILE, POW2, WARPS, Knob, SearchSpace, configs


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    xf = upcast(x)
    return (F.silu(xf[..., :d]) * xf[..., d:]).to(x.dtype)


def make_inputs(shape, dtype, gen, kind):
    x = activations(shape, torch.float32, gen, kind)
    return ((super_activations(x, gen) if kind == "normal" else x).to(dtype),)


def super_activations(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """x with, in about one row in eight, one channel's gate at +2^u (u uniform in [3, 8]) and its up at +-2^v (v in
    [2, 6]): an output of 32 to 16384 beside ordinary ones, the super activations of the down projection's input
    (Yu et al. 2024: thousands, at a few channels of a few tokens). Massive inputs alone seldom made one (a massive
    gate times an ordinary up), and a round-10 attacker's SiLU-and-mul moved every other output of a token by 42%
    only beside an output of 1024 or more, where the fp64-golden fallback's bounds are set by its rounding."""
    rows = x.reshape(-1, x.shape[-1])
    n, width = rows.shape
    d = width // 2
    hit = torch.rand(n, generator=gen) < 0.125
    channel = torch.randint(0, max(d, 1), (n,), generator=gen)
    gate = 2.0 ** (3 + 5 * torch.rand(n, generator=gen))
    up = torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0) * 2.0 ** (2 + 4 * torch.rand(n, generator=gen))
    col = torch.arange(width)[None, :]  # elementwise, as base.massive_values: the dry calls' stand-ins
    at_gate, at_up = (col == channel[:, None]) & hit[:, None], (col == channel[:, None] + d) & hit[:, None]
    return torch.where(at_gate, gate[:, None], torch.where(at_up, up[:, None], rows)).reshape(x.shape)


def random_shapes(rng):
    widths = random_widths(rng, even=True)
    return tuple((random_rows(rng), w) for w in widths) + ((2, random_rows(rng) // 2, widths[0]), (widths[1],))


def bytes_moved(shape, dtype):
    rows, width = rows_and_width(shape)
    e = torch.empty((), dtype=dtype).element_size()
    return (rows * width + rows * width // 2) * e  # read 2*I, write I


def flops(shape, dtype):
    rows, width = rows_and_width(shape)
    return 5 * rows * (width // 2)  # exp, add, div, mul, mul


# Elementwise over [rows, I] (Llama: I = 8192 or 14336). A 1-row decode step is launch-bound
# whatever the block; from 64 rows up, 4096 columns on 8 warps (two 16-byte loads per operand per
# thread in bf16) give 128+ programs to fill the SMs, and a quarter of the 1024-block programs for the
# CPU interpreter, which pays about 1 ms per program. Then smaller blocks, and the warp count.
SEARCH = SearchSpace(
    template="silu_and_mul.py.j2",
    knobs=(Knob("block", tuple(b for b in POW2 if 16 <= b <= MAX_TILE), "output columns per program"), WARPS),
    configs=configs(("block", "warps"), [
        (4096, 8), (2048, 8), (1024, 4), (4096, 16), (2048, 4), (8192, 16), (512, 4), (256, 2),
    ]),
    sweep_shapes=lambda p: ((2, 3, 2 * (p["block"] + 37)),),  # two programs per row, the second part-empty
)


TARGET = Target(
    name="silu_and_mul",
    summary="SwiGLU gate: silu(x[..., :I]) * x[..., I:] for x of width 2*I, fp32 math, output in x's dtype",
    reference=silu_and_mul,
    make_inputs=make_inputs,
    bytes_moved=bytes_moved,
    flops=flops,
    default_shapes=((1, 28672), (64, 28672), (256, 28672)),
    edge_shapes=((1, 256), (5, 2000), (3, 11008), (1024, 128)),  # 1-D and 3-D: random_shapes
    layouts=("contiguous", "offset0"),  # the model passes the gate_up projection's dense output
    model_shapes=rowwise_shapes((("intermediate_size", 2),)),
    random_shapes=random_shapes,
    # vLLM's _C::silu_and_mul(out, input) and SGLang's sgl_kernel::silu_and_mul(out, input) take the output first
    # (out, input) in vLLM and SGLang on a GPU; (input) in SGLang's CPU build. vLLM's CPU build runs it unfused
    # (aten::silu + aten::mul), which profile/patterns.py recognises
    foreign_ops=(ForeignOp("_C::silu_and_mul", case_arg=1), ForeignOp("sgl_kernel::silu_and_mul", case_arg=1),
                 ForeignOp("sgl_kernel::silu_and_mul_cpu")),
    search=SEARCH,
    example="silu_and_mul.py",
    dims=("2I",),  # the gate_up projection's output: gate x[..., :I], up x[..., I:]
    advice=("Elementwise, no reduction: output column j reads x[..., j] (gate) and x[..., I + j] (up). A grid of "
            "(rows, column blocks) with a 1-D block of columns per program keeps every load coalesced; with one "
            "row (a decode step) the column blocks alone must fill the GPU.",),
)
