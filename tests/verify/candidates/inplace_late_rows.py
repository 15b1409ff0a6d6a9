"""Wrong for the test-only in-place target (tests/verify/inplace_target.py) beyond the ordinary cases' rows: its
in-place write to `residual` is off by one from row 256 on; only a range case at the served rows (2048) has such
a row, and there only what the sampled programs wrote in place can be compared."""

import torch
import triton
import triton.language as tl


@triton.jit
def _add_rms_norm_kernel(x_ptr, r_ptr, w_ptr, y_ptr, n_cols, eps, WRITE_X: tl.constexpr, WRITE_R: tl.constexpr,
                         BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + row * n_cols + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    s = x + r
    inv_rms = tl.rsqrt(tl.sum(s * s, axis=0) / n_cols + eps)
    tl.store(y_ptr + row * n_cols + offs, (s * inv_rms * w).to(y_ptr.dtype.element_ty), mask=mask)
    if WRITE_R:
        tl.store(r_ptr + row * n_cols + offs, (s + (row >= 256)).to(r_ptr.dtype.element_ty), mask=mask)
    if WRITE_X:
        tl.store(x_ptr + row * n_cols + offs, s.to(x_ptr.dtype.element_ty), mask=mask)


WRITE_X, WRITE_R = False, True


def add_rms_norm_inplace(x, residual, weight, eps):
    n_cols = x.shape[-1]
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _add_rms_norm_kernel[(x.numel() // n_cols,)](x, residual, weight, y, n_cols, eps, WRITE_X=WRITE_X,
                                                 WRITE_R=WRITE_R, BLOCK=triton.next_power_of_2(n_cols))
    return y
