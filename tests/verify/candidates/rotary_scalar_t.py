"""A correct RoPE computed as vLLM's CUDA kernel computes it (`scalar_t` math in csrc/pos_encoding_kernels.cu): the
cache row and q/k loaded in their dtype, each product and sum rounded to it. Against an fp32-math reference it was
3.7x the reference's largest error in fp16 and was rejected; the reference now computes as vLLM does."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rope_kernel(pos_ptr, x_ptr, cache_ptr, y_ptr, heads, head_dim, half, token_stride, head_stride, cache_stride,
                 IS_NEOX: tl.constexpr, HEADS: tl.constexpr, BLOCK: tl.constexpr, REST: tl.constexpr):
    token = tl.program_id(0)
    pos = tl.load(pos_ptr + token)
    h = tl.arange(0, HEADS)[:, None]
    j = tl.arange(0, BLOCK)[None, :]
    mask = (h < heads) & (j < half)
    c = tl.load(cache_ptr + pos * cache_stride + j, mask=j < half, other=0.0)
    s = tl.load(cache_ptr + pos * cache_stride + half + j, mask=j < half, other=0.0)
    if IS_NEOX:
        first, second = j, j + half
    else:
        first, second = 2 * j, 2 * j + 1
    src = x_ptr + token * token_stride + h * head_stride
    dst = y_ptr + (token * heads + h) * head_dim
    x1 = tl.load(src + first, mask=mask, other=0.0)
    x2 = tl.load(src + second, mask=mask, other=0.0)
    tl.store(dst + first, (x1 * c - x2 * s).to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(dst + second, (x2 * c + x1 * s).to(y_ptr.dtype.element_ty), mask=mask)
    r = 2 * half + tl.arange(0, REST)[None, :]  # the columns past rot_dim pass through
    keep = (h < heads) & (r < head_dim)
    tl.store(dst + r, tl.load(src + r, mask=keep), mask=keep)


def _rotate(positions, x, cache, is_neox):
    tokens, heads, head_dim = x.shape
    y = torch.empty((tokens, heads, head_dim), dtype=x.dtype, device=x.device)
    half = cache.shape[1] // 2
    _rope_kernel[(tokens,)](positions, x, cache, y, heads, head_dim, half, x.stride(0), x.stride(1), cache.stride(0),
                            IS_NEOX=is_neox, HEADS=triton.next_power_of_2(heads), BLOCK=triton.next_power_of_2(half),
                            REST=triton.next_power_of_2(max(1, head_dim - 2 * half)),
                            enable_fp_fusion=False)  # the reference rounds each product before the sum
    return y


def rotary_embedding(positions, query, key, cos_sin_cache, is_neox):
    return _rotate(positions, query, cos_sin_cache, is_neox), _rotate(positions, key, cos_sin_cache, is_neox)
