"""`model.quant=int8` and `model.quant=w8a8`: the built-in model's projections served with int8 weights.

int8 (W8A16): the activations stay in the model's dtype and each projection calls `dispatch.int8_linear`.
w8a8: the activations are quantized too, per token (symmetric, scale = max |x| of the row / 127), and each
projection multiplies int8 by int8 (`w8a8_linear` below, in plain torch: no target yet). Where a norm feeds
a projection (every layer's input norm but layer 0's, and the post-attention norm), the norm and the
quantization are one op, `dispatch.fused_add_rms_norm_quant`, as vLLM fuses them; the attention output and
the MLP's activation are quantized by `per_token_int8` alone.

After the weights are seeded or loaded, each decoder layer's four projections (qkv, o, gate_up, down) are
quantized symmetrically per output channel (`autotune.targets.int8_linear.quantize`: scale = max |w| of the
row / 127) and their float weights dropped; the layer then calls `dispatch.int8_linear` instead of
`dispatch.linear`. The embedding, the norms and the LM head stay in the model's dtype, as in vLLM's
weight-only schemes. On the tiny preset the int8 model's fp32 logits correlate with the float model's
at 0.999 (tests/serve/test_quant.py).
"""

from __future__ import annotations

import torch

from autotune.errors import UserError
from autotune.targets.fused_add_rms_norm_quant import per_token_int8
from autotune.targets.int8_linear import quantize

__all__ = ["QUANT_MODES", "check_mode", "per_token_int8", "quantize_layers", "w8a8_linear"]

QUANT_MODES = ("none", "int8", "w8a8")
PROJECTIONS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")


def check_mode(mode: str) -> str:
    if mode not in QUANT_MODES:
        raise UserError(f"model.quant={mode!r} is not supported (use one of {', '.join(QUANT_MODES)})")
    return mode


@torch.no_grad()
def quantize_layers(model) -> None:
    """Replace every layer's projection weights with (int8 weight, fp32 scale) buffers, in place."""
    for layer in model.layers:
        for name in PROJECTIONS:
            weight, scale = quantize(getattr(layer, name))
            delattr(layer, name)
            layer.register_buffer(f"{name}_int8", weight)
            layer.register_buffer(f"{name}_scale", scale)
        layer.quantized = True


def w8a8_linear(q: torch.Tensor, x_scale: torch.Tensor, weight: torch.Tensor, w_scale: torch.Tensor,
                dtype: torch.dtype) -> torch.Tensor:
    """(q [T, K] int8 with x_scale [T, 1]) @ (weight [N, K] int8 with w_scale [N]).T -> [T, N] in `dtype`.
    The int8 products are summed in fp32 (exact up to 2**24, a few rounding steps beyond at large K): torch._int_mm
    sums them exactly in int32 but took 6x as long on the CPU (245 ms against 42 ms in the tiny model's profile)."""
    acc = q.float() @ weight.float().T
    return (acc * x_scale.float() * w_scale.float()).to(dtype)
