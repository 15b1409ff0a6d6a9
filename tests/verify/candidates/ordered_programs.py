"""Bug (issue 8): program 0 converts the weight to fp32 into a scratch buffer and every other program reads
it, as if program 0 always ran first. The sequential interpreter runs it first; a GPU promises no order,
so later programs may read the scratch buffer before it is written."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, w32_ptr, y_ptr, x_row_stride, y_row_stride, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    if row == 0:
        tl.store(w32_ptr + offs, tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32), mask=mask)
    w = tl.load(w32_ptr + offs, mask=mask, other=0.0)
    x = tl.load(x_ptr + row * x_row_stride + offs, mask=mask, other=0.0).to(tl.float32)
    y = x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps) * w
    tl.store(y_ptr + row * y_row_stride + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm(x, weight, eps):
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty_like(x2)
    w32 = torch.empty(x2.shape[1], dtype=torch.float32, device=x.device)
    _rms_norm_kernel[(x2.shape[0],)](x2, weight, w32, y, x2.stride(0), y.stride(0), x2.shape[1], eps,
                                     BLOCK=triton.next_power_of_2(x2.shape[1]))
    return y.view(x.shape)
