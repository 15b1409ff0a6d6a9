"""Quant modes: `model.quant=<name>` picks a registered handler that says how the built-in model's projections (and
the norms that feed them) run. One class per mode, registered by name, in the style of torchao's configs and their
handlers: every model family and preset accepts every mode, and adding one is a class here (README, "Adding a
quant mode").

    quant.mode("int8").prepare(layer)            # after the weights are seeded or loaded
    quant.mode("int8").project(layer, x, name)   # x @ W.T for projection `name` of a decoder layer
    quant.mode("w8a8").add_norm(layer, h, residual, weight, eps)

- `none`: float weights; projections through `dispatch.linear`, norms through `dispatch.fused_add_rms_norm`.
- `int8` (W8A16): each decoder layer's four projections quantized symmetrically per output channel
  (`autotune.targets.int8_linear.quantize`: scale = max |w| of the row / 127), float weights dropped; the
  activations stay in the model's dtype and each projection calls `dispatch.int8_linear`. The embedding, the norms
  and the LM head stay in the model's dtype, as in vLLM's weight-only schemes. On the tiny preset the int8 model's
  fp32 logits correlate with the float model's at 0.999 (tests/serve/test_quant.py).
- `w8a8`: int8 weights as above, and activations quantized per token (symmetric, scale = max |x| of the row / 127);
  each projection multiplies int8 by int8 (`w8a8_linear` below, in plain torch: no target yet). Where a norm feeds a
  projection (every layer's input norm but layer 0's, and the post-attention norm), the norm and the quantization
  are one op, `dispatch.fused_add_rms_norm_quant`, as vLLM fuses them; the attention output and the MLP's
  activation are quantized by `per_token_int8` alone.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from autotune.errors import UserError
from autotune.serve import dispatch
from autotune.targets.fused_add_rms_norm_quant import per_token_int8
from autotune.targets.int8_linear import quantize

__all__ = ["MODES", "PROJECTIONS", "QuantMode", "mode", "per_token_int8", "register", "w8a8_linear"]

PROJECTIONS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
MODES: dict[str, QuantMode] = {}


class QuantMode:
    """A quant mode's handler. `prepare` runs once per decoder layer after its weights are in place; `project` and
    `add_norm` are the two places a decoder layer asks it how to compute. The defaults are the float model's."""

    name: ClassVar[str]
    targets: ClassVar[tuple[str, ...]] = ()  # the dispatch points the mode makes the model call (beyond the float's)

    def prepare(self, layer) -> None:
        """Change the layer's weights in place (quantize, drop the float ones); nothing for a float model."""

    def project(self, layer, x, name: str) -> torch.Tensor:
        return dispatch.linear(x, getattr(layer, name))

    def add_norm(self, layer, h, residual, weight, eps: float):
        """(the normed residual stream as the next projection takes it, the stream after adding h)."""
        return dispatch.fused_add_rms_norm(h, residual, weight, eps)


def register(cls: type[QuantMode]) -> type[QuantMode]:
    """Class decorator: `model.quant=<cls.name>` selects an instance of it."""
    MODES[cls.name] = cls()
    return cls


def mode(name: str) -> QuantMode:
    if name not in MODES:
        raise UserError(f"model.quant={name!r} is not supported (use one of {', '.join(MODES)})")
    return MODES[name]


@register
class NoQuant(QuantMode):
    name = "none"


@register
class Int8WeightOnly(QuantMode):
    name = "int8"
    targets = ("int8_linear",)

    @torch.no_grad()
    def prepare(self, layer) -> None:
        """Replace the layer's projection weights with (int8 weight, fp32 scale) buffers."""
        for proj in PROJECTIONS:
            weight, scale = quantize(getattr(layer, proj))
            delattr(layer, proj)
            layer.register_buffer(f"{proj}_int8", weight)
            layer.register_buffer(f"{proj}_scale", scale)

    def project(self, layer, x, name: str) -> torch.Tensor:
        return dispatch.int8_linear(x, getattr(layer, f"{name}_int8"), getattr(layer, f"{name}_scale"))


@register
class W8A8(Int8WeightOnly):
    name = "w8a8"
    targets = ("fused_add_rms_norm_quant",)

    def project(self, layer, x, name: str) -> torch.Tensor:
        """x is quantized here unless it came quantized from the norm, as (q, scale)."""
        q, scale = x if isinstance(x, tuple) else per_token_int8(x)
        return w8a8_linear(q, scale, getattr(layer, f"{name}_int8"), getattr(layer, f"{name}_scale"), layer.c.dtype)

    def add_norm(self, layer, h, residual, weight, eps: float):
        q, scale, residual = dispatch.fused_add_rms_norm_quant(h, residual, weight, eps)
        return (q, scale), residual


def w8a8_linear(q: torch.Tensor, x_scale: torch.Tensor, weight: torch.Tensor, w_scale: torch.Tensor,
                dtype: torch.dtype) -> torch.Tensor:
    """(q [T, K] int8 with x_scale [T, 1]) @ (weight [N, K] int8 with w_scale [N]).T -> [T, N] in `dtype`.
    The int8 products are summed in fp32 (exact up to 2**24, a few rounding steps beyond at large K): torch._int_mm
    sums them exactly in int32 but took 6x as long on the CPU (245 ms against 42 ms in the tiny model's profile)."""
    acc = q.float() @ weight.float().T
    return (acc * x_scale.float() * w_scale.float()).to(dtype)
