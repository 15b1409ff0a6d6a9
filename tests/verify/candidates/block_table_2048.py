"""Wrong: a block-size table with a wrong entry for 2048 (1024, a typo), in a kernel that covers the row
with one block; no case used width 2048, the hidden size of Llama 3.2 1B."""

import torch
import triton
import triton.language as tl

BLOCKS = ((128, 128), (1024, 1024), (2048, 1024), (4096, 4096), (8192, 8192))  # (width, block)


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps) * w
    tl.store(y_ptr + row * n_cols + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm(x, weight, eps):
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty_like(x2)
    n_rows, n_cols = x2.shape
    block = triton.next_power_of_2(n_cols)
    for width, tabled in BLOCKS:
        if width == n_cols:
            block = tabled
    _rms_norm_kernel[(n_rows,)](x2, weight, y, n_cols, eps, BLOCK=block)
    return y.view(x.shape)
