"""Correct: split-K GEMM, the standard Triton idiom (y = x @ weight.T): SPLIT_K programs per output tile each sum
one slice of K and add it into an fp32 accumulator with tl.atomic_add, in whatever order they run; a second
kernel casts the sums. Two calls may differ in the last bits (the order of the adds); both are correct."""

import torch
import triton
import triton.language as tl

SPLIT_K = 4


@triton.jit
def _splitk_kernel(x_ptr, w_ptr, acc_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                   SPLIT: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    pid_k = tl.program_id(2)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(pid_k * BK, K, BK * SPLIT):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * K + rk[:, None], mask=(rn[None, :] < N) & (rk[:, None] < K), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    tl.atomic_add(acc_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _cast_kernel(acc_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(acc_ptr + offs, mask=mask).to(y_ptr.dtype.element_ty), mask=mask)


def linear(x, weight):
    x, weight = x.contiguous(), weight.contiguous()
    m, k = x.shape
    n = weight.shape[0]
    acc = torch.zeros((m, n), dtype=torch.float32, device=x.device)
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    _splitk_kernel[(triton.cdiv(m, 32), triton.cdiv(n, 64), SPLIT_K)](x, weight, acc, m, n, k, BM=32, BN=64, BK=64,
                                                                      SPLIT=SPLIT_K)
    _cast_kernel[(triton.cdiv(m * n, 1024),)](acc, y, m * n, BLOCK=1024)
    return y
