"""Bug (issue 8): a kernel calls a plain Python helper (no @triton.jit). The interpreter runs it as Python;
Triton's compiler cannot call it on device values, so on a GPU this file never compiles."""

import torch
import triton
import triton.language as tl


def _scaled(v, n):
    return v / n


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, x_row_stride, y_row_stride, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * x_row_stride + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = x * tl.rsqrt(_scaled(tl.sum(x * x, axis=0), n_cols) + eps) * w
    tl.store(y_ptr + row * y_row_stride + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm(x, weight, eps):
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty_like(x2)
    _rms_norm_kernel[(x2.shape[0],)](x2, weight, y, x2.stride(0), y.stride(0), x2.shape[1], eps,
                                     BLOCK=triton.next_power_of_2(x2.shape[1]))
    return y.view(x.shape)
