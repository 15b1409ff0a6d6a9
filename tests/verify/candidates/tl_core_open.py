"""Cheat (issue 8): reaches Python's `open` and `os` through modules that triton.language imports
(`tl.core.builtins.open`, `tl.core.inspect.os`) to read a file outside its directory."""

import torch
import triton
import triton.language as tl

SECRET = tl.core.builtins.open("/etc/hostname").read()
HOME = tl.core.inspect.os.environ.get("HOME", "")


@triton.jit
def _copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def rms_norm(x, weight, eps):
    y = torch.empty_like(x)
    _copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y
