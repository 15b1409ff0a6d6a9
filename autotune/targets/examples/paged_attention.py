"""A correct paged attention: one program per query row and kv head holds the row's whole GQA group (heads
h with h // group == kv head) as the rows of its tile (at least 16, for tl.dot; full fp32 products), finds its
sequence in cu_seqlens_q, and walks the sequence's keys 128 at a time through the block table (each key's block
looked up, so a block size that is not a multiple of 32 works), with an online softmax in fp32 (running max and
sum, rescaled per tile), the causal limit at the row's own position and the sliding window's lower limit. The row's
sequence is found by a binary search of cu_seqlens_q, as vLLM's unified attention does (log2 of the sequences in
loads, not one per sequence)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _kernel(q_ptr, k_ptr, v_ptr, cu_ptr, lens_ptr, table_ptr, out_ptr, scale, window, num_seqs, group, table_width,
            sqt, sqh, skb, sks, skh, stb, D: tl.constexpr, GROUP: tl.constexpr, BD: tl.constexpr,
            BS: tl.constexpr, TILE: tl.constexpr):
    row = tl.program_id(0)
    kv_head = tl.program_id(1)
    seq = row * 0  # the last sequence whose first row is at or before this one: a binary search of cu_seqlens_q
    end = seq + num_seqs  # (cu_seqlens_q[seq] <= row < cu_seqlens_q[end], cu_seqlens_q[0] = 0)
    while end - seq > 1:
        mid = (seq + end) // 2
        at_or_before = tl.load(cu_ptr + mid) <= row
        seq = tl.where(at_or_before, mid, seq)
        end = tl.where(at_or_before, end, mid)
    first = tl.load(cu_ptr + seq)
    n = tl.load(cu_ptr + seq + 1) - first
    ctx = tl.load(lens_ptr + seq)
    pos = ctx - n + (row - first)  # this query's position in its sequence
    lo = tl.where(window > 0, tl.maximum(pos - window + 1, 0), 0)
    g = tl.arange(0, GROUP)
    d = tl.arange(0, BD)
    heads = kv_head * group + g
    q = tl.load(q_ptr + row.to(tl.int64) * sqt + heads[:, None] * sqh + d[None, :],
                mask=(g[:, None] < group) & (d[None, :] < D), other=0.0)
    m = tl.full((GROUP,), float("-inf"), dtype=tl.float32)
    denom = tl.zeros((GROUP,), dtype=tl.float32)
    acc = tl.zeros((GROUP, BD), dtype=tl.float32)
    table = table_ptr + seq.to(tl.int64) * stb
    lanes = tl.arange(0, TILE)
    dims = d[None, :] < D
    kv_d = kv_head * skh + d[None, :]  # this kv head's columns
    for start in range(lo // TILE * TILE, pos + 1, TILE):
        p = start + lanes
        live = (p >= lo) & (p <= pos)
        block = tl.load(table + p // BS, mask=live, other=0).to(tl.int64)
        at = block * skb + (p % BS) * sks
        kv_at, kv = at[:, None] + kv_d, live[:, None] & dims  # [TILE, BD]: each key in both caches
        k = tl.load(k_ptr + kv_at, mask=kv, other=0.0)
        v = tl.load(v_ptr + kv_at, mask=kv, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale  # [GROUP, TILE]; products exact in fp32
        s = tl.where(live[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp(m - m_new)
        prob = tl.exp(s - m_new[:, None])
        denom = denom * alpha + tl.sum(prob, axis=1)
        acc = acc * alpha[:, None] + tl.dot(prob, v.to(tl.float32), input_precision="ieee")
        m = m_new
    out = acc / denom[:, None]
    tl.store(out_ptr + row.to(tl.int64) * sqt + heads[:, None] * sqh + d[None, :], out.to(out_ptr.dtype.element_ty),
             mask=(g[:, None] < group) & (d[None, :] < D))


def paged_attention(q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_table, scale, window, max_query_len,
                    max_seq_len):
    q, k_cache, v_cache = q.contiguous(), k_cache.contiguous(), v_cache.contiguous()
    cu_seqlens_q, seq_lens, block_table = cu_seqlens_q.contiguous(), seq_lens.contiguous(), block_table.contiguous()
    tokens, heads, head_dim = q.shape
    block_size, kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = heads // kv_heads
    out = torch.empty_like(q)
    _kernel[(tokens, kv_heads)](
        q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_table, out, scale, window, seq_lens.shape[0], group,
        block_table.shape[1], q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_table.stride(0), D=head_dim, GROUP=max(triton.next_power_of_2(group), 16),
        BD=triton.next_power_of_2(head_dim), BS=block_size, TILE=128 if head_dim <= 128 else 64,  # sm_90 shared memory
    )
    return out
