"""A test-only target that writes in place: vLLM's fused_add_rms_norm contract, where `residual` is updated
to x + residual and only the normalised output is returned. It exercises the checker's mutation contract
(`Target.mutates`); the built-in fused_add_rms_norm target returns both tensors and writes nothing."""

import torch

from autotune.targets.base import Target, activations, norm_weight, quiet_rows, upcast
from autotune.targets.fused_add_rms_norm import bytes_moved, flops


def add_rms_norm_inplace(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    s = upcast(x) + upcast(residual)
    residual.copy_(s.to(residual.dtype))
    y = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + eps)
    return (y * upcast(weight)).to(x.dtype)


def make_inputs(shape, dtype, gen, kind):
    quiet = quiet_rows(shape, gen)
    x = (activations(shape, torch.float32, gen, kind) * quiet).to(dtype)
    residual = (activations(shape, torch.float32, gen, "normal") * quiet).to(dtype)
    return x, residual, norm_weight(shape[-1], dtype, gen), 1e-5


TARGET = Target(
    name="add_rms_norm_inplace",
    summary="residual add + RMSNorm, vLLM style: residual <- x + residual in place, returns the norm",
    reference=add_rms_norm_inplace,
    make_inputs=make_inputs,
    bytes_moved=bytes_moved,
    flops=flops,
    default_shapes=((4, 256),),
    edge_shapes=((1, 128), (37, 1000)),
    mutates=("residual",),
)
