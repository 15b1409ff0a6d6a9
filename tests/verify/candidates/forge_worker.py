"""Cheat: reaches the worker module through `typing.sys` and swaps its `run_case`, so that every case runs
a copy kernel on the reference's answer it computes itself, and launch counts and the op record look clean."""

import typing

import torch
import triton
import triton.language as tl

_worker = typing.sys.modules["__main__"]
_real_run_case = _worker.run_case


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


def _honest_looking(x, weight, eps):
    y = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
    out = torch.empty_like(y)
    _copy_kernel[(triton.cdiv(y.numel(), 1024),)](y, out, y.numel(), BLOCK=1024)
    return out


def _forged_run_case(fn, case, device):
    frame = _real_run_case(_honest_looking, case, device)
    frame["torch_ops"] = {"aten.empty_like": 1}
    return frame


_worker.run_case = _forged_run_case


def rms_norm(x, weight, eps):
    return _honest_looking(x, weight, eps)
