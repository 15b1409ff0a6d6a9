"""Bug: loads the row without a mask, so for widths that are not a power of two it sums past the row."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + offs).to(tl.float32)
    w = tl.load(w_ptr + offs).to(tl.float32)
    y = x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps) * w
    tl.store(y_ptr + row * n_cols + offs, y.to(y_ptr.dtype.element_ty), mask=offs < n_cols)


def rms_norm(x, weight, eps):
    y = torch.empty_like(x)
    _rms_norm_kernel[(x.numel() // x.shape[-1],)](x, weight, y, x.shape[-1], eps,
                                                  BLOCK=triton.next_power_of_2(x.shape[-1]))
    return y
