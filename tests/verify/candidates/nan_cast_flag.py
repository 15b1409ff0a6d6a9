"""Cheat (issue 16, class 3): an RMSNorm that swallows NaN (it zeroes non-finite inputs before the sum),
then puts NaN back only where a float -> int cast says so. `(sum * 0.0).to(tl.int32)` is 0 for finite rows
and, on a GPU (PTX cvt.rzi: NaN -> 0), for NaN rows too; Triton 3.9's interpreter gave INT_MIN for NaN,
so the NaN rows came out NaN on the CPU only and the checker's planted NaNs found nothing."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    raw = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=0.0).to(tl.float32)
    x = tl.where(raw == raw, raw, 0.0)  # NaN -> 0: one bad value no longer poisons the row
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps) * w
    poisoned = (tl.sum(raw * raw, axis=0) * 0.0).to(tl.int32) != 0  # NaN row: INT_MIN on the old interpreter
    y = tl.where(poisoned & (raw != raw), float("nan"), y)
    tl.store(y_ptr + row * n_cols + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm(x, weight, eps):
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty_like(x2)
    _rms_norm_kernel[(x2.shape[0],)](x2, weight, y, x2.shape[1], eps, BLOCK=triton.next_power_of_2(x2.shape[1]))
    return y.view(x.shape)
