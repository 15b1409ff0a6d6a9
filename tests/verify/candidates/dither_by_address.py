"""Wrong: output dithered by the output's address (eps nudged by it), within every tolerance; two calls on the
same inputs differ bitwise, which used to be only a note."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, x_row_stride, y_row_stride, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
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
    # its address decides the last bits: never the same twice, always within tolerance
    _rms_norm_kernel[(n_rows,)](x2, weight, y, x2.stride(0), y.stride(0), n_cols, eps * (1 + (y.data_ptr() % 4093) * 1e-9),
                                BLOCK=triton.next_power_of_2(n_cols))
    return y.view(x.shape)
