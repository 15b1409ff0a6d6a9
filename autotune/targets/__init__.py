"""The targets: ops a kernel may replace, one module each. `get("rms_norm")` returns its Target."""

from __future__ import annotations

import importlib

from autotune.errors import UserError
from autotune.targets.base import Target

NAMES = ("rms_norm", "silu_and_mul", "fused_add_rms_norm", "rotary_embedding", "softmax", "decode_attention",
         "prefill_attention", "linear", "int8_linear")


def get(name: str) -> Target:
    if name not in NAMES:
        raise UserError(f"unknown target '{name}' (known targets: {', '.join(NAMES)})")
    return importlib.import_module(f"autotune.targets.{name}").TARGET


def all_targets() -> list[Target]:
    return [get(n) for n in NAMES]
