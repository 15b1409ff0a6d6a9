"""Wrong: output_ring.py's ring of three kept output buffers, hidden where the host's check of its module's globals
does not look (an object's attribute: with the static scan on, neither `types` nor the attribute store would pass).
The device still sees a call use a storage an earlier call allocated."""

import types

import torch
import triton
import triton.language as tl

STATE = types.SimpleNamespace(ring=[None, None, None], turn=0)


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
    slot = STATE.turn % 3
    STATE.turn += 1
    y = STATE.ring[slot]
    if y is None or y.shape != x2.shape or y.dtype != x2.dtype:
        y = torch.empty_like(x2)
        STATE.ring[slot] = y
    _rms_norm_kernel[(x2.shape[0],)](x2, weight, y, x2.shape[1], eps, BLOCK=triton.next_power_of_2(x2.shape[1]))
    return y.view(x.shape)
