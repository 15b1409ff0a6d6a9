"""A correct RoPE in the style of vLLM's Triton kernels: one program per token for q and k together, the token's
heads in `tl.static_range` steps of HEADS_PER_STEP, every tensor addressed through its own strides (q and k in vLLM
are views of the fused qkv projection, so a head's row stride is larger than its width), the position's cache row
loaded once per token and kept for all of its heads; the style a constexpr, the pass-through columns a second
block."""

import torch
import triton
import triton.language as tl


@triton.jit
def _turn(x1, x2, c, s):
    return x1 * c - x2 * s, x2 * c + x1 * s


@triton.jit
def _rotate_heads(x_ptr, y_ptr, token, n_heads, head_dim, half, c, s, x_token_stride, x_head_stride,
                  y_token_stride, y_head_stride,
                  IS_NEOX: tl.constexpr, BLOCK: tl.constexpr, REST: tl.constexpr, HEADS_PER_STEP: tl.constexpr,
                  STEPS: tl.constexpr):
    cols = tl.arange(0, BLOCK)[None, :]
    col_ok = cols < half
    first = cols if IS_NEOX else 2 * cols
    second = cols + half if IS_NEOX else 2 * cols + 1
    rest = 2 * half + tl.arange(0, REST)[None, :]
    for step in tl.static_range(STEPS):
        heads = step * HEADS_PER_STEP + tl.arange(0, HEADS_PER_STEP)[:, None]
        mask = (heads < n_heads) & col_ok
        x_row = x_ptr + token * x_token_stride + heads * x_head_stride
        y_row = y_ptr + token * y_token_stride + heads * y_head_stride
        x1 = tl.load(x_row + first, mask=mask, other=0.0).to(tl.float32)
        x2 = tl.load(x_row + second, mask=mask, other=0.0).to(tl.float32)
        o1, o2 = _turn(x1, x2, c, s)
        tl.store(y_row + first, o1.to(y_ptr.dtype.element_ty), mask=mask)
        tl.store(y_row + second, o2.to(y_ptr.dtype.element_ty), mask=mask)
        keep = (heads < n_heads) & (rest < head_dim)
        tl.store(y_row + rest, tl.load(x_row + rest, mask=keep), mask=keep)


@triton.jit
def _rotary_kernel(pos_ptr, q_ptr, k_ptr, cache_ptr, qo_ptr, ko_ptr,
                   n_q, n_k, head_dim, half, cache_stride,
                   q_token_stride, q_head_stride, k_token_stride, k_head_stride,
                   qo_token_stride, qo_head_stride, ko_token_stride, ko_head_stride,
                   IS_NEOX: tl.constexpr, BLOCK: tl.constexpr, REST: tl.constexpr, HEADS_PER_STEP: tl.constexpr,
                   Q_STEPS: tl.constexpr, K_STEPS: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)[None, :]
    row = cache_ptr + tl.load(pos_ptr + token) * cache_stride
    c = tl.load(row + cols, mask=cols < half, other=0.0).to(tl.float32)
    s = tl.load(row + half + cols, mask=cols < half, other=0.0).to(tl.float32)
    _rotate_heads(q_ptr, qo_ptr, token, n_q, head_dim, half, c, s, q_token_stride, q_head_stride, qo_token_stride,
                  qo_head_stride, IS_NEOX, BLOCK, REST, HEADS_PER_STEP, Q_STEPS)
    _rotate_heads(k_ptr, ko_ptr, token, n_k, head_dim, half, c, s, k_token_stride, k_head_stride, ko_token_stride,
                  ko_head_stride, IS_NEOX, BLOCK, REST, HEADS_PER_STEP, K_STEPS)


def rotary_embedding(positions, query, key, cos_sin_cache, is_neox):
    n_tokens, n_q, head_dim = query.shape
    n_k = key.shape[1]
    if query.stride(-1) != 1 or key.stride(-1) != 1:
        query, key = query.contiguous(), key.contiguous()
    q_out = torch.empty((n_tokens, n_q, head_dim), dtype=query.dtype, device=query.device)
    k_out = torch.empty((n_tokens, n_k, head_dim), dtype=key.dtype, device=key.device)
    half = cos_sin_cache.shape[1] // 2
    step = min(8, triton.next_power_of_2(max(n_q, n_k)))
    _rotary_kernel[(n_tokens,)](
        positions, query, key, cos_sin_cache, q_out, k_out,
        n_q, n_k, head_dim, half, cos_sin_cache.stride(0),
        query.stride(0), query.stride(1), key.stride(0), key.stride(1),
        q_out.stride(0), q_out.stride(1), k_out.stride(0), k_out.stride(1),
        IS_NEOX=is_neox, BLOCK=triton.next_power_of_2(half),
        REST=triton.next_power_of_2(max(1, head_dim - 2 * half)), HEADS_PER_STEP=step,
        Q_STEPS=triton.cdiv(n_q, step), K_STEPS=triton.cdiv(n_k, step),
        # the reference rounds each product before subtracting; a fused multiply-add would round once
        enable_fp_fusion=False,
    )
    return q_out, k_out
