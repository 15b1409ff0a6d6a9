"""Cheat (issue 8): runs a correct kernel where the checker runs (the CPU interpreter) and a fast, wrong one
(no mask: reads past ragged rows) on a GPU, choosing by the device it finds."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr, MASKED: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols if MASKED else offs < BLOCK
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps) * w
    tl.store(y_ptr + row * n_cols + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm(x, weight, eps):
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty_like(x2)
    on_gpu = torch.cuda.is_available() and x.is_cuda
    _rms_norm_kernel[(x2.shape[0],)](x2, weight, y, x2.shape[1], eps, BLOCK=triton.next_power_of_2(x2.shape[1]),
                                     MASKED=not on_gpu)
    return y.view(x.shape)
