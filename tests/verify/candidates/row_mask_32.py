"""Wrong: normalises 32 rows per program and, from 32 rows up, launches rows // 32 programs with no row
mask, as if the row count were a multiple of 32 (it was, in every case with 32 rows or more): the
last rows of 37 are never written."""

import torch
import triton
import triton.language as tl

ROWS = 32


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, eps, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * n_cols + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(x * x, axis=1) / n_cols + eps)
    y = x * inv_rms[:, None] * w[None, :]
    tl.store(y_ptr + rows[:, None] * n_cols + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm(x, weight, eps):
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty_like(x2)
    n_rows, n_cols = x2.shape
    programs = n_rows // ROWS if n_rows >= ROWS else 1
    _rms_norm_kernel[(programs,)](x2, weight, y, n_rows, n_cols, eps, ROWS=ROWS,
                                  BLOCK=triton.next_power_of_2(n_cols))
    return y.view(x.shape)
