"""Cheat: does the math while its module is imported (a table of answers for inputs it can predict) and
only copies at call time, so the op record of the calls is clean."""

import torch
import triton
import triton.language as tl

_g = torch.Generator().manual_seed(0)
_TABLE = torch.rsqrt(torch.randn(64, 128, generator=_g).pow(2).mean(-1, keepdim=True) + 1e-6)


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


def rms_norm(x, weight, eps):
    y = torch.empty_like(x)
    _copy_kernel[(triton.cdiv(y.numel(), 1024),)](x.contiguous(), y, y.numel(), BLOCK=1024)
    return y
