"""Bug: never returns."""

import torch
import triton
import triton.language as tl


@triton.jit
def _noop_kernel(y_ptr):
    pass


def rms_norm(x, weight, eps):
    while True:
        pass
