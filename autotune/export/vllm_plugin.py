"""vLLM plugin that routes vLLM's ops to kernels merged by autotune (written by `autotune export vllm`).

This file is copied as the plugin package's `__init__.py`; it imports nothing from autotune. vLLM calls
`register()` in every process it starts (entry point group `vllm.general_plugins`). Per op:

- rms_norm, fused_add_rms_norm: where the installed vLLM has vLLM IR (`vllm.ir`, 0.2x and later), an
  implementation under the provider name "autotune" (`register_impl`), chosen with
  `--ir-op-priority '{"rms_norm": ["autotune"], "fused_add_rms_norm": ["autotune"]}'`; without vLLM IR, an
  out-of-tree `RMSNorm` (`CustomOp.register_oot`).
- rotary_embedding: an out-of-tree `RotaryEmbedding` (plain RoPE, NeoX style, full rotary dim).
- silu_and_mul: an out-of-tree `SiluAndMul`.

Adapters: vLLM IR's fused_add_rms_norm is functional (returns the normed sum and the sum), as the kernel is;
vLLM's rotary takes positions, query [T, H*D], key [T, Hk*D] and a cos/sin cache [P, D] (cos then sin), the
kernel one x [T, H, D] with cos, sin [T, D/2] gathered at the positions. Calls the kernel does not cover
(another rotary style, a partial rotary dim, no weight, non-contiguous rows) go to vLLM's own implementation.

The kernels are Triton: they run on a GPU, or on the CPU only under the Triton interpreter (TRITON_INTERPRET=1
in the server's environment, for testing); elsewhere the plugin registers nothing and logs why.

AUTOTUNE_KERNELS=rms_norm,silu_and_mul (comma-separated) in the server's environment registers only those of the
bundled kernels, so that each one's end-to-end effect can be measured alone (`autotune bench bench.per_kernel=true`).
"""


import importlib
import json
import logging
import os
from pathlib import Path

logger = logging.getLogger(__name__)
MANIFEST = json.loads((Path(__file__).parent / "manifest.json").read_text())
PROVIDER = "autotune"
_registered: dict[str, str] = {}  # target -> how it was registered


def kernels_runnable() -> bool:
    import torch

    return torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1"


def kernel(target: str):
    """The merged kernel's entry function for a target (its kernels/<target>.py)."""
    module = importlib.import_module(f"{__name__}.kernels.{target}")
    return getattr(module, target)


def register() -> dict[str, str]:
    """Register every bundled kernel with vLLM; safe to call more than once (vLLM loads plugins per process)."""
    if _registered:
        return dict(_registered)
    if not kernels_runnable():
        logger.warning("autotune kernels not registered: no CUDA GPU and TRITON_INTERPRET is not 1")
        return {}
    targets = set(MANIFEST["kernels"])
    only = {t.strip() for t in os.environ.get("AUTOTUNE_KERNELS", "").split(",") if t.strip()}
    if only:
        targets &= only
    try:
        import vllm.ir  # noqa: F401
        has_ir = True
    except ImportError:
        has_ir = False
    for name in ("rms_norm", "fused_add_rms_norm"):
        if name in targets:
            _registered[name] = _register_ir(name) if has_ir else _register_rms_norm_oot(targets)
    if "rotary_embedding" in targets:
        _registered["rotary_embedding"] = _register_rotary_oot()
    if "silu_and_mul" in targets:
        _registered["silu_and_mul"] = _register_silu_and_mul_oot()
    logger.info("autotune kernels registered: %s", _registered)
    return dict(_registered)


def _rows_ok(x, weight, variance_size) -> bool:
    return (weight is not None and variance_size is None and x.dtype == weight.dtype and x.dim() >= 1
            and x.is_contiguous() and weight.is_contiguous())


