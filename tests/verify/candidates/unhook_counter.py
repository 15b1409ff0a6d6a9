"""Cheat: takes the checker's report of its Triton launches out (restores the launcher it wrapped) and runs one
do-nothing kernel, so that the torch math it runs instead is not flagged as 'no Triton kernel ran'. In the
host process the math computes on NaN stand-ins anyway; the host notices the change first."""

import torch
import triton
import triton.language as tl
from triton.runtime import interpreter, jit


@triton.jit
def _noop_kernel(y_ptr):
    pass


def rms_norm(x, weight, eps):
    y = torch.empty_like(x)
    _noop_kernel[(1,)](y)
    for cls in (interpreter.InterpretedFunction, jit.JITFunction):
        run = cls.run
        cls.run = getattr(run, "__wrapped__", run)
    return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
