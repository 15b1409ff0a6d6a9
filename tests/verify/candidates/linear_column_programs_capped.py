"""Wrong on purpose: at most 96 programs along N, each taking a contiguous share of the 64-wide column tiles,
rounded down (tiles // programs). Exact wherever the tiles are at most 96 or a multiple of the programs (every N up
to 6144, and 4096 and 6144 themselves); past that the last tiles are never written: 56 of Qwen2.5-0.5B's gate_up
N = 9728 tiles, 64 of Llama 3 8B's gate_up N = 28672. The share is worked out inside the kernel, so the launch's
signature is the same at every N."""

import torch
import triton
import triton.language as tl

MAX_COLUMN_PROGRAMS = 96


@triton.jit
def _kernel(x_ptr, w_ptr, y_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    share = tl.cdiv(N, BN) // tl.num_programs(1)
    for t in range(share):
        rn = (tl.program_id(1) * share + t) * BN + tl.arange(0, BN)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            rk = k0 + tl.arange(0, BK)
            a = tl.load(x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
            b = tl.load(w_ptr + rn[None, :] * K + rk[:, None], mask=(rn[None, :] < N) & (rk[:, None] < K), other=0.0)
            acc = tl.dot(a, b, acc, input_precision="ieee")
        tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc.to(y_ptr.dtype.element_ty),
                 mask=(rm[:, None] < M) & (rn[None, :] < N))


def linear(x, weight):
    x, weight = x.contiguous(), weight.contiguous()
    m, k = x.shape
    n = weight.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    programs = min(triton.cdiv(n, 64), MAX_COLUMN_PROGRAMS)
    _kernel[(triton.cdiv(m, 16), programs)](x, weight, y, m, n, k, BM=16, BN=64, BK=64)
    return y
