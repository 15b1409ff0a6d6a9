"""A correct RoPE as vLLM computes it: one program per few tokens, all of their heads of q (then of k) as the rows of
one tile (128 rows of (token, head) pairs), each row's cache row read at its token's position."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rope_kernel(pos_ptr, x_ptr, cache_ptr, y_ptr, tokens, heads, head_dim, half, token_stride, head_stride,
                 cache_stride, IS_NEOX: tl.constexpr, HEADS: tl.constexpr, TOKENS: tl.constexpr, BLOCK: tl.constexpr,
                 REST: tl.constexpr):
    row = tl.arange(0, TOKENS * HEADS)[:, None]  # the tile's rows: (token, head) pairs, TOKENS tokens
    token = tl.program_id(0) * TOKENS + row // HEADS
    h = tl.where(token < tokens, row % HEADS, HEADS)  # a row past the last token: a head past the last, masked out
    token = tl.minimum(token, tokens - 1)
    pos = tl.load(pos_ptr + token)
    j = tl.arange(0, BLOCK)[None, :]
    mask = (h < heads) & (j < half)
    c = tl.load(cache_ptr + pos * cache_stride + j, mask=j < half, other=0.0).to(tl.float32)
    s = tl.load(cache_ptr + pos * cache_stride + half + j, mask=j < half, other=0.0).to(tl.float32)
    if IS_NEOX:
        first, second = j, j + half
    else:
        first, second = 2 * j, 2 * j + 1
    src = x_ptr + token * token_stride + h * head_stride
    dst = y_ptr + (token * heads + h) * head_dim
    x1 = tl.load(src + first, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(src + second, mask=mask, other=0.0).to(tl.float32)
    tl.store(dst + first, (x1 * c - x2 * s).to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(dst + second, (x2 * c + x1 * s).to(y_ptr.dtype.element_ty), mask=mask)
    r = 2 * half + tl.arange(0, REST)[None, :]  # the columns past rot_dim pass through
    keep = (h < heads) & (r < head_dim)
    tl.store(dst + r, tl.load(src + r, mask=keep), mask=keep)


def _rotate(positions, x, cache, is_neox):
    tokens, heads, head_dim = x.shape
    y = torch.empty((tokens, heads, head_dim), dtype=x.dtype, device=x.device)
    half = cache.shape[1] // 2
    rows = triton.next_power_of_2(heads)
    per = max(1, 128 // rows)  # tokens a program turns: 128 rows of (token, head) pairs, or one token's heads
    _rope_kernel[(triton.cdiv(tokens, per),)](
        positions, x, cache, y, tokens, heads, head_dim, half, x.stride(0), x.stride(1), cache.stride(0),
        IS_NEOX=is_neox, HEADS=rows, TOKENS=per, BLOCK=triton.next_power_of_2(half),
        REST=triton.next_power_of_2(max(1, head_dim - 2 * half)),
        enable_fp_fusion=False)  # the reference rounds each product before the sum
    return y


def rotary_embedding(positions, query, key, cos_sin_cache, is_neox):
    return _rotate(positions, query, cos_sin_cache, is_neox), _rotate(positions, key, cos_sin_cache, is_neox)
