"""Wrong (issue 27, class 5): at grids only served sizes reach (over 1000 rows: the range cases, which run a sample
of the programs) each program writes the first half of its row right, reads one element of its own still
unwritten second half, and writes that half wrong. A sample that let the read taint the program took the wrong
stores out of the comparison and compared only the right half; the ordinary cases (at most 256 rows) are right."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, n_cols, x_stride, y_stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    y = x * rstd * tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    out = y_ptr + row * y_stride
    if tl.num_programs(0) > 1000:
        first = cols < n_cols // 2
        tl.store(out + cols, y.to(y_ptr.dtype.element_ty), mask=mask & first)
        tl.load(out + n_cols - 1)  # its own unwritten output: the program is tainted from here on
        tl.store(out + cols, (y * 1.5).to(y_ptr.dtype.element_ty), mask=mask & ~first)
    else:
        tl.store(out + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm(x, weight, eps):
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])
    y = torch.empty((x2.shape[0], shape[-1]), dtype=x.dtype, device=x.device)
    _rms_norm_kernel[(x2.shape[0],)](x2, weight, y, shape[-1], x2.stride(0), y.stride(0), eps,
                                     BLOCK=triton.next_power_of_2(shape[-1]))
    return y.reshape(shape)
