"""Wrong (issue 27, class 2): the example decode kernel with the softmax scale it is given replaced by
head_dim ** -0.5, the value every model but Gemma 2 (query_pre_attn_scalar 144, head_dim 256) passes. Right
whenever the caller's scale is the head dim's; a checker that never varies `scale` cannot tell."""

import torch
import triton
import triton.language as tl


@triton.jit
def _decode_kernel(q_ptr, k_ptr, v_ptr, slots_ptr, lens_ptr, out_ptr, scale, n_heads, group, head_dim,
                   k_s0, k_s1, k_s2, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    slot = tl.load(slots_ptr + seq).to(tl.int64)
    ctx = tl.load(lens_ptr + seq)
    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, BLOCK_D)
    q_mask = (g < group)[:, None] & (d < head_dim)[None, :]
    rows = (seq * n_heads + kv_head * group + g) * head_dim  # query heads h*group .. h*group+group-1
    q = tl.load(q_ptr + rows[:, None] + d[None, :], mask=q_mask, other=0.0)  # [G, D]
    base = slot * k_s0 + kv_head * k_s1
    m = tl.full((BLOCK_G,), -float("inf"), dtype=tl.float32)
    denom = tl.zeros((BLOCK_G,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_G, BLOCK_D), dtype=tl.float32)
    for start in range(0, ctx, BLOCK_N):
        pos = start + tl.arange(0, BLOCK_N)
        ok = pos < ctx
        offs = base + pos[:, None] * k_s2 + d[None, :]
        kv_mask = ok[:, None] & (d < head_dim)[None, :]
        k = tl.load(k_ptr + offs, mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + offs, mask=kv_mask, other=0.0)
        s = tl.where(ok[None, :], tl.dot(q, tl.trans(k), input_precision="ieee") * scale, -float("inf"))  # [G, N]
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        denom = denom * alpha + tl.sum(p, axis=1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision="ieee")
        m = m_new
    tl.store(out_ptr + rows[:, None] + d[None, :], (acc / denom[:, None]).to(out_ptr.dtype.element_ty), mask=q_mask)


def decode_attention(q, k_cache, v_cache, slots, context_lens, scale, max_context):
    q, k_cache, v_cache = q.contiguous(), k_cache.contiguous(), v_cache.contiguous()
    n_seqs, n_heads, head_dim = q.shape
    kv_heads = k_cache.shape[1]
    group = n_heads // kv_heads
    out = torch.empty_like(q)
    _decode_kernel[(n_seqs, kv_heads)](
        q, k_cache, v_cache, slots, context_lens, out, head_dim ** -0.5, n_heads, group, head_dim,
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        BLOCK_G=max(16, triton.next_power_of_2(group)), BLOCK_N=32, BLOCK_D=max(16, triton.next_power_of_2(head_dim)),
    )
    return out
