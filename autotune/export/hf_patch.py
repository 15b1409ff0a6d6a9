"""`apply_autotune_kernels(model)`: a transformers model's modules run the kernels merged by autotune.

This file is copied as the `autotune_hf_kernels` package's `__init__.py` by `autotune export hf`; it imports
nothing from autotune. As Liger-Kernel does for Llama, it patches in place:

- every `*RMSNorm` module with `weight` and `variance_epsilon` (LlamaRMSNorm, MistralRMSNorm, Qwen2RMSNorm,
  Qwen3RMSNorm ...): `forward` -> the rms_norm kernel;
- every MLP with `gate_proj`, `up_proj`, `down_proj` and a SiLU `act_fn`: `forward` ->
  down_proj(silu_and_mul(cat(gate_proj(x), up_proj(x)))), the kernel's [..., 2I] layout;
- the model's modelling module's `apply_rotary_pos_emb(q, k, cos, sin)` (a module-level function, so every
  model of that family in the process uses it from then on): q [B, H, S, D] -> the kernel's query [B*S, H, D],
  cos, sin [B, S, D] (the angles' cos and sin, repeated over both halves) -> a cos_sin_cache of one row per token
  [B*S, D] at positions 0 .. B*S - 1, NeoX style (transformers' rotate_half);
- every MoE experts module in transformers 5's layout (Qwen3MoeExperts, MixtralExperts ...: gate_up_proj
  [E, 2I, H], down_proj [E, H, I], SiLU, no bias), `forward(hidden_states, top_k_index, top_k_weights)` -> the
  fused_moe kernel, which takes exactly vLLM's layout (the router stays transformers').

`kernels_repository(path)` writes the same kernels as a local repository of the Hugging Face `kernels` library
(`build/torch-universal/<package>/layers.py`, metadata.json), whose layers `kernelize` puts in place of the
forward of transformers' hub-decorated layers (`@use_kernel_forward_from_hub("RMSNorm")`): see
`autotune_kernel_mapping()`.

Calls outside a kernel's layout (weights in another dtype, partial rotary) run the original code. The
kernels are Triton: a CUDA GPU, or the Triton interpreter (TRITON_INTERPRET=1 before triton is imported).
"""

import importlib
import json
import sys
import types
from pathlib import Path

import torch

from .devices import answer_device_queries  # copied beside this file (bundle.py)

MANIFEST = json.loads((Path(__file__).parent / "manifest.json").read_text())


def bundled_kernels() -> dict:
    """The entry function of every kernel in this package, by target."""
    answer_device_queries(MANIFEST)
    return {t: getattr(importlib.import_module(f"{__name__}.kernels.{t}"), t) for t in MANIFEST["kernels"]}


def apply_autotune_kernels(model: torch.nn.Module, kernels: dict | None = None) -> dict[str, int]:
    """Patch the model (and its modelling module's rotary function); returns the patch count per target."""
    kernels = bundled_kernels() if kernels is None else kernels
    counts = {}
    if "rms_norm" in kernels:
        counts["rms_norm"] = _patch_modules(model, _is_rms_norm, _rms_norm_forward(kernels["rms_norm"]))
    if "silu_and_mul" in kernels:
        counts["silu_and_mul"] = _patch_modules(model, _is_silu_mlp, _mlp_forward(kernels["silu_and_mul"]))
    if "rotary_embedding" in kernels:
        counts["rotary_embedding"] = _patch_rotary(model, kernels["rotary_embedding"])
    if "fused_moe" in kernels:
        counts["fused_moe"] = _patch_modules(model, _is_experts, _experts_forward(kernels["fused_moe"]))
    return counts


def _patch_modules(model, wanted, make_forward) -> int:
    count = 0
    for module in model.modules():
        if wanted(module) and not getattr(module, "_autotune_patched", False):
            module._autotune_original_forward = module.forward
            module.forward = types.MethodType(make_forward, module)
            module._autotune_patched = True
            count += 1
    return count


def _is_rms_norm(m) -> bool:
    return type(m).__name__.endswith("RMSNorm") and hasattr(m, "weight") and hasattr(m, "variance_epsilon")


def _is_silu_mlp(m) -> bool:
    act = getattr(m, "act_fn", None)
    silu = isinstance(act, torch.nn.SiLU) or type(act).__name__ == "SiLUActivation"
    return silu and all(hasattr(m, n) for n in ("gate_proj", "up_proj", "down_proj"))


def _is_experts(m) -> bool:
    gate_up, down = getattr(m, "gate_up_proj", None), getattr(m, "down_proj", None)
    act = getattr(m, "act_fn", None)
    silu = isinstance(act, torch.nn.SiLU) or type(act).__name__ == "SiLUActivation"
    return (isinstance(gate_up, torch.Tensor) and isinstance(down, torch.Tensor) and gate_up.dim() == down.dim() == 3
            and gate_up.shape[1] == 2 * down.shape[2] and silu and not getattr(m, "has_bias", False)
            and not getattr(m, "is_transposed", False) and getattr(m, "is_concatenated", True))


def _experts_forward(kernel):
    def forward(self, hidden_states, top_k_index, top_k_weights):
        if hidden_states.dtype != self.gate_up_proj.dtype:
            return self._autotune_original_forward(hidden_states, top_k_index, top_k_weights)
        return kernel(hidden_states.contiguous(), self.gate_up_proj, self.down_proj, top_k_weights.float().contiguous(),
                      top_k_index.to(torch.int32).contiguous())
    return forward


def _rms_norm_forward(kernel):
    def forward(self, hidden_states):
        if hidden_states.dtype != self.weight.dtype:
            return self._autotune_original_forward(hidden_states)  # the result dtype would differ
        return kernel(hidden_states.contiguous(), self.weight, self.variance_epsilon)
    return forward


