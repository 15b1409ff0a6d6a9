"""A correct RMSNorm in Triton, used by the publishing tests as the kernel that gets proposed and merged.

One program per row; the row is read in BLOCK-wide chunks (twice: sum of squares, then scale), so any
width works, powers of two or not; math in fp32, output in x's dtype.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, n_cols, stride_x, stride_y, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_x + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride_y + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm(x, weight, eps):
    shape = x.shape
    x2 = x.reshape(-1, shape[-1]).contiguous()
    w = weight.contiguous()
    y = torch.empty_like(x2)
    rows, cols = x2.shape
    block = min(triton.next_power_of_2(cols), 1024)
    _rms_norm_kernel[(rows,)](x2, w, y, cols, x2.stride(0), y.stride(0), eps, BLOCK=block)
    return y.reshape(shape)
