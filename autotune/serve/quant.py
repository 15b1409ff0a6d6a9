"""`model.quant=int8`: the built-in model's projections served as weight-only int8 (W8A16).

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
from autotune.targets.int8_linear import quantize

QUANT_MODES = ("none", "int8")
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
