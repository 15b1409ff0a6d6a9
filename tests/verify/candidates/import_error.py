"""Bug: a name that does not exist, used when the module is imported."""

import torch
import triton
import triton.language as tl

BLOCK = DEFAULT_BLOCK_SIZE * 2


@triton.jit
def _rms_norm_kernel(x_ptr, y_ptr):
    pass


def rms_norm(x, weight, eps):
    y = torch.empty_like(x)
    _rms_norm_kernel[(1,)](x, y)
    return y
