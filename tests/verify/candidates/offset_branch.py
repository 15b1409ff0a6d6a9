"""Wrong: branches on storage_offset(). Every input used to sit at an offset inside the checker's guard
band, so the branch for offset 0 (where the served model's tensors usually start) was never run."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps) * w
    tl.store(y_ptr + row * n_cols + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm(x, weight, eps):
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty_like(x2)
    n_rows, n_cols = x2.shape
    if x.storage_offset() == 0:
        n_rows = n_rows // 2 + 1  # a "fast path" that was never checked
    _rms_norm_kernel[(n_rows,)](x2, weight, y, n_cols, eps, BLOCK=triton.next_power_of_2(n_cols))
    return y.view(x.shape)
