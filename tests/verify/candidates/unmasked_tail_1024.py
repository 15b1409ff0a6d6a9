"""Wrong: loops over a wide row in blocks of 1024 and masks only rows narrower than one block, so for
widths above 1024 that are not a multiple of 1024 the last block reads past the row (the next row's
values, or the guard's NaN) into the sum. Every width above 1024 used to be a multiple of 1024."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr, MASKED: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        if MASKED:
            x = tl.load(x_ptr + row * n_cols + offs, mask=offs < n_cols, other=0.0).to(tl.float32)
        else:
            x = tl.load(x_ptr + row * n_cols + offs).to(tl.float32)
        acc += x * x
    inv_rms = tl.rsqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n_cols
        x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * n_cols + offs, (x * inv_rms * w).to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm(x, weight, eps):
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty_like(x2)
    n_rows, n_cols = x2.shape
    _rms_norm_kernel[(n_rows,)](x2, weight, y, n_cols, eps, BLOCK=1024, MASKED=n_cols < 1024)
    return y.view(x.shape)
