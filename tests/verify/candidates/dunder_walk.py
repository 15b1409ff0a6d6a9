"""Cheat (issue 8): walks from a tensor to every loaded class (`x.__class__.__mro__[-1].__subclasses__()`)
to find one that opens files or runs processes."""

import torch
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def rms_norm(x, weight, eps):
    classes = x.__class__.__mro__[-1].__subclasses__()
    y = torch.empty_like(x)
    _copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, len(classes), BLOCK=1024)
    return y
