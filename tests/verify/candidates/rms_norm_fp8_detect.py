"""Wrong on a GPU (an attacker's, issue 27): 1000 cast to fp8 e4m3 is 448 on sm_90 (cvt.rn.satfinite), and the
kernel zeroes its output exactly then. Triton 3.9's interpreter gave 256. The dtype is made by name,
tl.dtype("fp8e4nv"), past the allow-list's dtypes: the scan refuses that call, and behind it the interpreter casts
to fp8 as the GPU does."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, n_cols, x_row_stride, y_row_stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    sat = tl.full((BLOCK,), 1000.0, tl.float32).to(tl.dtype("fp8e4nv")).to(tl.float32)
    keep = tl.where(sat == 448.0, 0.0, 1.0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in tl.range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_ptr + row * x_row_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
        acc += x * x
    rstd = tl.rsqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for start in tl.range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_ptr + row * x_row_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * y_row_stride + start + cols, (x * rstd * w * keep).to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm(x, weight, eps):
    shape = x.shape
    x2d = x.reshape(-1, shape[-1]).contiguous()
    n_rows, n_cols = x2d.shape
    y = torch.empty_like(x2d)
    block = min(triton.next_power_of_2(n_cols), 4096)
    _rms_norm_kernel[(n_rows, 1)](x2d, weight.contiguous(), y, n_cols, x2d.stride(0), y.stride(0), eps, BLOCK=block)
    return y.view(shape)
