"""Wrong on purpose: a W8A16 GEMM that leaves out every K tile whose activations are all below 0.03 in magnitude
("activation sparsity"). On N(0, 1) activations no 16 x 64 tile is that quiet, so nothing is left out; at a layer's
scale of 2^-6 nearly every tile is, and the output is mostly zero."""

import torch
import triton
import triton.language as tl


@triton.jit
def _kernel(x_ptr, w_ptr, s_ptr, y_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * K + rk[:, None], mask=(rn[None, :] < N) & (rk[:, None] < K), other=0)
        loud = tl.max(tl.max(tl.abs(a.to(tl.float32)), axis=1), axis=0) >= 0.03
        acc = tl.where(loud, tl.dot(a, b.to(a.dtype), acc, input_precision="ieee"), acc)
    acc = acc * tl.load(s_ptr + rn, mask=rn < N, other=0.0)[None, :]
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def int8_linear(x, weight, scale):
    x, weight, scale = x.contiguous(), weight.contiguous(), scale.contiguous()
    m, k = x.shape
    n = weight.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    _kernel[(triton.cdiv(m, 16), triton.cdiv(n, 32))](x, weight, scale, y, m, n, k, BM=16, BN=32, BK=64)
    return y
