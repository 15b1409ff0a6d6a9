"""A correct fused MoE in two kernels, without sorting, as vLLM splits it: the first, one program per token, walks
the token's top_k experts and stores each one's SiLU(gate) * up (gate and up summed over H in fp32, rounded to the
activations' dtype as the reference's intermediate cache is, the product rounded too) in a [T, top_k, I] scratch;
the second, one program per token and 128 columns of H, adds each slot's down projection times its top-k weight,
in slot order, in fp32. The token's row is row 0 of a 16-row tile, so every product is a tl.dot. Simple and
deterministic; every weight is read once per token (the search template sorts the tokens by expert instead)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _act(x_ptr, w13_ptr, ids_ptr, act_ptr, top_k, H, I,  # noqa: E741 (I: vLLM's [E, 2I, H])
         BI: tl.constexpr, BK: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    lane = tl.arange(0, 16)
    mine = (lane == 0)[:, None]  # the token is row 0 of the tile
    row = x_ptr + token * H + lane[:, None] * 0
    for j in range(0, top_k):
        expert = tl.load(ids_ptr + token * top_k + j).to(tl.int64)
        gates = w13_ptr + expert * 2 * I * H
        ups = gates + I * H
        out = act_ptr + (token * top_k + j) * I + lane[:, None] * 0
        for i0 in range(0, I, BI):
            ii = i0 + tl.arange(0, BI)
            gate = tl.zeros((16, BI), dtype=tl.float32)
            up = tl.zeros((16, BI), dtype=tl.float32)
            for k0 in range(0, H, BK):
                kk = k0 + tl.arange(0, BK)
                x = tl.load(row + kk[None, :], mask=mine & (kk[None, :] < H), other=0.0).to(tl.float32)
                offs = ii[None, :] * H + kk[:, None]
                wmask = (ii[None, :] < I) & (kk[:, None] < H)
                wg = tl.load(gates + offs, mask=wmask, other=0.0).to(tl.float32)
                wu = tl.load(ups + offs, mask=wmask, other=0.0).to(tl.float32)
                gate = tl.dot(x, wg, gate, input_precision="ieee")
                up = tl.dot(x, wu, up, input_precision="ieee")
            gate = gate.to(act_ptr.dtype.element_ty).to(tl.float32)
            up = up.to(act_ptr.dtype.element_ty).to(tl.float32)
            act = gate / (1.0 + tl.exp(-gate)) * up
            tl.store(out + ii[None, :], act.to(act_ptr.dtype.element_ty), mask=mine & (ii[None, :] < I))


@triton.jit
def _down(act_ptr, w2_ptr, weights_ptr, ids_ptr, out_ptr, top_k, H, I,  # noqa: E741
          BN: tl.constexpr, BI: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    lane = tl.arange(0, 16)
    mine = (lane == 0)[:, None]
    acc = tl.zeros((16, BN), dtype=tl.float32)
    for j in range(0, top_k):
        expert = tl.load(ids_ptr + token * top_k + j).to(tl.int64)
        weight = tl.load(weights_ptr + token * top_k + j)
        row = act_ptr + (token * top_k + j) * I + lane[:, None] * 0
        downs = w2_ptr + expert * H * I + cols[None, :] * I
        down = tl.zeros((16, BN), dtype=tl.float32)
        for i0 in range(0, I, BI):
            ii = i0 + tl.arange(0, BI)
            act = tl.load(row + ii[None, :], mask=mine & (ii[None, :] < I), other=0.0).to(tl.float32)
            w2 = tl.load(downs + ii[:, None], mask=(cols[None, :] < H) & (ii[:, None] < I), other=0.0).to(tl.float32)
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
    _act[(tokens,)](x, w13, ids, act, top_k, hidden, inter, BI=64, BK=128)
    out = torch.empty((tokens, hidden), dtype=x.dtype, device=x.device)
    _down[(tokens, triton.cdiv(hidden, 128))](act, w2, weights, ids, out, top_k, hidden, inter, BN=128, BI=64)
    return out
