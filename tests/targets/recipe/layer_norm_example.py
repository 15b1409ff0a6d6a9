"""layer_norm as one Triton kernel: y = (x - mean) * rsqrt(var + eps) * weight + bias over the last dim.

One program per row. A row up to MAX_BLOCK wide is loaded once and kept in registers; a wider row is read three
times in chunks (mean, variance about the mean, normalise): the two-pass variance keeps fp32 accurate where
E[x^2] - mean^2 would cancel.
"""

import torch
import triton
import triton.language as tl

MAX_BLOCK = 4096


@triton.jit
def _layer_norm_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr,
    n_cols,
    x_row_stride, y_row_stride,
    eps,
    BLOCK: tl.constexpr, SINGLE_PASS: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    y_row = y_ptr + row * y_row_stride
    cols = tl.arange(0, BLOCK)
    if SINGLE_PASS:
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=0) / n_cols
        d = tl.where(mask, x - mean, 0.0)
        rstd = tl.rsqrt(tl.sum(d * d, axis=0) / n_cols + eps)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + cols, (d * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for start in tl.range(0, n_cols, BLOCK):
            acc += tl.load(x_row + start + cols, mask=start + cols < n_cols, other=0.0).to(tl.float32)
        mean = tl.sum(acc, axis=0) / n_cols
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for start in tl.range(0, n_cols, BLOCK):
            mask = start + cols < n_cols
            x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
            d = tl.where(mask, x - mean, 0.0)
            acc += d * d
        rstd = tl.rsqrt(tl.sum(acc, axis=0) / n_cols + eps)
        for start in tl.range(0, n_cols, BLOCK):
            mask = start + cols < n_cols
            x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
            b = tl.load(b_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_row + start + cols, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


def layer_norm(x, weight, bias, eps):
    shape = x.shape
    x2d = x.reshape(-1, shape[-1]).contiguous()  # [rows, H]
    n_rows, n_cols = x2d.shape
    y = torch.empty_like(x2d)
    block = min(triton.next_power_of_2(n_cols), MAX_BLOCK)
    _layer_norm_kernel[(n_rows,)](
        x2d, weight.contiguous(), bias.contiguous(), y,
        n_cols,
        x2d.stride(0), y.stride(0),
        eps,
        BLOCK=block, SINGLE_PASS=n_cols <= block,
        num_warps=min(16, max(4, block // 512)),
    )
    return y.view(shape)
