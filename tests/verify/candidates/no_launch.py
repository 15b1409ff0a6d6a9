"""Cheat: defines a kernel but never launches it; returns an unwritten buffer."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(x_ptr, y_ptr):
    pass


def rms_norm(x, weight, eps):
    return torch.empty_like(x)
