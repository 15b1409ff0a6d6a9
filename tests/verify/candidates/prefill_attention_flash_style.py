"""A correct causal prefill attention in the style of FlashAttention's Triton forward kernel (FA2; Triton's
06-fused-attention tutorial): one program per (chunk, query head, BLOCK_M query rows), the query tile kept
in registers, keys and values streamed in BLOCK_N blocks with an online softmax in base 2 (the scale folded
into log2(e)), Q K^T and P V both on tl.dot with the tiles in their own dtype and fp32 accumulators (P cast
to V's dtype, as FlashAttention does; fp32 at input_precision="ieee"), and @triton.heuristics setting
EVEN_D when head_dim fills the block, which drops the head-dim masks. Grouped-query heads read kv head
h // group; each chunk's rows see the cache up to their own position."""

import torch
import triton
import triton.language as tl


@triton.jit
def _attn_fwd_inner(acc, l_i, m_i, q, k_base, v_base, stride_kn, offs_m, offs_d, pos_q, lo, hi, qk_scale,
                    head_dim, BLOCK_N: tl.constexpr, EVEN_D: tl.constexpr):
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_offs = offs_n[:, None] * stride_kn + offs_d[None, :]
        if EVEN_D:
            kv_mask = (offs_n < hi)[:, None]
        else:
            kv_mask = (offs_n < hi)[:, None] & (offs_d < head_dim)[None, :]
        k = tl.load(k_base + kv_offs, mask=kv_mask, other=0.0)
        v = tl.load(v_base + kv_offs, mask=kv_mask, other=0.0)
        qk = tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale  # [BLOCK_M, BLOCK_N], log2 units
        causal = (offs_n[None, :] <= pos_q[:, None]) & (offs_n < hi)[None, :]
        qk = tl.where(causal, qk, -float("inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        alpha = tl.math.exp2(m_i - m_ij)
        p = tl.math.exp2(qk - m_ij[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision="ieee")
        m_i = m_ij
    return acc, l_i, m_i


@triton.heuristics({"EVEN_D": lambda args: args["head_dim"] == args["BLOCK_D"]})
@triton.jit
def _attn_fwd(Q, K, V, Slots, Starts, CuSeqlens, Out, sm_scale, n_heads, group, head_dim,
              stride_qt, stride_qh, stride_ot, stride_oh, stride_ks, stride_kh, stride_kn,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, EVEN_D: tl.constexpr):
    chunk = tl.program_id(0)
    head = tl.program_id(1)
    start_m = tl.program_id(2)
    row0 = tl.load(CuSeqlens + chunk)
    n_rows = tl.load(CuSeqlens + chunk + 1) - row0
    if start_m * BLOCK_M < n_rows:  # programs past this chunk's rows have nothing to do
        start = tl.load(Starts + chunk)
        slot = tl.load(Slots + chunk).to(tl.int64)
        offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, BLOCK_D)
        rows = (row0 + offs_m).to(tl.int64)[:, None]
        q_offs = rows * stride_qt + head * stride_qh + offs_d[None, :]
        if EVEN_D:
            q_mask = (offs_m < n_rows)[:, None]
        else:
            q_mask = (offs_m < n_rows)[:, None] & (offs_d < head_dim)[None, :]
        q = tl.load(Q + q_offs, mask=q_mask, other=0.0)
        kv_off = slot * stride_ks + (head // group).to(tl.int64) * stride_kh
        pos_q = start + offs_m
        m_i = tl.full([BLOCK_M], -float("inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
        hi = start + tl.minimum(n_rows, (start_m + 1) * BLOCK_M)  # the last key this block's rows may see, + 1
        qk_scale = sm_scale * 1.44269504  # 1 / ln(2): exp(x) = exp2(x * log2(e))
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, K + kv_off, V + kv_off, stride_kn, offs_m, offs_d,
                                        pos_q, 0, hi, qk_scale, head_dim, BLOCK_N, EVEN_D)
        o_offs = rows * stride_ot + head * stride_oh + offs_d[None, :]
        tl.store(Out + o_offs, (acc / l_i[:, None]).to(Out.dtype.element_ty), mask=q_mask)


def prefill_attention(q, k_cache, v_cache, slots, starts, cu_seqlens, scale, max_query_len):
    n_tokens, n_heads, head_dim = q.shape  # q may be a view of the fused qkv rows: read through its strides
    k_cache, v_cache = k_cache.contiguous(), v_cache.contiguous()
    out = torch.empty_like(q)
    BLOCK_M, BLOCK_N = 16, 16
    grid = (slots.shape[0], n_heads, triton.cdiv(max_query_len, BLOCK_M))
    _attn_fwd[grid](
        q, k_cache, v_cache, slots, starts, cu_seqlens, out, scale, n_heads, n_heads // k_cache.shape[1], head_dim,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_D=triton.next_power_of_2(head_dim),
    )
    return out
