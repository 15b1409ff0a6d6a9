"""Bug: stores far out of bounds; under the interpreter (and on a GPU) that kills the process."""

import torch
import triton
import triton.language as tl


@triton.jit
def _bad_store_kernel(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK).to(tl.int64) + tl.full([BLOCK], 1 << 40, tl.int64)
    tl.store(y_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32).to(y_ptr.dtype.element_ty))


def rms_norm(x, weight, eps):
    y = torch.empty_like(x)
    _bad_store_kernel[(1,)](y, y.numel(), BLOCK=128)
    return y
