"""A correct fused MoE in two kernels, without sorting, as vLLM splits it: the first, one program per token, walks
the token's top_k experts and stores each one's SiLU(gate) * up (gate and up summed over H in fp32, rounded to the
activations' dtype as the reference's intermediate cache is, the product rounded too) in a [T, top_k, I] scratch;
the second, one program per token and BN columns of H, adds each slot's down projection times its top-k weight,
in slot order, in fp32. The token's row is row 0 of a 16-row tile, so every product is a tl.dot; each tile's
pointers are made once and offset along the reduction. Simple and deterministic; every weight is read once per
token (the search template sorts the tokens by expert instead)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _act(x_ptr, w13_ptr, ids_ptr, act_ptr, top_k, H, I,  # noqa: E741 (I: vLLM's [E, 2I, H])
         BI: tl.constexpr, BK: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    lane = tl.arange(0, 16)
    mine = (lane == 0)[:, None]  # the token is row 0 of the tile
    kk = tl.arange(0, BK)
    bi = tl.arange(0, BI)
    xs = x_ptr + token * H + lane[:, None] * 0 + kk[None, :]  # [16, BK]: the row's first BK channels
    tile = bi[None, :] * H + kk[:, None]  # [BK, BI]: rows 0.. of a block, their first BK channels
    for j in range(0, top_k):
        expert = tl.load(ids_ptr + token * top_k + j).to(tl.int64)
        gates = w13_ptr + expert * 2 * I * H + tile
        out = act_ptr + (token * top_k + j) * I + lane[:, None] * 0 + bi[None, :]
        for i0 in range(0, I, BI):
            ws = gates + i0 * H  # gate rows i0..
            us = ws + I * H  # the up rows
            rows = bi[None, :] < I - i0
            gate = tl.zeros((16, BI), dtype=tl.float32)
            up = tl.zeros((16, BI), dtype=tl.float32)
            for k0 in range(0, H, BK):
                inside = kk < H - k0
                x = tl.load(xs + k0, mask=mine & inside[None, :], other=0.0)
                wmask = rows & inside[:, None]
                wg = tl.load(ws + k0, mask=wmask, other=0.0)
                wu = tl.load(us + k0, mask=wmask, other=0.0)
                gate = tl.dot(x, wg, gate, input_precision="ieee")
                up = tl.dot(x, wu, up, input_precision="ieee")
            gate = gate.to(act_ptr.dtype.element_ty).to(tl.float32)
            up = up.to(act_ptr.dtype.element_ty).to(tl.float32)
            act = gate / (1.0 + tl.exp(-gate)) * up
            tl.store(out + i0, act.to(act_ptr.dtype.element_ty), mask=mine & rows)


@triton.jit
def _down(act_ptr, w2_ptr, weights_ptr, ids_ptr, out_ptr, top_k, H, I,  # noqa: E741
          BN: tl.constexpr, BI: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    lane = tl.arange(0, 16)
    mine = (lane == 0)[:, None]
    ii = tl.arange(0, BI)
    acc = tl.zeros((16, BN), dtype=tl.float32)
    for j in range(0, top_k):
        expert = tl.load(ids_ptr + token * top_k + j).to(tl.int64)
        weight = tl.load(weights_ptr + token * top_k + j)
        acts = act_ptr + (token * top_k + j) * I + lane[:, None] * 0 + ii[None, :]  # [16, BI]
        downs = w2_ptr + expert * H * I + cols[None, :] * I + ii[:, None]  # [BI, BN]
        down = tl.zeros((16, BN), dtype=tl.float32)
        for i0 in range(0, I, BI):
            inside = ii < I - i0
            act = tl.load(acts + i0, mask=mine & inside[None, :], other=0.0)
            w2 = tl.load(downs + i0, mask=(cols[None, :] < H) & inside[:, None], other=0.0)
            down = tl.dot(act, w2, down, input_precision="ieee")
        acc += down * weight
    tl.store(out_ptr + token * H + lane[:, None] * 0 + cols[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=mine & (cols[None, :] < H))


def fused_moe(hidden_states, w13, w2, topk_weights, topk_ids):
    x, w13, w2 = hidden_states.contiguous(), w13.contiguous(), w2.contiguous()
    ids, weights = topk_ids.contiguous(), topk_weights.contiguous()
    tokens, hidden = x.shape
    top_k, inter = ids.shape[1], w2.shape[2]
    act = torch.empty((tokens, top_k, inter), dtype=x.dtype, device=x.device)
    # blocks no larger than the sizes (at most 128 of I in 16-bit dtypes, 64 in fp32: sm_90's shared memory; 128 of
    # H): small experts leave no tile mostly masked
    BI = min(128 if x.element_size() == 2 else 64, triton.next_power_of_2(inter))
    BK = min(128, triton.next_power_of_2(hidden))
    _act[(tokens,)](x, w13, ids, act, top_k, hidden, inter, BI=BI, BK=BK)
    out = torch.empty((tokens, hidden), dtype=x.dtype, device=x.device)
    _down[(tokens, triton.cdiv(hidden, BK))](act, w2, weights, ids, out, top_k, hidden, inter, BN=BK, BI=BI)
    return out
