"""Wrong at a served step's rows: a persistent rms_norm (a grid of at most 4 programs per SM, each normalising a
contiguous block of rows) whose share of rows per program rounds down (`n_rows // nprog`, not a ceiling), so the
last n_rows % 528 rows are never written; every row count up to 528 is right."""

import torch
import triton
import triton.language as tl

MAX_BLOCK = 4096
NUM_SMS = 132  # H100/H200 SXM
PROGRAMS_PER_SM = 4


@triton.jit
def _rms_norm_kernel(
    x_ptr, w_ptr, y_ptr,
    n_rows, n_cols,
    x_row_stride, y_row_stride,
    eps,
    BLOCK: tl.constexpr, SINGLE_PASS: tl.constexpr,
):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    rows_per_prog = n_rows // nprog
    first = pid * rows_per_prog
    cols = tl.arange(0, BLOCK)
    for r in tl.range(0, rows_per_prog):
        row = (first + r).to(tl.int64)
        x_row = x_ptr + row * x_row_stride
        y_row = y_ptr + row * y_row_stride
        if SINGLE_PASS:
            mask = cols < n_cols
            x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
            w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_row + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)
        else:
            acc = tl.zeros((BLOCK,), dtype=tl.float32)
            for start in tl.range(0, n_cols, BLOCK):
                mask = start + cols < n_cols
                x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
                acc += x * x
            rstd = tl.rsqrt(tl.sum(acc, axis=0) / n_cols + eps)
            for start in tl.range(0, n_cols, BLOCK):
                mask = start + cols < n_cols
                x = tl.load(x_row + start + cols, mask=mask, other=0.0)
                w = tl.load(w_ptr + start + cols, mask=mask, other=0.0)
                y = x.to(tl.float32) * rstd * w.to(tl.float32)
                tl.store(y_row + start + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm(x, weight, eps):
    shape = x.shape
    x2d = x.reshape(-1, shape[-1]).contiguous()
    n_rows, n_cols = x2d.shape
    y = torch.empty_like(x2d)
    block = min(triton.next_power_of_2(n_cols), MAX_BLOCK)
    num_warps = min(16, max(4, block // 512))
    grid = (min(n_rows, NUM_SMS * PROGRAMS_PER_SM),)
    _rms_norm_kernel[grid](
        x2d, weight.contiguous(), y,
        n_rows, n_cols,
        x2d.stride(0), y.stride(0),
        eps,
        BLOCK=block, SINGLE_PASS=n_cols <= block,
        num_warps=num_warps,
    )
    return y.view(shape)
