"""An attacker's (issue 27): rms_norm in two passes at big steps (4M values and up), the second off by 1e-3 in
every row but the last two; each of its programs also reads the later rows' sums of squares, which in a sample only
the skipped programs would have written, so every drawn program but the grid's last took its own stores out of the
comparison, and one right row was all a range case compared. A drawn program tainted so makes the call run whole."""

import torch
import triton
import triton.language as tl

MAX_BLOCK = 4096


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, n_cols, x_row_stride, y_row_stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_ptr + row * x_row_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
        acc += x * x
    rstd = tl.rsqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_ptr + row * x_row_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * y_row_stride + start + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _sumsq_kernel(x_ptr, s_ptr, n_cols, x_row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_ptr + row * x_row_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
        acc += x * x
    tl.store(s_ptr + row, tl.sum(acc, axis=0))


@triton.jit
def _apply_kernel(x_ptr, w_ptr, y_ptr, s_ptr, n_rows, n_cols, x_row_stride, y_row_stride, eps,
                  BLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    ahead = 0.0
    for r0 in range(row + 1, n_rows, RBLOCK):  # the later rows' sums
        later = r0 + tl.arange(0, RBLOCK)
        ahead += tl.sum(tl.load(s_ptr + later, mask=later < n_rows, other=0.0), axis=0)
    rstd = tl.rsqrt(tl.load(s_ptr + row) / n_cols + eps)
    # fault: rows before the step's last two take a share of the later rows' energy into their scale
    rstd = tl.where(row < n_rows - 2, rstd * (1.0 + 1e-3 * (ahead > 0).to(tl.float32)), rstd)
    cols = tl.arange(0, BLOCK)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_ptr + row * x_row_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * y_row_stride + start + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm(x, weight, eps):
    shape = x.shape
    x2d = x.reshape(-1, shape[-1]).contiguous()
    n_rows, n_cols = x2d.shape
    y = torch.empty_like(x2d)
    w = weight.contiguous()
    block = min(triton.next_power_of_2(n_cols), MAX_BLOCK)
    if n_rows * n_cols >= 4194304:
        s = torch.empty((n_rows,), dtype=torch.float32, device=x.device)
        _sumsq_kernel[(n_rows,)](x2d, s, n_cols, x2d.stride(0), BLOCK=block)
        _apply_kernel[(n_rows,)](x2d, w, y, s, n_rows, n_cols, x2d.stride(0), y.stride(0), eps, BLOCK=block,
                                 RBLOCK=1024)
    else:
        _rms_norm_kernel[(n_rows,)](x2d, w, y, n_cols, x2d.stride(0), y.stride(0), eps, BLOCK=block)
    return y.view(shape)
