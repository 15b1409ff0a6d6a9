"""Bug: query head h reads kv head h % kv_heads (interleaved groups) instead of h // group."""

import torch
import triton
import triton.language as tl


@triton.jit
def _decode_kernel(q_ptr, k_ptr, v_ptr, slots_ptr, lens_ptr, out_ptr, scale, n_heads, group, head_dim,
                   k_s0, k_s1, k_s2, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    kv_head = head % (n_heads // group)
    slot = tl.load(slots_ptr + seq).to(tl.int64)
    ctx = tl.load(lens_ptr + seq)
    d = tl.arange(0, BLOCK_D)
    d_ok = d < head_dim
    row = (seq * n_heads + head) * head_dim
    q = tl.load(q_ptr + row + d, mask=d_ok, other=0.0).to(tl.float32)
    base = slot * k_s0 + kv_head * k_s1
    m = -float("inf")
    l = 0.0
    acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    for start in range(0, ctx, BLOCK_N):
        pos = start + tl.arange(0, BLOCK_N)
        ok = pos < ctx
        offs = base + pos[:, None] * k_s2 + d[None, :]
        k = tl.load(k_ptr + offs, mask=ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)
        v = tl.load(v_ptr + offs, mask=ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)
        s = tl.where(ok, tl.sum(q[None, :] * k, axis=1) * scale, -float("inf"))
        m_new = tl.maximum(m, tl.max(s, axis=0))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new)
        l = l * alpha + tl.sum(p, axis=0)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        m = m_new
    tl.store(out_ptr + row + d, (acc / l).to(out_ptr.dtype.element_ty), mask=d_ok)


def decode_attention(q, k_cache, v_cache, slots, context_lens, scale, max_context):
    q, k_cache, v_cache = q.contiguous(), k_cache.contiguous(), v_cache.contiguous()
    n_seqs, n_heads, head_dim = q.shape
    out = torch.empty_like(q)
    _decode_kernel[(n_seqs, n_heads)](
        q, k_cache, v_cache, slots, context_lens, out, scale, n_heads, n_heads // k_cache.shape[1], head_dim,
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        BLOCK_N=32, BLOCK_D=triton.next_power_of_2(head_dim),
    )
    return out
