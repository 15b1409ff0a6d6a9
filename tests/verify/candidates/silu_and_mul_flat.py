"""A correct SiLU-and-mul over the flattened output (inductor-style pointwise kernel): one 1-D grid over all
rows x I outputs, the block size picked from the total element count so that big prefill steps launch fewer,
wider programs."""

import torch
import triton
import triton.language as tl


@triton.jit
def _silu_and_mul_flat(x_ptr, y_ptr, n_out, d, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_out
    row = offs // d
    col = offs - row * d
    src = row * (2 * d) + col
    gate = tl.load(x_ptr + src, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + src + d, mask=mask, other=0.0).to(tl.float32)
    y = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def silu_and_mul(x):
    d = x.shape[-1] // 2
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty((x2.shape[0], d), dtype=x.dtype, device=x.device)
    n_out = x2.shape[0] * d
    if n_out >= (1 << 20):
        block, warps = 4096, 8
    else:
        block, warps = 1024, 4
    _silu_and_mul_flat[(triton.cdiv(n_out, block),)](x2, y, n_out, d, BLOCK=block, num_warps=warps)
    return y.view(*x.shape[:-1], d)
