"""Autotuned over ROWS=1 and ROWS=2, both right; at a served step (2,048 rows or more of 4,096 or more) its
early_config_prune returns a configuration of its own, ROWS=8 (one config left: Triton runs it untimed), whose
reduction runs over the wrong axis. No compared case reaches that size (ordinary cases cut the rows, range cases
keep at most 4M values), and the configuration is in no list the checker was shown: the dry call at the served
shape names it, and the probe that makes it too (the served rows, the width being whole) runs it, sampled."""

import torch
import triton
import triton.language as tl


def _prune(configs, named_args, **kwargs):
    if named_args["n_rows"] >= 2048 and named_args["n_cols"] >= 4096:
        return [triton.Config({"ROWS": 8}, num_warps=8)]
    return configs


@triton.autotune(configs=[triton.Config({"ROWS": 1}, num_warps=4), triton.Config({"ROWS": 2}, num_warps=4)],
                 key=["n_rows", "n_cols"], prune_configs_by={"early_config_prune": _prune})
@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, x_row_stride, y_row_stride, eps, BLOCK: tl.constexpr,
                     ROWS: tl.constexpr):
    rows = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    if ROWS > 4:  # the fault: over the rows of the tile, not along each row
        y = x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)[None, :] * w[None, :]
    else:
        y = x * tl.rsqrt(tl.sum(x * x, axis=1) / n_cols + eps)[:, None] * w[None, :]
    tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm(x, weight, eps):
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    rows, n = x2.shape
    y = torch.empty_like(x2)
    grid = lambda meta: (triton.cdiv(rows, meta["ROWS"]),)  # noqa: E731
    _rms_norm_kernel[grid](x2, weight, y, rows, n, x2.stride(0), y.stride(0), eps, BLOCK=triton.next_power_of_2(n))
    return y.view(x.shape)
