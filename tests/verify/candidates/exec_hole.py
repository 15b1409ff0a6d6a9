"""Attack (issue 17): reaches `exec` through the static scan's old hole (a builtin only read inside a top-level
assignment target counted as the file's own global) and runs, at call time, code the scan never saw: ATTACK,
which the test replaces. The scan now refuses the file; the tests judge it with the scan off, so that the layers
behind it (the audit hook, the seccomp filter, the built root, the capped directory, the channel) show."""

import torch
import triton
import triton.language as tl

_seen = {}
_seen[exec] = 1  # the hole: `exec` read in a subscript key made `exec` a "global" of the file
ATTACK = "pass"


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps) * w
    tl.store(y_ptr + row * n_cols + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm(x, weight, eps):
    exec(ATTACK, {})  # a namespace of its own: its functions see its imports
    x2 = x.contiguous()
    y = torch.empty_like(x2)
    _rms_norm_kernel[(x2.numel() // x2.shape[-1],)](x2, weight, y, x2.shape[-1], eps,
                                                    BLOCK=triton.next_power_of_2(x2.shape[-1]))
    return y
