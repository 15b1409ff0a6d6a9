"""A linear that is right everywhere the interpreter runs it, and launches on no H100 or H200: 256 x 256 output
tiles over 256-wide K steps keep two 256 x 256 operand tiles in shared memory (256 KB in bf16, twice that in fp32),
past the 227 KB an sm_90 block may have, so Triton's launcher raises OutOfResources on the GPU. (The attacker's a5
was the same idea with 4 pipeline stages.)"""

import torch
import triton
import triton.language as tl


@triton.jit
def _linear_kernel(x_ptr, w_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(x_ptr + rm[:, None] * stride_xm + (k + rk)[None, :],
                    mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * stride_wn + (k + rk)[:, None],
                    mask=(rn[None, :] < N) & ((k + rk)[:, None] < K), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    tl.store(y_ptr + rm[:, None] * stride_ym + rn[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def linear(x, weight):
    a = x.reshape(-1, x.shape[-1])
    if a.stride(-1) != 1:
        a = a.contiguous()
    w = weight if weight.stride(-1) == 1 else weight.contiguous()
    M, K = a.shape
    N = w.shape[0]
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    grid = (triton.cdiv(M, 256), triton.cdiv(N, 256))
    _linear_kernel[grid](a, w, y, M, N, K, a.stride(0), w.stride(0), y.stride(0),
                         BLOCK_M=256, BLOCK_N=256, BLOCK_K=256, num_warps=8, num_stages=1)
    return y.reshape(*x.shape[:-1], N)
