"""Bug: besides its output, stores a block just past the end of its input x (an out-of-bounds write that
lands in someone else's memory on a GPU; here it lands in the checker's guard band)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps) * w
    tl.store(y_ptr + row * n_cols + offs, y.to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(x_ptr + n_rows * n_cols + offs, y.to(x_ptr.dtype.element_ty), mask=mask)


def rms_norm(x, weight, eps):
    y = torch.empty_like(x)
    n_rows = x.numel() // x.shape[-1]
    _rms_norm_kernel[(n_rows,)](x, weight, y, n_rows, x.shape[-1], eps, BLOCK=triton.next_power_of_2(x.shape[-1]))
    return y
