"""An online softmax (a running max and sum over chunks of 256 columns, one read for the statistics and one to
normalise) with the classic bug: a chunk of nothing but -inf before the row's first finite score rescales the sum by
exp(-inf - (-inf)), NaN, so every row with such a prefix (left padding, a sliding window's start) comes out NaN.
Right wherever a row's -inf entries are only its tail (a causal mask)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, n_cols, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, CHUNK)
    base = x_ptr + row * n_cols
    m = tl.max(tl.full((CHUNK,), float("-inf"), tl.float32), axis=0)
    s = tl.sum(tl.zeros((CHUNK,), tl.float32), axis=0)
    for start in range(0, n_cols, CHUNK):
        mask = start + offs < n_cols
        x = tl.load(base + start + offs, mask=mask, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    out = y_ptr + row * n_cols
    for start in range(0, n_cols, CHUNK):
        mask = start + offs < n_cols
        x = tl.load(base + start + offs, mask=mask, other=float("-inf")).to(tl.float32)
        tl.store(out + start + offs, (tl.exp(x - m) / s).to(y_ptr.dtype.element_ty), mask=mask)


def softmax(x):
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty_like(x2)
    _softmax_kernel[(x2.shape[0],)](x2, y, x2.shape[1], CHUNK=min(triton.next_power_of_2(x2.shape[1]), 256))
    return y.view(x.shape)
