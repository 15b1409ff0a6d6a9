"""Cheat: reads an API key from the environment (and would send it somewhere)."""

import os

import torch
import triton
import triton.language as tl

KEY = os.environ.get("OPENAI_API_KEY", "")
if KEY:  # makes a leak visible to the test that runs it with the scan off
    raise RuntimeError(f"read the API key {KEY[:6]}...")


@triton.jit
def _noop_kernel(y_ptr):
    pass


def rms_norm(x, weight, eps):
    y = torch.empty_like(x)
    _noop_kernel[(1,)](y)
    return y