def _register_ir(name: str) -> str:
    """A vLLM IR implementation with the native op's exact signature (vLLM checks the schema)."""
    from torch import Tensor
    from vllm import ir

    fn = kernel(name)
    if name == "rms_norm":
        def supports(x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None) -> bool:
            return _rows_ok(x, weight, variance_size)

        def impl(x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None) -> Tensor:
            return fn(x, weight, epsilon)
    else:
        def supports(x: Tensor, x_residual: Tensor, weight: Tensor | None, epsilon: float,
                     variance_size: int | None = None) -> bool:
            return _rows_ok(x, weight, variance_size) and x_residual.shape == x.shape and x_residual.is_contiguous()

        def impl(x: Tensor, x_residual: Tensor, weight: Tensor | None, epsilon: float,
                 variance_size: int | None = None) -> tuple[Tensor, Tensor]:
            out, summed = fn(x, x_residual, weight, epsilon)
            return out, summed
    getattr(ir.ops, name).register_impl(PROVIDER, supports_args=supports)(impl)
    return f"vllm.ir provider '{PROVIDER}'"


def _register_rms_norm_oot(targets: set[str]) -> str:
    """Older vLLM (no vllm.ir): replace the RMSNorm layer; forward(x, residual=None) as vLLM's."""
    if "RMSNorm" in _oot_names():
        return "CustomOp.register_oot RMSNorm"
    from vllm.model_executor.custom_op import CustomOp
    from vllm.model_executor.layers.layernorm import RMSNorm

    plain = kernel("rms_norm") if "rms_norm" in targets else None
    fused = kernel("fused_add_rms_norm") if "fused_add_rms_norm" in targets else None

    class AutotuneRMSNorm(RMSNorm):
        def _autotune(self, x, residual=None):
            weight = getattr(self, "weight", None)
            usable = _rows_ok(x, weight, getattr(self, "variance_size_override", None))
            if residual is None and plain is not None and usable:
                return plain(x, weight, self.variance_epsilon)
            if residual is not None and fused is not None and usable and residual.shape == x.shape:
                return fused(x, residual, weight, self.variance_epsilon)
            return super().forward_native(x, residual)

        forward_native = forward_cuda = forward_cpu = _autotune

    CustomOp.register_oot(AutotuneRMSNorm, name="RMSNorm")
    return "CustomOp.register_oot RMSNorm"


def _register_rotary_oot() -> str:
    from vllm.model_executor.custom_op import CustomOp
    from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbedding

    fn = kernel("rotary_embedding")

    class AutotuneRotaryEmbedding(RotaryEmbedding):
        def _autotune(self, positions, query, key=None):
            if not self.is_neox_style or self.rotary_dim != self.head_size:
                return super().forward_native(positions, query, key)
            positions = positions.flatten()
            tokens = positions.shape[0]
            cos, sin = self.cos_sin_cache.index_select(0, positions).float().chunk(2, dim=-1)  # [T, D/2] each
            query = fn(query.reshape(tokens, -1, self.head_size).contiguous(), cos, sin).reshape(query.shape)
            if key is not None:
                key = fn(key.reshape(tokens, -1, self.head_size).contiguous(), cos, sin).reshape(key.shape)
            return query, key

        forward_native = forward_cuda = forward_cpu = _autotune

    CustomOp.register_oot(AutotuneRotaryEmbedding, name="RotaryEmbedding")
    return "CustomOp.register_oot RotaryEmbedding"


def _register_silu_and_mul_oot() -> str:
    from vllm.model_executor.custom_op import CustomOp
    from vllm.model_executor.layers.activation import SiluAndMul

    fn = kernel("silu_and_mul")

    class AutotuneSiluAndMul(SiluAndMul):
        def _autotune(self, x):
            return fn(x.contiguous())

        forward_native = forward_cuda = forward_cpu = _autotune

    CustomOp.register_oot(AutotuneSiluAndMul, name="SiluAndMul")
    return "CustomOp.register_oot SiluAndMul"


def _oot_names() -> set[str]:
    from vllm.model_executor.custom_op import op_registry_oot

    return set(op_registry_oot)
