"""Bug: a typo inside the kernel (`tl.lod`); a GPU compiler rejects it, the interpreter at the first call."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.lod(x_ptr + row * n_cols + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * n_cols + offs, x.to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm(x, weight, eps):
    y = torch.empty_like(x)
    _rms_norm_kernel[(x.numel() // x.shape[-1],)](x, weight, y, x.shape[-1], eps,
                                                  BLOCK=triton.next_power_of_2(x.shape[-1]))
    return y
