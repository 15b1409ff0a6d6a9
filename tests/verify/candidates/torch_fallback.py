"""Cheat: launches a token kernel but does the math with torch functions (the scan must stop it)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _touch_kernel(y_ptr):
    pass


def rms_norm(x, weight, eps):
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
    _touch_kernel[(1,)](y)
    return y.to(x.dtype)
