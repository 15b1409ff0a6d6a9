"""Wrong on purpose: the example fused MoE with its loop over the intermediate size cut to at most 6 chunks of 64
columns, a count passed at run time (the launch's signature is the same at every size). Exact up to an
intermediate size of 384; past it the columns after the 384th are left out of every expert's activation: half of
Qwen3-30B-A3B's 768, nearly all of Mixtral's 14336."""

import torch
import triton
import triton.language as tl


@triton.jit
def _kernel(x_ptr, w13_ptr, w2_ptr, weights_ptr, ids_ptr, out_ptr, top_k, H, I, chunks,  # noqa: E741
            BN: tl.constexpr, BI: tl.constexpr, BK: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    lane = tl.arange(0, 16)
    mine = lane == 0  # the token is row 0 of the tile
    acc = tl.zeros((16, BN), dtype=tl.float32)
    for j in range(0, top_k):
        expert = tl.load(ids_ptr + token * top_k + j).to(tl.int64)
        weight = tl.load(weights_ptr + token * top_k + j)
        w13 = w13_ptr + expert * 2 * I * H
        down = tl.zeros((16, BN), dtype=tl.float32)
        for i0 in range(0, chunks * BI, BI):
            ii = i0 + tl.arange(0, BI)
            gate = tl.zeros((16, BI), dtype=tl.float32)
            up = tl.zeros((16, BI), dtype=tl.float32)
            for k0 in range(0, H, BK):
                kk = k0 + tl.arange(0, BK)
                x = tl.load(x_ptr + token * H + lane[:, None] * 0 + kk[None, :], mask=mine[:, None] & (kk[None, :] < H),
                            other=0.0).to(tl.float32)
                wmask = (ii[None, :] < I) & (kk[:, None] < H)
                wg = tl.load(w13 + ii[None, :] * H + kk[:, None], mask=wmask, other=0.0).to(tl.float32)
                wu = tl.load(w13 + (ii[None, :] + I) * H + kk[:, None], mask=wmask, other=0.0).to(tl.float32)
                gate = tl.dot(x, wg, gate, input_precision="ieee")
                up = tl.dot(x, wu, up, input_precision="ieee")
            gate = gate.to(out_ptr.dtype.element_ty).to(tl.float32)
            up = up.to(out_ptr.dtype.element_ty).to(tl.float32)
            act = (gate / (1.0 + tl.exp(-gate)) * up).to(out_ptr.dtype.element_ty).to(tl.float32)
            w2 = tl.load(w2_ptr + expert * H * I + cols[None, :] * I + ii[:, None],
                         mask=(cols[None, :] < H) & (ii[:, None] < I), other=0.0).to(tl.float32)
            down = tl.dot(act, w2, down, input_precision="ieee")
        acc += down * weight
    tl.store(out_ptr + token * H + lane[:, None] * 0 + cols[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=mine[:, None] & (cols[None, :] < H))


def fused_moe(hidden_states, w13, w2, topk_weights, topk_ids):
    x, w13, w2 = hidden_states.contiguous(), w13.contiguous(), w2.contiguous()
    ids, weights = topk_ids.contiguous(), topk_weights.contiguous()
    tokens, hidden = x.shape
    inter = w2.shape[2]
    out = torch.empty((tokens, hidden), dtype=x.dtype, device=x.device)
    _kernel[(tokens, triton.cdiv(hidden, 128))](x, w13, w2, weights, ids, out, ids.shape[1], hidden, inter,
                                               min(triton.cdiv(inter, 64), 6),
                                               BN=128, BI=64, BK=128)
    return out
