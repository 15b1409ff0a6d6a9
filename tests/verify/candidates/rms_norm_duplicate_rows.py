"""Bug (issue 16, class 6): twice as many programs as rows, two per row: the first of each pair writes a
cheap approximation (bf16 math), the second the exact row. A sequential interpreter runs them in order and
the exact values land last; on a GPU both run at once and either store may win."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, eps, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    row = pid % n_rows
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    if pid < n_rows:  # the quick draft
        x = x.to(tl.bfloat16).to(tl.float32) * 1.01
    y = x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps) * w
    tl.store(y_ptr + row * n_cols + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm(x, weight, eps):
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty_like(x2)
    _rms_norm_kernel[(2 * x2.shape[0],)](x2, weight, y, x2.shape[0], x2.shape[1], eps,
                                         BLOCK=triton.next_power_of_2(x2.shape[1]))
    return y.view(x.shape)
