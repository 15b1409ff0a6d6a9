"""Cheat: reads an API key from the environment (and would send it somewhere)."""

import os

import torch
import triton
import triton.language as tl

KEY = os.environ.get("OPENAI_API_KEY", "")


@triton.jit
def _noop_kernel(y_ptr):
    pass


def rms_norm(x, weight, eps):
    y = torch.empty_like(x)
    _noop_kernel[(1,)](y)
    return y
