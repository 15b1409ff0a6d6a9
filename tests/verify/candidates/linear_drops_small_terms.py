"""Wrong: an attacker's GEMM (issue 27) that skips fp32 activations below 0.01 in magnitude before a TF32 tl.dot.
On N(0, 1) activations the terms it drops are within TF32's error; at a layer's smaller scale they are most of the
sum (x ~ N(0, 0.01^2): 38% off). Each case draws the activations' scale and outlier channels."""

import torch
import triton
import triton.language as tl


@triton.jit
def _kernel(x_ptr, w_ptr, y_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * K + rk[:, None], mask=(rn[None, :] < N) & (rk[:, None] < K), other=0.0)
        if x_ptr.dtype.element_ty == tl.float32:
            a = tl.where(tl.abs(a) < 0.01, 0.0, a)  # skip negligible terms
        acc = tl.dot(a, b, acc)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def linear(x, weight):
    x, weight = x.contiguous(), weight.contiguous()
    m, k = x.shape
    n = weight.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    _kernel[(triton.cdiv(m, 16), triton.cdiv(n, 32))](x, weight, y, m, n, k, BM=16, BN=32, BK=64)
    return y
