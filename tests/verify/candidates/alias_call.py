"""Cheat (issue 8): hides torch's own RMSNorm behind aliases (`t = torch`, `f = t.nn.functional.rms_norm`,
`f(...)`), so that no chain the old scan vetted names it; a kernel copies the answer out."""

import torch
import triton
import triton.language as tl

t = torch


@triton.jit
def _copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def rms_norm(x, weight, eps):
    f = t.nn.functional.rms_norm
    answer = f(x, x.shape[-1:], weight, eps)
    y = torch.empty_like(x)
    _copy_kernel[(triton.cdiv(x.numel(), 1024),)](answer, y, x.numel(), BLOCK=1024)
    return y
