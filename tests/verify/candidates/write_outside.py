"""Cheat: writes a file outside its private directory when imported; the test puts a path in TARGET_PATH."""

import torch
import triton
import triton.language as tl

TARGET_PATH = "/nonexistent/autotune-test-marker"
with open(TARGET_PATH, "w") as f:
    f.write("written by a candidate\n")


@triton.jit
def _noop_kernel(y_ptr):
    pass


def rms_norm(x, weight, eps):
    y = torch.empty_like(x)
    _noop_kernel[(1,)](y)
    return y
