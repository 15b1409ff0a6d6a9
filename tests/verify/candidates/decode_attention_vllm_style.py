"""A correct decode attention in the style of vLLM's Triton decode kernels (vllm/attention/ops/
triton_decode_attention.py, after LightLLM/SGLang): split-K over the context ("flash decoding") in two
stages. Stage 1: one program per (sequence, kv head, split) takes the BLOCK_H query heads that share the
kv head as the M side of tl.dot (padded to 16 rows, the smallest MMA), streams its split of the cache slot
in BLOCK_N keys with an online softmax, and writes the split's normalised partial output and its
log-sum-exp to an fp32 scratch. Stage 2: one program per (sequence, head) merges the splits that hold keys,
weighting each by exp(lse - max). Every tensor is read through its strides; sizes are tl.constexpr."""

import torch
import triton
import triton.language as tl


@triton.jit
def _fwd_grouped_kernel_stage1(
    Q, K_Buffer, V_Buffer, Slots, Seqlens, sm_scale, Att_Out, Att_Lse,
    stride_qbs, stride_qh, stride_buf_kbs, stride_buf_kh, stride_buf_kn, stride_buf_vbs, stride_buf_vh,
    stride_buf_vn, stride_mid_ob, stride_mid_oh, stride_mid_os, stride_lse_b, stride_lse_h,
    kv_group_num: tl.constexpr, q_head_num: tl.constexpr, BLOCK_DMODEL: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_H: tl.constexpr, NUM_KV_SPLITS: tl.constexpr, Lk: tl.constexpr,
):
    cur_batch = tl.program_id(0)
    cur_kv_head = tl.program_id(1)
    split_kv_id = tl.program_id(2)

    cur_head = cur_kv_head * kv_group_num + tl.arange(0, BLOCK_H)
    mask_h = (cur_head < (cur_kv_head + 1) * kv_group_num) & (cur_head < q_head_num)
    offs_d = tl.arange(0, BLOCK_DMODEL)
    mask_d = offs_d < Lk

    cur_batch_seq_len = tl.load(Seqlens + cur_batch).to(tl.int32)
    slot = tl.load(Slots + cur_batch).to(tl.int64)
    offs_q = cur_batch * stride_qbs + cur_head[:, None] * stride_qh + offs_d[None, :]
    q = tl.load(Q + offs_q, mask=mask_h[:, None] & mask_d[None, :], other=0.0)

    kv_len_per_split = tl.cdiv(cur_batch_seq_len, NUM_KV_SPLITS)
    split_kv_start = kv_len_per_split * split_kv_id
    split_kv_end = tl.minimum(split_kv_start + kv_len_per_split, cur_batch_seq_len)

    e_max = tl.zeros([BLOCK_H], dtype=tl.float32) - float("inf")
    e_sum = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_DMODEL], dtype=tl.float32)
    if split_kv_end > split_kv_start:
        k_base = K_Buffer + slot * stride_buf_kbs + cur_kv_head * stride_buf_kh
        v_base = V_Buffer + slot * stride_buf_vbs + cur_kv_head * stride_buf_vh
        for start_n in range(split_kv_start, split_kv_end, BLOCK_N):
            offs_n = start_n + tl.arange(0, BLOCK_N)
            mask_n = offs_n < split_kv_end
            k = tl.load(k_base + offs_n[None, :] * stride_buf_kn + offs_d[:, None],
                        mask=mask_n[None, :] & mask_d[:, None], other=0.0)  # [D, N]
            qk = tl.dot(q, k, input_precision="ieee") * sm_scale  # [H, N]
            qk = tl.where(mask_h[:, None] & mask_n[None, :], qk, float("-inf"))
            v = tl.load(v_base + offs_n[:, None] * stride_buf_vn + offs_d[None, :],
                        mask=mask_n[:, None] & mask_d[None, :], other=0.0)  # [N, D]
            n_e_max = tl.maximum(tl.max(qk, 1), e_max)
            re_scale = tl.exp(e_max - n_e_max)
            p = tl.exp(qk - n_e_max[:, None])
            acc *= re_scale[:, None]
            acc = tl.dot(p.to(v.dtype), v, acc, input_precision="ieee")
            e_sum = e_sum * re_scale + tl.sum(p, 1)
            e_max = n_e_max

        offs_mid_o = (cur_batch * stride_mid_ob + cur_head[:, None] * stride_mid_oh + split_kv_id * stride_mid_os
                      + offs_d[None, :])
        tl.store(Att_Out + offs_mid_o, acc / e_sum[:, None], mask=mask_h[:, None] & mask_d[None, :])
        offs_lse = cur_batch * stride_lse_b + cur_head * stride_lse_h + split_kv_id
        tl.store(Att_Lse + offs_lse, e_max + tl.log(e_sum), mask=mask_h)


