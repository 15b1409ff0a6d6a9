"""A correct residual add + RMSNorm + per-token int8 quantization: one program per row; returns (q, scale, sum)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _fused_quant_kernel(x_ptr, r_ptr, w_ptr, q_ptr, scale_ptr, s_ptr, n_cols, x_stride, eps,
                        BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * x_stride + offs, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + row * n_cols + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    s = x + r
    tl.store(s_ptr + row * n_cols + offs, s.to(s_ptr.dtype.element_ty), mask=mask)
    inv_rms = tl.rsqrt(tl.sum(s * s, axis=0) / n_cols + eps)
    # the unfused sequence rounds y to the activations' dtype before quantizing it: so does this kernel
    y = (s * inv_rms * w).to(s_ptr.dtype.element_ty).to(tl.float32)
    y = tl.where(mask, y, 0.0)
    scale = tl.maximum(tl.max(tl.abs(y), axis=0), 1e-10) / 127.0
    v = y / scale
    v = tl.where(v != v, 0.0, tl.minimum(tl.maximum(v, -127.0), 127.0))
    v = (v + 12582912.0) - 12582912.0  # round half to even: 1.5 * 2**23 leaves no fraction bits in fp32
    tl.store(q_ptr + row * n_cols + offs, v.to(tl.int8), mask=mask)
    tl.store(scale_ptr + row, scale)


def fused_add_rms_norm_quant(x, residual, weight, eps):
    x2 = x.reshape(-1, x.shape[-1])
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    r2 = residual.reshape(-1, x.shape[-1]).contiguous()
    rows, cols = x2.shape
    q = torch.empty((rows, cols), dtype=torch.int8, device=x.device)
    scale = torch.empty((rows, 1), dtype=torch.float32, device=x.device)
    s = torch.empty((rows, cols), dtype=x.dtype, device=x.device)
    _fused_quant_kernel[(rows,)](x2, r2, weight, q, scale, s, cols, x2.stride(0), eps,
                                 BLOCK=triton.next_power_of_2(cols))
    lead = x.shape[:-1]
    return q.view(x.shape), scale.view(*lead, 1), s.view(x.shape)
