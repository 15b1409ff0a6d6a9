"""Bug (issue 16, class 6): split-K without atomics. SPLIT_K programs share each output tile's K, and each
adds its partial into the output with a plain load, add and store. The interpreter runs one program at a
time, so the sum comes out right; on a GPU the splits run at once and updates are lost."""

import torch
import triton
import triton.language as tl


@triton.jit
def _kernel(x_ptr, w_ptr, y_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
            SPLIT_K: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(tl.program_id(2) * BK, K, BK * SPLIT_K):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * K + rk[:, None], mask=(rn[None, :] < N) & (rk[:, None] < K), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    out = y_ptr + rm[:, None] * N + rn[None, :]
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(out, tl.load(out, mask=mask, other=0.0) + acc, mask=mask)  # read-modify-write, no atomic


@triton.jit
def _cast_kernel(src_ptr, dst_ptr, numel, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < numel).to(dst_ptr.dtype.element_ty),
             mask=offs < numel)


def linear(x, weight):
    x, weight = x.contiguous(), weight.contiguous()
    m, k = x.shape
    n = weight.shape[0]
    acc = torch.zeros((m, n), dtype=torch.float32, device=x.device)
    _kernel[(triton.cdiv(m, 16), triton.cdiv(n, 32), 4)](x, weight, acc, m, n, k, BM=16, BN=32, BK=32, SPLIT_K=4)
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    _cast_kernel[(triton.cdiv(m * n, 1024),)](acc, y, m * n, BLOCK=1024)
    return y