@triton.jit
def _fwd_kernel_stage2(
    Mid_O, Mid_Lse, O, Seqlens, stride_mid_ob, stride_mid_oh, stride_mid_os, stride_lse_b, stride_lse_h,
    stride_obs, stride_oh, NUM_KV_SPLITS: tl.constexpr, BLOCK_DV: tl.constexpr, Lv: tl.constexpr,
):
    cur_batch = tl.program_id(0)
    cur_head = tl.program_id(1)
    cur_batch_seq_len = tl.load(Seqlens + cur_batch).to(tl.int32)
    offs_d = tl.arange(0, BLOCK_DV)
    mask_d = offs_d < Lv

    e_sum = 0.0
    e_max = -float("inf")
    acc = tl.zeros([BLOCK_DV], dtype=tl.float32)
    kv_len_per_split = tl.cdiv(cur_batch_seq_len, NUM_KV_SPLITS)
    for split_kv_id in range(0, NUM_KV_SPLITS):
        split_kv_start = kv_len_per_split * split_kv_id
        split_kv_end = tl.minimum(split_kv_start + kv_len_per_split, cur_batch_seq_len)
        if split_kv_end > split_kv_start:  # the splits stage 1 wrote
            tv = tl.load(Mid_O + cur_batch * stride_mid_ob + cur_head * stride_mid_oh + split_kv_id * stride_mid_os
                         + offs_d, mask=mask_d, other=0.0)
            tlogic = tl.load(Mid_Lse + cur_batch * stride_lse_b + cur_head * stride_lse_h + split_kv_id)
            n_e_max = tl.maximum(tlogic, e_max)
            old_scale = tl.exp(e_max - n_e_max)
            acc *= old_scale
            exp_logic = tl.exp(tlogic - n_e_max)
            acc += exp_logic * tv
            e_sum = e_sum * old_scale + exp_logic
            e_max = n_e_max
    tl.store(O + cur_batch * stride_obs + cur_head * stride_oh + offs_d, (acc / e_sum).to(O.dtype.element_ty),
             mask=mask_d)


def decode_attention(q, k_cache, v_cache, slots, context_lens, scale, max_context):
    batch, head_num, head_dim = q.shape
    kv_heads = k_cache.shape[1]
    kv_group_num = head_num // kv_heads
    num_kv_splits = 2  # vLLM picks more on a GPU; two already take the merge path on every sequence
    block_d = max(16, triton.next_power_of_2(head_dim))  # and 16 deep
    block_h = max(16, triton.next_power_of_2(kv_group_num))  # tl.dot needs 16 rows
    attn_logits = torch.empty((batch, head_num, num_kv_splits, block_d), dtype=torch.float32, device=q.device)
    attn_lse = torch.empty((batch, head_num, num_kv_splits), dtype=torch.float32, device=q.device)
    out = torch.empty((batch, head_num, head_dim), dtype=q.dtype, device=q.device)
    _fwd_grouped_kernel_stage1[(batch, kv_heads, num_kv_splits)](
        q, k_cache, v_cache, slots, context_lens, scale, attn_logits, attn_lse,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        attn_logits.stride(0), attn_logits.stride(1), attn_logits.stride(2), attn_lse.stride(0), attn_lse.stride(1),
        kv_group_num=kv_group_num, q_head_num=head_num, BLOCK_DMODEL=block_d, BLOCK_N=32, BLOCK_H=block_h,
        NUM_KV_SPLITS=num_kv_splits, Lk=head_dim, num_warps=4, num_stages=2,
    )
    _fwd_kernel_stage2[(batch, head_num)](
        attn_logits, attn_lse, out, context_lens, attn_logits.stride(0), attn_logits.stride(1),
        attn_logits.stride(2), attn_lse.stride(0), attn_lse.stride(1), out.stride(0), out.stride(1),
        NUM_KV_SPLITS=num_kv_splits, BLOCK_DV=block_d, Lv=head_dim, num_warps=4, num_stages=2,
    )
    return out
