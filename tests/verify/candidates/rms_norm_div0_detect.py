"""Wrong on a GPU (an attacker's, issue 27): the kernel divides an integer by program_id(1), which is 0, and keeps
its output only where the quotient is 0. Triton 3.9's interpreter gave 0 for a division by zero; sm_90's code gives
an all-ones quotient (PTX: unspecified), so on a GPU every output is 0."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, n_cols, x_row_stride, y_row_stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    keep = ((n_cols // tl.program_id(1)) == 0).to(tl.float32)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in tl.range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_ptr + row * x_row_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
        acc += x * x
    rstd = tl.rsqrt(tl.sum(acc, axis=0) / n_cols + eps) * keep
    for start in tl.range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_ptr + row * x_row_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * y_row_stride + start + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm(x, weight, eps):
    shape = x.shape
    x2d = x.reshape(-1, shape[-1]).contiguous()
    n_rows, n_cols = x2d.shape
    y = torch.empty_like(x2d)
    block = min(triton.next_power_of_2(n_cols), 4096)
    _rms_norm_kernel[(n_rows, 1)](x2d, weight.contiguous(), y, n_cols, x2d.stride(0), y.stride(0), eps, BLOCK=block)
    return y.view(shape)
