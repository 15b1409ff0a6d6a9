"""A correct W8A16 GEMM: one program per 64 x 64 tile of y, K in steps of 64, int8 weights converted in
registers to x's dtype (exact: |w| <= 127), the tiles on tl.dot with an fp32 accumulator (tensor cores for
bf16/fp16, full fp32 products for fp32), each column scaled at the end."""

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
        acc = tl.dot(a, b.to(a.dtype), acc, input_precision="ieee")  # the precision matters for fp32 only
    acc = acc * tl.load(s_ptr + rn, mask=rn < N, other=0.0)[None, :]
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def int8_linear(x, weight, scale):
    x, weight, scale = x.contiguous(), weight.contiguous(), scale.contiguous()
    m, k = x.shape
    n = weight.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    _kernel[(triton.cdiv(m, 64), triton.cdiv(n, 64))](x, weight, scale, y, m, n, k, BM=64, BN=64, BK=64)
    return y