def _mlp_forward(kernel):
    def forward(self, x):
        gate_up = torch.cat((self.gate_proj(x), self.up_proj(x)), dim=-1)  # [..., 2I]: the kernel's layout
        return self.down_proj(kernel(gate_up))
    return forward


def _patch_rotary(model, kernel) -> int:
    module = sys.modules.get(type(model).__module__)
    original = getattr(module, "apply_rotary_pos_emb", None)
    if module is None or original is None:
        return 0
    if getattr(original, "_autotune_patched", False):
        return 1

    def apply_rotary_pos_emb(q, k, cos, sin, *args, **kwargs):
        if args or kwargs or q.dim() != 4 or cos.shape[-1] != q.shape[-1]:
            return original(q, k, cos, sin, *args, **kwargs)  # another layout (unsqueeze_dim, partial rotary)
        return _rotate(kernel, q, k, cos, sin)

    # attributes set through vars(): a function's and a module's are not declared for the type checker
    vars(apply_rotary_pos_emb).update(_autotune_patched=True, _autotune_original=original)
    vars(module)["apply_rotary_pos_emb"] = apply_rotary_pos_emb
    return 1


def _rotate(kernel, q, k, cos, sin):
    """q [B, H, S, D] and k [B, Hk, S, D] with cos, sin [B, S, D] through the kernel's (positions, query [B*S, H, D],
    key [B*S, Hk, D], cos_sin_cache [B*S, D], NeoX style): token i at position i of a cache of its own rows."""
    batch, _, seq, dim = q.shape

    def tokens(x):  # [B, H, S, D] -> [B*S, H, D]
        return x.transpose(1, 2).reshape(batch * seq, x.shape[1], dim)

    def half(t):  # the angles' cos (sin) once: HF repeats them over both halves of the head dim
        return t.expand(batch, seq, dim)[..., : dim // 2].reshape(batch * seq, dim // 2)
    cache = torch.cat((half(cos), half(sin)), dim=-1).to(q.dtype)
    positions = torch.arange(batch * seq, device=q.device)
    q_out, k_out = kernel(positions, tokens(q), tokens(k), cache, True)
    return (q_out.reshape(batch, seq, -1, dim).transpose(1, 2), k_out.reshape(batch, seq, -1, dim).transpose(1, 2))


def remove_autotune_kernels(model: torch.nn.Module) -> None:
    """Undo apply_autotune_kernels on this model and its modelling module."""
    for m in model.modules():
        if getattr(m, "_autotune_patched", False):
            m.forward = vars(m)["_autotune_original_forward"]  # a bound method: not one of m's Tensor | Module
            del m._autotune_patched, m._autotune_original_forward
    module = sys.modules.get(type(model).__module__)
    patched = getattr(module, "apply_rotary_pos_emb", None)
    if module is not None and getattr(patched, "_autotune_patched", False):
        vars(module)["apply_rotary_pos_emb"] = vars(patched)["_autotune_original"]


# --- the Hugging Face `kernels` library's route ----------------------------------------------------------------

LAYER_NAMES = {"rms_norm": "RMSNorm"}  # the names transformers' hub-decorated layers ask `kernelize` for
LAYERS_PY = '''"""Layers for the Hugging Face `kernels` library: each forward runs a kernel merged by autotune."""

import torch
{layers}
'''
RMS_NORM_LAYER = '''
class RMSNorm(torch.nn.Module):
    """transformers' *RMSNorm (weight, variance_epsilon) through the rms_norm kernel."""

    def forward(self, hidden_states):
        from ._kernels_rms_norm import rms_norm
        return rms_norm(hidden_states.contiguous(), self.weight, self.variance_epsilon)
'''


def kernels_repository(path) -> "Path":
    """Write this package's kernels as a local `kernels` repository at `path` (a variant per backend: cuda, and
    cpu for the Triton interpreter); returns the path, for `kernels.LocalLayerRepository(repo_path=...)`."""
    import shutil

    root = Path(path)
    layers = [RMS_NORM_LAYER] if "rms_norm" in MANIFEST["kernels"] else []
    for variant, backend in (("torch-universal", "cuda"), ("torch-cpu", "cpu")):
        folder = root / "build" / variant
        package = folder / "autotune_kernels"
        package.mkdir(parents=True, exist_ok=True)
        (folder / "metadata.json").write_text(json.dumps(
            {"id": "autotune-kernels", "name": "autotune-kernels", "version": 1, "license": "Apache-2.0",
             "python-depends": [], "backend": {"type": backend}}))
        (package / "__init__.py").write_text("from . import layers  # noqa: F401\n")
        (package / "layers.py").write_text(LAYERS_PY.format(layers="\n".join(layers)))
        for target in MANIFEST["kernels"]:
            shutil.copyfile(Path(__file__).parent / "kernels" / f"{target}.py", package / f"_kernels_{target}.py")
    return root


def autotune_kernel_mapping(path, device: str = "cuda") -> dict:
    """The `kernels.register_kernel_mapping` argument that maps transformers' hub layer names to this package's
    layers in the repository written at `path` by `kernels_repository`."""
    from kernels import LocalLayerRepository

    repo = LocalLayerRepository(repo_path=Path(path), layer_name="RMSNorm")
    return {name: {device: repo} for target, name in LAYER_NAMES.items() if target in MANIFEST["kernels"]}


__all__ = ["apply_autotune_kernels", "autotune_kernel_mapping", "bundled_kernels", "kernels_repository",
           "remove_autotune_kernels"]
