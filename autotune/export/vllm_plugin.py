"""vLLM plugin that routes vLLM's ops to kernels merged by autotune (written by `autotune export vllm`).

This file is copied as the plugin package's `__init__.py`; it imports nothing from autotune. vLLM calls
`register()` in every process it starts (entry point group `vllm.general_plugins`). Per op:

- rms_norm, fused_add_rms_norm: where the installed vLLM has vLLM IR (`vllm.ir`, 0.2x and later), an
  implementation under the provider name "autotune" (`register_impl`), chosen with
  `--ir-op-priority '{"rms_norm": ["autotune"], "fused_add_rms_norm": ["autotune"]}'`; without vLLM IR, an
  out-of-tree `RMSNorm` (`CustomOp.register_oot`). A provider the priority may name but that cannot serve here (no
  GPU and no interpreter, or left out by AUTOTUNE_KERNELS) is registered as unsupported: vLLM's worker refuses to
  start on a name no one registered, and skips an unsupported one for the next provider ('native').
- rotary_embedding: an out-of-tree `RotaryEmbedding` (both styles, any rotary dim).
- silu_and_mul: an out-of-tree `SiluAndMul`.
- fused_moe: when the winner is a configuration of vLLM's own Triton fused MoE, the package carries vLLM's tuned
  configuration files (`moe_configs/E=..,N=..,device_name=...json`) and register() points VLLM_TUNED_CONFIG_FOLDER
  at them (unless the user set it): vLLM's kernel runs with them. Otherwise the kernel itself, as an out-of-tree
  `UnquantizedFusedMoEMethod` whose forward takes vLLM's (x, w13 [E, 2I, H], w2 [E, H, I], topk_weights,
  topk_ids) as the kernel does; calls it does not cover (expert parallelism, biases, shared experts, another
  activation) go to vLLM's own.
- paged_attention: an attention backend registered in vLLM's backend registry as CUSTOM
  (`--attention-backend CUSTOM`): vLLM's Triton backend with its forward replaced by the kernel over the paged
  cache (the key and value halves of vLLM's [blocks, block_size, kv_heads, 2 x head_dim] cache, by their
  strides). vLLM's CPU platform refuses every backend but its own CPU_ATTN, so on a CPU build it registers but
  is never selected.

Adapters: vLLM IR's fused_add_rms_norm is functional (returns the normed sum and the sum), as the kernel is;
vLLM's rotary takes positions, query [T, H*D] and key [T, Hk*D] (views of the qkv projection), the kernel the same
viewed as [T, H, D], with the module's cos/sin cache [P, rot_dim] in query's dtype and its style, and returns both
rotated, as vLLM's forward does. Calls the kernels do not cover (no key, RMSNorm without a weight) go to vLLM's own
implementation.

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

from .devices import answer_device_queries  # copied beside this file (bundle.py)

logger = logging.getLogger(f"vllm.{__name__}")  # under vLLM's logger: its handler prints it, in every process
MANIFEST = json.loads((Path(__file__).parent / "manifest.json").read_text())
PROVIDER = "autotune"
_registered: dict[str, str] = {}  # target -> how it was registered


def kernels_runnable() -> bool:
    import torch

    return torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1"


def kernel(target: str):
    """The merged kernel's entry function for a target (its kernels/<target>.py)."""
    answer_device_queries(MANIFEST)
    module = importlib.import_module(f"{__name__}.kernels.{target}")
    return getattr(module, target)


