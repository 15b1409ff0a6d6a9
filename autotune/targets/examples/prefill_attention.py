"""A correct causal prefill attention: one program per (chunk, query head, 16 query rows), keys in blocks of
16 with an online softmax; Q K^T and P V on tl.dot with the tiles in the inputs' dtype and fp32 accumulators
(tensor cores for bf16/fp16, P cast to V's dtype; full fp32 products for fp32)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _prefill_kernel(q_ptr, k_ptr, v_ptr, slots_ptr, starts_ptr, cu_ptr, out_ptr, scale, n_heads, group, head_dim,
                    k_s0, k_s1, k_s2, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    chunk = tl.program_id(0)
    head = tl.program_id(1)
    row0 = tl.load(cu_ptr + chunk)
    n_rows = tl.load(cu_ptr + chunk + 1) - row0
    start = tl.load(starts_ptr + chunk)
    slot = tl.load(slots_ptr + chunk).to(tl.int64)
    i = tl.program_id(2) * BLOCK_M + tl.arange(0, BLOCK_M)
    d = tl.arange(0, BLOCK_D)
    q_mask = (i < n_rows)[:, None] & (d < head_dim)[None, :]
    q_offs = ((row0 + i) * n_heads + head)[:, None] * head_dim + d[None, :]
    q = tl.load(q_ptr + q_offs, mask=q_mask, other=0.0)  # [M, D]
    pos_q = start + i  # row i sees keys 0 .. pos_q
    base = slot * k_s0 + (head // group) * k_s1
    m = tl.full((BLOCK_M,), -float("inf"), dtype=tl.float32)
    denom = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    last = start + n_rows
    for k0 in range(0, last, BLOCK_N):
        pos = k0 + tl.arange(0, BLOCK_N)
        kv_mask = (pos < last)[:, None] & (d < head_dim)[None, :]
        offs = base + pos[:, None] * k_s2 + d[None, :]
        k = tl.load(k_ptr + offs, mask=kv_mask, other=0.0)  # [N, D]
        v = tl.load(v_ptr + offs, mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale  # [M, N] fp32; ieee: for fp32 tiles
        s = tl.where(pos[None, :] <= pos_q[:, None], s, -float("inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.where(m == -float("inf"), 0.0, tl.exp(m - m_new))
        p = tl.where(s == -float("inf"), 0.0, tl.exp(s - m_new[:, None]))
        denom = denom * alpha + tl.sum(p, axis=1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision="ieee")
        m = m_new
    tl.store(out_ptr + q_offs, (acc / denom[:, None]).to(out_ptr.dtype.element_ty), mask=q_mask)


def prefill_attention(q, k_cache, v_cache, slots, starts, cu_seqlens, scale, max_query_len):
    q, k_cache, v_cache = q.contiguous(), k_cache.contiguous(), v_cache.contiguous()
    n_tokens, n_heads, head_dim = q.shape
    out = torch.empty_like(q)
    _prefill_kernel[(slots.shape[0], n_heads, triton.cdiv(max_query_len, 16))](
        q, k_cache, v_cache, slots, starts, cu_seqlens, out, scale, n_heads, n_heads // k_cache.shape[1], head_dim,
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        BLOCK_M=16, BLOCK_N=16, BLOCK_D=max(16, triton.next_power_of_2(head_dim)),  # tl.dot: 16 deep at least
    )
    return out
