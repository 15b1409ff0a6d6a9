"""A correct RMSNorm made slow on purpose: it reads each row REPEAT times (volatile loads, which the
compiler may not merge), so on a GPU it moves ~8x the bytes and must be judged `slower`. The GPU selfcheck
(autotune.selfcheck, section 5) uses it to show that the timing protocol can say no."""

import torch
import triton
import triton.language as tl

REPEAT = 8


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, x_row_stride, y_row_stride, n_cols, eps,
                     BLOCK: tl.constexpr, REPEAT: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    sum_sq = tl.zeros([BLOCK], dtype=tl.float32)
    for _ in range(REPEAT):  # the same row again: same sum each time, REPEAT times the traffic
        x = tl.load(x_ptr + row * x_row_stride + offs, mask=mask, other=0.0, volatile=True).to(tl.float32)
        sum_sq = x * x
    x = tl.load(x_ptr + row * x_row_stride + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(sum_sq, axis=0) / n_cols + eps)
    tl.store(y_ptr + row * y_row_stride + offs, (x * inv_rms * w).to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm(x, weight, eps):
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty_like(x2)
    n_rows, n_cols = x2.shape
    _rms_norm_kernel[(n_rows,)](x2, weight, y, x2.stride(0), y.stride(0), n_cols, eps,
                                BLOCK=triton.next_power_of_2(n_cols), REPEAT=REPEAT)
    return y.view(x.shape)
