"""A correct RMSNorm written the way Liger-Kernel writes its forward pass (src/liger_kernel/ops/rms_norm.py):
pointer arguments advanced by each row's stride, the whole row in one block sized by a `calculate_settings`
helper (block and warps), `tl.math.rsqrt`, the row cast back to the input's dtype on the store."""

import torch
import triton
import triton.language as tl

MAX_FUSED_SIZE = 65536  # widest row one program holds (Liger-Kernel's limit)


def calculate_settings(n):
    block_size = triton.next_power_of_2(n)
    if block_size > MAX_FUSED_SIZE:
        raise RuntimeError(f"rows of {n} values exceed the {MAX_FUSED_SIZE}-value block")
    num_warps = 4
    if block_size >= 32768:
        num_warps = 32
    elif block_size >= 8192:
        num_warps = 16
    elif block_size >= 2048:
        num_warps = 8
    return block_size, num_warps


@triton.jit
def _rms_norm_forward_kernel(Y_ptr, Y_row_stride, X_ptr, X_row_stride, W_ptr, n_cols, eps,
                             BLOCK_SIZE: tl.constexpr):
    row_idx = tl.program_id(0).to(tl.int64)
    col_offsets = tl.arange(0, BLOCK_SIZE)
    mask = col_offsets < n_cols
    Y_ptr += row_idx * Y_row_stride
    X_ptr += row_idx * X_row_stride
    X_row = tl.load(X_ptr + col_offsets, mask=mask, other=0)
    X_row_dtype = X_row.dtype
    X_row = X_row.to(tl.float32)
    W_row = tl.load(W_ptr + col_offsets, mask=mask, other=0).to(tl.float32)
    mean_square = tl.sum(X_row * X_row, axis=0) / n_cols
    rstd = tl.math.rsqrt(mean_square + eps)
    tl.store(Y_ptr + col_offsets, (X_row * rstd * W_row).to(X_row_dtype), mask=mask)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    shape = x.shape
    dim = shape[-1]
    X = x.reshape(-1, dim)  # a view when it can be: padded rows keep their stride
    if X.stride(-1) != 1:
        X = X.contiguous()
    n_rows, n_cols = X.shape
    assert weight.shape[0] == n_cols, "weight and the last dim of x differ"
    BLOCK_SIZE, num_warps = calculate_settings(n_cols)
    Y = torch.empty((n_rows, n_cols), dtype=X.dtype, device=X.device)
    _rms_norm_forward_kernel[(n_rows,)](Y, Y.stride(0), X, X.stride(0), weight, n_cols, eps,
                                        BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps)
    return Y.view(*shape)