def register() -> dict[str, str]:
    """Register every bundled kernel with vLLM; safe to call more than once (vLLM loads plugins per process)."""
    if _registered:
        return dict(_registered)
    targets = set(MANIFEST["kernels"])
    only = {t.strip() for t in os.environ.get("AUTOTUNE_KERNELS", "").split(",") if t.strip()}
    if only:  # AUTOTUNE_KERNELS: register only these (autotune bench, one kernel at a time)
        targets &= only
    configs = (MANIFEST.get("moe_configs") or {}).get("files") or []
    if "fused_moe" in targets and configs:  # vLLM's own kernel with our configuration: no kernel of ours runs
        _registered["fused_moe"] = _use_tuned_configs()
        targets.discard("fused_moe")
    try:
        import vllm.ir  # noqa: F401 (imported only to learn whether this vLLM has vLLM IR)
        has_ir = True
    except ImportError:
        has_ir = False
    runnable = kernels_runnable()
    if not runnable:
        logger.warning("autotune kernels not registered: no CUDA GPU and TRITON_INTERPRET is not 1")
    for name in ("rms_norm", "fused_add_rms_norm"):
        if name in targets and runnable:
            _registered[name] = _register_ir(name) if has_ir else _register_rms_norm_oot(targets)
        elif name in MANIFEST["kernels"] and has_ir:
            # --ir-op-priority may name the provider (the export prints the flag): vLLM's worker refuses to start
            # on a provider no one registered, so it exists, unsupported, and vLLM's next provider serves
            _registered[name] = _register_ir(name, "not runnable here" if not runnable
                                             else "left out by AUTOTUNE_KERNELS")
    if not runnable:
        return dict(_registered)
    if "rotary_embedding" in targets:
        _registered["rotary_embedding"] = _register_rotary_oot()
    if "silu_and_mul" in targets:
        _registered["silu_and_mul"] = _register_silu_and_mul_oot()
    if "fused_moe" in targets:
        _registered["fused_moe"] = _register_fused_moe_oot()
    if "paged_attention" in targets:
        _registered["paged_attention"] = _register_attention_backend()
    logger.info("autotune kernels registered: %s", _registered)
    return dict(_registered)


def _rows_ok(x, weight, variance_size) -> bool:
    return (weight is not None and variance_size is None and x.dtype == weight.dtype and x.dim() >= 1
            and x.is_contiguous() and weight.is_contiguous())


def _register_ir(name: str, unsupported: str = "") -> str:
    """A vLLM IR implementation with the native op's exact signature (vLLM checks the schema). `unsupported`: why
    the kernel cannot serve in this process; then the provider is registered as not supported on this platform,
    and vLLM skips it for the next provider in the priority (its function is never called)."""
    from vllm import ir

    supports, impl = (_rms_norm_ir if name == "rms_norm" else _fused_add_rms_norm_ir)(
        None if unsupported else kernel(name))
    if not unsupported:
        getattr(ir.ops, name).register_impl(PROVIDER, supports_args=supports)(impl)
        return f"vllm.ir provider '{PROVIDER}'"
    getattr(ir.ops, name).register_impl(PROVIDER, supported=False)(impl)
    logger.warning("autotune's %s provider is registered as unsupported (%s): vLLM's next provider serves it",
                   name, unsupported)
    return f"vllm.ir provider '{PROVIDER}' unsupported ({unsupported})"


def _rms_norm_ir(fn):
    """(supports, impl) for vllm.ir's rms_norm."""
    from torch import Tensor  # the annotations below are evaluated (and checked by vLLM) when they are defined

    def supports(x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None) -> bool:
        return _rows_ok(x, weight, variance_size)

    def impl(x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None) -> Tensor:
        return fn(x, weight, epsilon)
    return supports, impl


def _fused_add_rms_norm_ir(fn):
    """(supports, impl) for vllm.ir's fused_add_rms_norm."""
    from torch import Tensor

    def supports(x: Tensor, x_residual: Tensor, weight: Tensor | None, epsilon: float,
                 variance_size: int | None = None) -> bool:
        return _rows_ok(x, weight, variance_size) and x_residual.shape == x.shape and x_residual.is_contiguous()

    def impl(x: Tensor, x_residual: Tensor, weight: Tensor | None, epsilon: float,
             variance_size: int | None = None) -> tuple[Tensor, Tensor]:
        out, summed = fn(x, x_residual, weight, epsilon)
        return out, summed
    return supports, impl


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
            if key is None:  # cross-layer KV sharing: no key to rotate
                return super().forward_native(positions, query, key)
            cache = self.cos_sin_cache  # [max_position, rot_dim], in query's dtype as vLLM's own forward makes it
            if cache.dtype != query.dtype or cache.device != query.device:
                cache = cache.to(query.device, dtype=query.dtype)
            positions = positions.flatten()
            tokens = positions.shape[0]
            q, k = fn(positions, query.reshape(tokens, -1, self.head_size), key.reshape(tokens, -1, self.head_size),
                      cache, self.is_neox_style)  # views of the qkv projection, as vLLM's layers pass them
            return q.reshape(query.shape), k.reshape(key.shape)

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


def _use_tuned_configs() -> str:
    folder = str(Path(__file__).parent / "moe_configs")
    current = os.environ.get("VLLM_TUNED_CONFIG_FOLDER")
    if current and current != folder:
        logger.warning("autotune's fused MoE configurations not used: VLLM_TUNED_CONFIG_FOLDER is %s (copy the files "
                       "from %s there)", current, folder)
        return f"tuned configurations in {folder}, not used: VLLM_TUNED_CONFIG_FOLDER={current}"
    os.environ["VLLM_TUNED_CONFIG_FOLDER"] = folder  # vllm.envs reads it when the first MoE layer looks
    return f"vLLM's Triton fused MoE with the tuned configurations in {folder}"


