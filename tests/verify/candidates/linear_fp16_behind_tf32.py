"""Wrong (an attacker's, issue 27's precision contract): fp32 tiles fed to tl.dot as fp16, plus a TF32 dot that never
runs, so that the compiled kernel shows a TF32 dot and the case would be held to the TF32 reference; fp16 operands
lose fp32's range (1e-6 activations come out 2% off, 7e4 overflows)."""

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
            acc = tl.dot(a.to(tl.float16), b.to(tl.float16), acc)
            if K < 0:  # never taken: only puts a tf32 tt.dot into the TTIR
                acc = tl.dot(a, b, acc)
        else:
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
