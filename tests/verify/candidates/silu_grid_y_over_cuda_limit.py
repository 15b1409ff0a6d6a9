"""SiLU-and-mul over the flattened output: one program per 256 output values, on grid axis 1 (an attacker's, issue
27). Right values everywhere, but [2048, 28672] (Llama 3 8B's gate_up at a 2048-token step) needs 114,688 programs
there and CUDA allows 65,535 on axes 1 and 2: on a GPU the served launch fails with 'invalid argument'."""

import torch
import triton
import triton.language as tl


@triton.jit
def _silu_and_mul_kernel(x_ptr, y_ptr, x_row_stride, d, n, BLOCK: tl.constexpr):
    offs = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    row = offs // d
    col = offs % d
    gate = tl.load(x_ptr + row * x_row_stride + col, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * x_row_stride + d + col, mask=mask, other=0.0).to(tl.float32)
    y = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def silu_and_mul(x):
    d = x.shape[-1] // 2
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty((x2.shape[0], d), dtype=x.dtype, device=x.device)
    n = x2.shape[0] * d
    # fault: the blocks go on grid axis 1, which CUDA caps at 65535 (a 2048-token step of Llama 3 8B needs 114688)
    _silu_and_mul_kernel[(1, triton.cdiv(n, 256))](x2, y, x2.stride(0), d, n, BLOCK=256)
    return y.view(*x.shape[:-1], d)
