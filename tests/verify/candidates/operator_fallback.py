"""Cheat that the static scan cannot see: the math is done with tensor operators (x * x, @, **) in Python,
and a kernel only copies the result. The run-time record of aten ops must catch it."""

import torch
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


def rms_norm(x, weight, eps):
    n = x.shape[-1]
    ones = x.new_zeros(n) + 1
    mean_sq = (x * x) @ ones / n
    y = x * ((mean_sq + eps) ** -0.5)[..., None] * weight
    out = torch.empty_like(y)
    _copy_kernel[(triton.cdiv(y.numel(), 1024),)](y, out, y.numel(), BLOCK=1024)
    return out
