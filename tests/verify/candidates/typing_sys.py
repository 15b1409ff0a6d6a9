"""Cheat (issue 8): reaches `sys` through `from typing import sys`, takes the worker module from
`sys.modules["__main__"]` and replaces its `run_case`, so every case would report the reference's answer
while this file's kernel only copies x."""

from typing import sys

import torch
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


worker = sys.modules["__main__"]


def rms_norm(x, weight, eps):
    y = torch.empty_like(x)
    _copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y