def moe_call_supported(layer, x, shared_experts=None) -> bool:
    """Whether a vLLM fused-MoE call is the op the kernel computes: unquantized SiLU experts, no expert map, no
    biases, weights applied after the experts, no shared experts, x in the weights' dtype."""
    activation = str(getattr(layer, "activation", "silu")).lower()
    w13 = getattr(layer, "w13_weight", None)
    return (activation.endswith("silu") and getattr(layer, "expert_map", None) is None and w13 is not None
            and not getattr(layer, "apply_router_weight_on_input", False) and shared_experts is None
            and getattr(layer, "w13_bias", None) is None and x.dtype == w13.dtype and x.dim() == 2)


def _register_fused_moe_oot() -> str:
    import torch
    from vllm.model_executor.custom_op import CustomOp
    from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import UnquantizedFusedMoEMethod

    fn = kernel("fused_moe")

    class AutotuneFusedMoEMethod(UnquantizedFusedMoEMethod):
        def _autotune(self, layer, x, topk_weights, topk_ids, shared_experts=None, shared_experts_input=None):
            if not moe_call_supported(layer, x, shared_experts):
                return super().forward_native(layer, x, topk_weights, topk_ids, shared_experts, shared_experts_input)
            return fn(x.contiguous(), layer.w13_weight, layer.w2_weight, topk_weights.float().contiguous(),
                      topk_ids.to(torch.int32).contiguous())

        forward_native = forward_cuda = forward_cpu = _autotune

    CustomOp.register_oot(AutotuneFusedMoEMethod, name="UnquantizedFusedMoEMethod")
    return "CustomOp.register_oot UnquantizedFusedMoEMethod"


def _register_attention_backend() -> str:
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    register_backend(AttentionBackendEnum.CUSTOM, f"{__name__}.AutotuneAttentionBackend")
    return "attention backend CUSTOM (--attention-backend CUSTOM)"


_attention_classes: dict = {}


def _attention_backend():
    """vLLM's Triton attention backend with the paged_attention kernel in its forward (built on first use)."""
    if _attention_classes:
        return _attention_classes["backend"]
    from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend, TritonAttentionImpl

    fn = kernel("paged_attention")

    class AutotuneAttentionImpl(TritonAttentionImpl):
        def forward(self, layer, query, key, value, kv_cache, attn_metadata, output, output_scale=None,
                    output_block_scale=None):
            plain = (attn_metadata is not None and output_scale is None and output_block_scale is None
                     and getattr(self, "alibi_slopes", None) is None and not getattr(self, "logits_soft_cap", 0)
                     and getattr(self, "sinks", None) is None and kv_cache.dtype == query.dtype)
            if not plain:
                return super().forward(layer, query, key, value, kv_cache, attn_metadata, output, output_scale,
                                       output_block_scale)
            n = attn_metadata.num_actual_tokens
            key_cache, value_cache = kv_cache.transpose(1, 2).split(self.head_size, dim=-1)  # [NB, BS, KVH, D]
            left = self.sliding_window[0] if self.sliding_window else -1
            out = fn(query[:n], key_cache, value_cache, attn_metadata.query_start_loc, attn_metadata.seq_lens,
                     attn_metadata.block_table, self.scale, left + 1 if left >= 0 else 0, attn_metadata.max_query_len,
                     attn_metadata.max_seq_len)
            output[:n].copy_(out.reshape(output[:n].shape))
            return output

    class AutotuneAttentionBackend(TritonAttentionBackend):
        @staticmethod
        def get_name() -> str:
            return "CUSTOM"

        @staticmethod
        def get_impl_cls():
            return AutotuneAttentionImpl

    _attention_classes.update(backend=AutotuneAttentionBackend, impl=AutotuneAttentionImpl)
    return AutotuneAttentionBackend


def __getattr__(name: str):
    """`autotune_vllm_kernels.AutotuneAttentionBackend`, the class path vLLM's registry resolves (built lazily: this
    module imports no vLLM until vLLM asks)."""
    if name == "AutotuneAttentionBackend":
        return _attention_backend()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _oot_names() -> set[str]:
    from vllm.model_executor.custom_op import op_registry_oot

    return set(op_registry_oot)
