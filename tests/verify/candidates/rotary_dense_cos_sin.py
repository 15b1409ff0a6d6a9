"""WRONG ON PURPOSE (issue 27, class 3): the example RoPE without `.contiguous()` on cos and sin, which it then
indexes as dense [T, D/2] rows. Right for the dense tensors every plan drew; wrong for the cos and sin autotune's own
vLLM plugin hands over (`cos_sin_cache.index_select(0, positions).chunk(2, -1)`: row stride D, sin at D/2)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rotary_kernel(x_ptr, cos_ptr, sin_ptr, y_ptr, heads, half, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    token = pid // heads
    offs = tl.arange(0, BLOCK)
    mask = offs < half
    base = pid * 2 * half
    x1 = tl.load(x_ptr + base + offs, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + base + half + offs, mask=mask, other=0.0).to(tl.float32)
    c = tl.load(cos_ptr + token * half + offs, mask=mask, other=0.0)
    s = tl.load(sin_ptr + token * half + offs, mask=mask, other=0.0)
    tl.store(y_ptr + base + offs, (x1 * c - x2 * s).to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(y_ptr + base + half + offs, (x2 * c + x1 * s).to(y_ptr.dtype.element_ty), mask=mask)


def rotary_embedding(x, cos, sin):
    tokens, heads, head_dim = x.shape
    x = x.contiguous()
    y = torch.empty_like(x)
    half = head_dim // 2
    _rotary_kernel[(tokens * heads,)](x, cos, sin, y, heads, half,
                                      BLOCK=triton.next_power_of_2(half))
    return y
