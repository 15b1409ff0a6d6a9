"""Bug: sums the squares in the input's own dtype; in fp16, inputs in the hundreds overflow to Inf."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=0.0)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    sum_sq = tl.sum(x * x, axis=0).to(tl.float32)
    y = x.to(tl.float32) * tl.rsqrt(sum_sq / n_cols + eps) * w
    tl.store(y_ptr + row * n_cols + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm(x, weight, eps):
    y = torch.empty_like(x)
    _rms_norm_kernel[(x.numel() // x.shape[-1],)](x, weight, y, x.shape[-1], eps,
                                                  BLOCK=triton.next_power_of_2(x.shape[-1]))
    return y
