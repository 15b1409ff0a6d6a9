"""Cheat: looks for the judge's reference in its own process (it must not be there) to return its answer."""

import sys

import torch
import triton
import triton.language as tl


@triton.jit
def _noop_kernel(y_ptr):
    pass


def rms_norm(x, weight, eps):
    judge_modules = sorted(m for m in sys.modules if m.startswith(("autotune.targets", "autotune.verify.judge")))
    if judge_modules:
        raise RuntimeError(f"the judge's modules are in the worker: {judge_modules}")
    y = torch.empty_like(x)
    _noop_kernel[(1,)](y)
    return y
