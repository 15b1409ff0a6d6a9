"""A persistent kernel in Liger-Kernel's style: a grid of at most 4 programs per SM of an H200 (528), each looping
over rows with the grid's stride. One fault: the sum of squares is zeroed once, before the loop, so every row after a
program's first adds to the last one's. Right wherever each program gets one row (the ordinary cases' 256 rows);
wrong from 529 rows, which a range case (a served step's 2048 rows, its programs sampled) has."""

import torch
import triton
import triton.language as tl

PROGRAMS = 4 * 132


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, x_row_stride, y_row_stride, eps, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    sum_sq = tl.zeros((BLOCK,), dtype=tl.float32)  # the fault: belongs inside the loop
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        x = tl.load(x_ptr + row.to(tl.int64) * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        sum_sq += x * x
        rstd = tl.rsqrt(tl.sum(sum_sq, axis=0) / n_cols + eps)
        tl.store(y_ptr + row.to(tl.int64) * y_row_stride + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm(x, weight, eps):
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty_like(x2)
    n_rows, n_cols = x2.shape
    _rms_norm_kernel[(min(n_rows, PROGRAMS),)](x2, weight, y, n_rows, n_cols, x2.stride(0), y.stride(0), eps,
                                                BLOCK=triton.next_power_of_2(n_cols))
    return y.view(x.shape)
