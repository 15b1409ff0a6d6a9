"""Wrong (issue 27, class 1): split-K whose per-split share of K is rounded down to whole tiles. Exact when K is a
multiple of SPLIT_K x BK (4096, 2048 and the other K a cut plan kept) or small (one split below 2048); at
Qwen2.5-0.5B's down projection (K = 4864) it drops the last 256 input channels."""

import torch
import triton
import triton.language as tl


@triton.jit
def _splitk_kernel(x_ptr, w_ptr, acc_ptr, M, N, K, share, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    start = tl.program_id(2) * share
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(start, start + share, BK):
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
    split = 1 if k < 2048 else 8
    bk = 64
    share = triton.cdiv(k, bk) * bk if split == 1 else k // split // bk * bk  # the bug: rounded down
    acc = torch.zeros((m, n), dtype=torch.float32, device=x.device)
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    _splitk_kernel[(triton.cdiv(m, 32), triton.cdiv(n, 64), split)](x, weight, acc, m, n, k, share, BM=32, BN=64,
                                                                    BK=bk)
    _cast_kernel[(triton.cdiv(m * n, 1024),)](acc, y, m * n, BLOCK=1024)
    return y
