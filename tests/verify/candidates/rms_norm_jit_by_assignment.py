"""A correct RMSNorm whose kernel is made by assignment, as Liger-Kernel and vLLM write a kernel shared by two
configurations: `_k = triton.heuristics({...})(triton.jit(_body))`."""

import torch
import triton
import triton.language as tl


def _body(x_ptr, w_ptr, y_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * stride + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps) * w
    tl.store(y_ptr + row * stride + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


_k = triton.heuristics({"BLOCK": lambda args: triton.next_power_of_2(args["n_cols"])})(triton.jit(_body))


def rms_norm(x, weight, eps):
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty_like(x2)
    _k[(x2.shape[0],)](x2, weight, y, x2.stride(0), x2.shape[1], eps)
    return y.view(x.shape)
