"""A correct RMSNorm written as production launchers are: a nested grid function of META and a launch config
copied and trimmed (dict.copy, dict.pop), as FlagGems' and vLLM's wrappers write them; a parameter named like a
builtin (`input`)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * stride + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps) * w
    tl.store(y_ptr + row * stride + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm(input, weight, eps):
    x = input.reshape(-1, input.shape[-1]).contiguous()
    y = torch.empty_like(x)
    rows, cols = x.shape
    config = {"BLOCK": triton.next_power_of_2(cols), "num_warps": 4, "unused": 1}
    launch = config.copy()
    launch.pop("unused")

    def grid(META):
        return (rows,)

    _rms_norm_kernel[grid](x, weight, y, x.stride(0), cols, eps, **launch)
    return y.view(input.shape)
