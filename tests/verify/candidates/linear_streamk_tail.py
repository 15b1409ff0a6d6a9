"""Wrong (an attacker's): classic tiles for decode-sized M; for prefill-sized fp32 M a "stream-K" launch: every tile but the
last computed whole by one program (plain store), the last tile's K range split over two programs that
atomic_add their partial sums into a zeroed y. BUG: the second half starts one K block late."""

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
        acc = tl.dot(a, b, acc, input_precision="ieee")
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _streamk_kernel(x_ptr, w_ptr, y_ptr, M, N, K, TILES_N, FULL, BM: tl.constexpr, BN: tl.constexpr,
                    BK: tl.constexpr):
    pid = tl.program_id(0)
    tile = tl.minimum(pid, FULL)
    half = (K // 2) // BK * BK
    k_lo = 0
    k_hi = K
    if pid > FULL:
        k_lo = half + BK  # BUG: should be `half`
    elif pid == FULL:
        k_hi = half
    rm = (tile // TILES_N) * BM + tl.arange(0, BM)
    rn = (tile % TILES_N) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * K + rk[:, None], mask=(rn[None, :] < N) & (rk[:, None] < K), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    ptrs = y_ptr + rm[:, None] * N + rn[None, :]
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    if pid < FULL:
        tl.store(ptrs, acc, mask=mask)
    else:
        tl.atomic_add(ptrs, acc, mask=mask)


def linear(x, weight):
    x, weight = x.contiguous(), weight.contiguous()
    m, k = x.shape
    n = weight.shape[0]
    if m >= 64 and x.dtype == torch.float32:
        y = torch.zeros((m, n), dtype=x.dtype, device=x.device)
        tiles_n = triton.cdiv(n, 64)
        tiles = triton.cdiv(m, 64) * tiles_n
        _streamk_kernel[(tiles + 1,)](x, weight, y, m, n, k, tiles_n, tiles - 1, BM=64, BN=64, BK=64)
        return y
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    _kernel[(triton.cdiv(m, 16), triton.cdiv(n, 32))](x, weight, y, m, n, k, BM=16, BN=32, BK=64)
    return y
