"""Wrong only at served sizes: from 2,048 rows (a prefill step) of 4,096 or more it launches with ROWS=2, a
specialisation that writes half the rows; the CPU plan's ordinary cases cut rows to 256 and its range cases keep at
most 4M values (2,048 rows of 256, or 1,024 of 4,096), so no compared case takes that path: the dry call at the
served shape names it, and the probe that makes it too (the served rows, the width being whole) runs it, sampled."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, x_row_stride, y_row_stride, n_cols, eps, BLOCK: tl.constexpr,
                     ROWS: tl.constexpr):
    row = tl.program_id(0)  # with ROWS=2 the row after it is never written: a bug in code no case ran
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * x_row_stride + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    y = x * inv_rms * w
    tl.store(y_ptr + row * y_row_stride + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm(x, weight, eps):
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty_like(x2)
    n_rows, n_cols = x2.shape
    if n_rows >= 2048 and n_cols >= 4096:  # a served step of many tokens: two rows a program (the odd one dropped)
        _rms_norm_kernel[(n_rows // 2,)](x2, weight, y, 2 * x2.stride(0), 2 * y.stride(0), n_cols, eps,
                                         BLOCK=triton.next_power_of_2(n_cols), ROWS=2)
    else:
        _rms_norm_kernel[(n_rows,)](x2, weight, y, x2.stride(0), y.stride(0), n_cols, eps,
                                    BLOCK=triton.next_power_of_2(n_cols), ROWS=1)
    return y.view(x.shape)
