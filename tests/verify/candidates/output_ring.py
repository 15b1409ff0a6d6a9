"""Wrong: returns one of three output buffers it keeps (kept while the size stays), in turn. Reuse used to be
checked only across the three calls of one case, where the ring never comes back round; a caller that
holds the fourth output sees the first one overwritten."""

import torch
import triton
import triton.language as tl

RING = [None, None, None]
TURN = [0]


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
    slot = TURN[0] % 3
    TURN[0] += 1
    y = RING[slot]
    if y is None or y.shape != x2.shape or y.dtype != x2.dtype:  # a new size: a new buffer in this slot
        y = torch.empty_like(x2)
        RING[slot] = y
    _rms_norm_kernel[(x2.shape[0],)](x2, weight, y, x2.shape[1], eps, BLOCK=triton.next_power_of_2(x2.shape[1]))
    return y.view(x.shape)
