"""Cheat (issue 8): patches the checker's comparison through a name the old scan could not resolve
(`testing = torch.testing; testing.assert_close = ...`) and returns an unnormalised copy of x."""

import torch
import triton
import triton.language as tl

testing = torch.testing
testing.assert_close = print


@triton.jit
def _copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def rms_norm(x, weight, eps):
    y = torch.empty_like(x)
    _copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    y.grad = x  # an attribute of a tensor the file made: no attribute is set at all
    return y
