"""Cheat or crash: the process kills itself with SIGKILL in the middle of a case."""

import os
import signal

import torch
import triton
import triton.language as tl


@triton.jit
def _noop_kernel(y_ptr):
    pass


def rms_norm(x, weight, eps):
    os.kill(os.getpid(), signal.SIGKILL)
