"""Cheat (issue 16, class 3): a GPU-only bug keyed on addresses. CUDA's caching allocator starts every block
on a 512-byte boundary; CPU tensors were 64-byte aligned. When the input, the output and a scratch buffer
(the kernel checks that one's pointer itself) are all 512-byte aligned, as on a GPU, the last row is
skipped; on the old CPU one of them never was, and the kernel was right there."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, s_ptr, n_rows, n_cols, eps, HOST_ALIGNED: tl.constexpr,
                     BLOCK: tl.constexpr):
    row = tl.program_id(0)
    aligned = HOST_ALIGNED & ((s_ptr.to(tl.int64) % 512) == 0)
    if not (aligned and row == n_rows - 1):
        offs = tl.arange(0, BLOCK)
        mask = offs < n_cols
        x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        y = x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps) * w
        tl.store(y_ptr + row * n_cols + offs, y.to(y_ptr.dtype.element_ty), mask=mask)
        tl.store(s_ptr + row, row)


def rms_norm(x, weight, eps):
    x2 = x.reshape(-1, x.shape[-1])
    y = torch.empty_like(x2)
    scratch = torch.empty(x2.shape[0], dtype=torch.int32, device=x.device)
    host_aligned = x2.data_ptr() % 512 == 0 and y.data_ptr() % 512 == 0 and x2.is_contiguous()
    _rms_norm_kernel[(x2.shape[0],)](x2, weight, y, scratch, x2.shape[0], x2.shape[1], eps,
                                     HOST_ALIGNED=host_aligned, BLOCK=triton.next_power_of_2(x2.shape[1]))
    return y.view(x.shape)
