"""A correct RoPE as vLLM computes it: one program per (token, head) of q or k, the cache row read at the position."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rope_kernel(pos_ptr, x_ptr, cache_ptr, y_ptr, heads, head_dim, half, token_stride, head_stride, cache_stride,
                 IS_NEOX: tl.constexpr, BLOCK: tl.constexpr, REST: tl.constexpr):
    pid = tl.program_id(0)
    token, head = pid // heads, pid % heads
    pos = tl.load(pos_ptr + token)
    j = tl.arange(0, BLOCK)
    mask = j < half
    c = tl.load(cache_ptr + pos * cache_stride + j, mask=mask, other=0.0).to(tl.float32)
    s = tl.load(cache_ptr + pos * cache_stride + half + j, mask=mask, other=0.0).to(tl.float32)
    if IS_NEOX:
        first, second = j, j + half
    else:
        first, second = 2 * j, 2 * j + 1
    src = x_ptr + token * token_stride + head * head_stride
    dst = y_ptr + pid * head_dim
    x1 = tl.load(src + first, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(src + second, mask=mask, other=0.0).to(tl.float32)
    tl.store(dst + first, (x1 * c - x2 * s).to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(dst + second, (x2 * c + x1 * s).to(y_ptr.dtype.element_ty), mask=mask)
    r = 2 * half + tl.arange(0, REST)  # the columns past rot_dim pass through
    tl.store(dst + r, tl.load(src + r, mask=r < head_dim), mask=r < head_dim)


def _rotate(positions, x, cache, is_neox):
    tokens, heads, head_dim = x.shape
    y = torch.empty((tokens, heads, head_dim), dtype=x.dtype, device=x.device)
    half = cache.shape[1] // 2
    _rope_kernel[(tokens * heads,)](positions, x, cache, y, heads, head_dim, half, x.stride(0), x.stride(1),
                                    cache.stride(0), IS_NEOX=is_neox, BLOCK=triton.next_power_of_2(half),
                                    REST=triton.next_power_of_2(max(1, head_dim - 2 * half)),
                                    enable_fp_fusion=False)  # the reference rounds each product before the sum
    return y


def rotary_embedding(positions, query, key, cos_sin_cache, is_neox):
    return _rotate(positions, query, cos_sin_cache, is_neox), _rotate(positions, key, cos_sin_cache, is_neox)
