"""A correct rotate-half RoPE in the style of vLLM's Triton kernels: one program per token, the token's
heads in `tl.static_range` steps of HEADS_PER_STEP, every tensor addressed through its own strides (q and k
in vLLM are views of the fused qkv projection, so a head's row stride is larger than its width), cos and
sin loaded once per token and kept for all of its heads."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rotate_half(x1, x2, c, s):
    return x1 * c - x2 * s, x2 * c + x1 * s


@triton.jit
def _rotary_kernel(x_ptr, cos_ptr, sin_ptr, y_ptr,
                   n_heads, half,
                   x_token_stride, x_head_stride, y_token_stride, y_head_stride, cos_stride, sin_stride,
                   BLOCK: tl.constexpr, HEADS_PER_STEP: tl.constexpr, STEPS: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)[None, :]
    col_ok = cols < half
    c = tl.load(cos_ptr + token * cos_stride + cols, mask=col_ok, other=0.0).to(tl.float32)
    s = tl.load(sin_ptr + token * sin_stride + cols, mask=col_ok, other=0.0).to(tl.float32)
    for step in tl.static_range(STEPS):
        heads = step * HEADS_PER_STEP + tl.arange(0, HEADS_PER_STEP)[:, None]
        mask = (heads < n_heads) & col_ok
        x_row = x_ptr + token * x_token_stride + heads * x_head_stride
        y_row = y_ptr + token * y_token_stride + heads * y_head_stride
        x1 = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        x2 = tl.load(x_row + half + cols, mask=mask, other=0.0).to(tl.float32)
        o1, o2 = _rotate_half(x1, x2, c, s)
        tl.store(y_row + cols, o1.to(y_ptr.dtype.element_ty), mask=mask)
        tl.store(y_row + half + cols, o2.to(y_ptr.dtype.element_ty), mask=mask)


def rotary_embedding(x, cos, sin):
    n_tokens, n_heads, head_dim = x.shape
    if x.stride(-1) != 1:
        x = x.contiguous()
    if cos.stride(-1) != 1 or sin.stride(-1) != 1:
        cos, sin = cos.contiguous(), sin.contiguous()
    half = head_dim // 2
    y = torch.empty((n_tokens, n_heads, head_dim), dtype=x.dtype, device=x.device)
    heads_per_step = min(8, triton.next_power_of_2(n_heads))
    _rotary_kernel[(n_tokens,)](
        x, cos, sin, y,
        n_heads, half,
        x.stride(0), x.stride(1), y.stride(0), y.stride(1), cos.stride(0), sin.stride(0),
        BLOCK=triton.next_power_of_2(half), HEADS_PER_STEP=heads_per_step,
        STEPS=triton.cdiv(n_heads, heads_per_step),
        # the reference rounds each product before subtracting; a fused multiply-add would round once
        enable_fp_fusion=False,
    )
    return y
