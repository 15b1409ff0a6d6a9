"""A correct weight-only int8 GEMM (W8A16) with split-K, in the style of the decode GEMMs of vLLM and
GPTQ-Triton: a decode step has a handful of tokens, so the N tiles alone give too few programs; SPLIT_K
programs share each tile's K. Each program loads int8 weight tiles [BLOCK_K, BLOCK_N] (half the bytes of
bf16), converts them to the activations' dtype in registers (exact: |w| <= 127 has 7 bits), multiplies on
tl.dot with an fp32 accumulator, scales its partial per output column and writes it to an fp32 scratch
[SPLIT_K, M, N]; a second kernel sums the splits in a fixed order (deterministic, unlike atomics)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _w8a16_splitk_kernel(x_ptr, w_ptr, s_ptr, part_ptr, M, N, K, stride_xm, stride_xk, stride_wn, stride_wk,
                         stride_ps, stride_pm, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # split pid_k takes K blocks pid_k, pid_k + SPLIT_K, ...: every split gets a share however large K is
    for k0 in range(pid_k * BLOCK_K, K, BLOCK_K * SPLIT_K):
        kk = k0 + rk
        a = tl.load(x_ptr + rm[:, None] * stride_xm + kk[None, :] * stride_xk,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * stride_wn + kk[:, None] * stride_wk,
                    mask=(rn[None, :] < N) & (kk[:, None] < K), other=0)
        acc = tl.dot(a, w.to(a.dtype), acc, input_precision="ieee")
    acc = acc * tl.load(s_ptr + rn, mask=rn < N, other=0.0)[None, :]
    tl.store(part_ptr + pid_k * stride_ps + rm[:, None] * stride_pm + rn[None, :], acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _sum_splits_kernel(part_ptr, y_ptr, numel, stride_ps, SPLIT_K: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in tl.static_range(SPLIT_K):
        total += tl.load(part_ptr + s * stride_ps + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, total.to(y_ptr.dtype.element_ty), mask=mask)


def int8_linear(x, weight, scale):
    x2 = x.reshape(-1, x.shape[-1])
    m, k = x2.shape
    n = weight.shape[0]
    block_m, block_n, block_k, split_k = 16, 64, 64, 4
    partial = torch.empty((split_k, m, n), dtype=torch.float32, device=x.device)
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, block_n), split_k)
    _w8a16_splitk_kernel[grid](x2, weight, scale, partial, m, n, k, x2.stride(0), x2.stride(1),
                               weight.stride(0), weight.stride(1), partial.stride(0), partial.stride(1),
                               BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, SPLIT_K=split_k, num_warps=4)
    _sum_splits_kernel[(triton.cdiv(m * n, 1024),)](partial, y, m * n, partial.stride(0), SPLIT_K=split_k,
                                                    BLOCK=1024, num_warps=4)
    return y.reshape(*x.shape[:-1], n)
