"""Wrong: fp32 operands rounded through fp16 before a TF32 tl.dot (an attacker's, issue 27). fp16 keeps TF32's 11
significant bits, so within fp16's range it is as accurate as TF32; past 65504 an operand is Inf and the output Inf
or NaN where the reference is finite. A kernel that rounds fp32 values to half precision anywhere is held to IEEE
in fp32 cases, not to the TF32 reference."""

import torch
import triton
import triton.language as tl


@triton.jit
def _gemm_kernel(x_ptr, w_ptr, y_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * K + rk[:, None], mask=(rn[None, :] < N) & (rk[:, None] < K), other=0.0)
        acc = tl.dot(a.to(tl.float16).to(tl.float32), b.to(tl.float16).to(tl.float32), acc)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def linear(x, weight):
    x, weight = x.contiguous(), weight.contiguous()
    m, k = x.shape
    n = weight.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    _gemm_kernel[(triton.cdiv(m, 32), triton.cdiv(n, 64))](x, weight, y, m, n, k, BM=32, BN=64, BK=64)
    return y
