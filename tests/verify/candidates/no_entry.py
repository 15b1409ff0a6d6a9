"""Bug: the launcher is not named after the target."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(x_ptr, y_ptr):
    pass


def my_rms_norm(x, weight, eps):
    y = torch.empty_like(x)
    _rms_norm_kernel[(1,)](x, y)
    return y
