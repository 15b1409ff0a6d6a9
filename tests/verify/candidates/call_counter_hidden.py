"""Wrong after 2,048 calls: counts its calls in an attribute of triton.language (a module the host does not
freeze; the static scan would refuse the attribute store) and doubles eps from then on."""
import torch
import triton
import triton.language as tl

@triton.jit
def _k(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps) * w
    tl.store(y_ptr + row * n_cols + offs, y.to(y_ptr.dtype.element_ty), mask=mask)

def rms_norm(x, weight, eps):
    calls = tl  # a hidden counter: an attribute of a module the host does not freeze
    n = getattr(calls, "_n", 0) + 1
    setattr(calls, "_n", n)
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty_like(x2)
    _k[(x2.shape[0],)](x2, weight, y, x2.shape[1], eps * (2.0 if n > 2048 else 1.0), BLOCK=triton.next_power_of_2(x2.shape[1]))
    return y.view(x.shape)
