"""Mixture-of-experts layers of the built-in model: Qwen3-MoE (`qwen3_moe`) and Mixtral (`mixtral`).

A sparse layer replaces the dense SwiGLU MLP: a router (a linear [experts, hidden], through
`dispatch.linear`) scores every token, softmax in fp32, the top-k experts per token are kept (their
probabilities renormalised to sum to 1 when `norm_topk_prob`: always in Mixtral, a config.json switch in
Qwen3-MoE), and the routed experts run as one op, `dispatch.fused_moe(h, w13, w2, topk_weights,
topk_ids)`, with the weights in vLLM's layout: w13 [experts, 2 * I, hidden] (gate rows, then up rows) and
w2 [experts, hidden, I]. topk_ids are int32 and topk_weights fp32, as vLLM's router gives them.

Which layers are sparse is Qwen3-MoE's rule (transformers' Qwen3MoeDecoderLayer): layer i is unless it is
in `mlp_only_layers` or (i + 1) is not a multiple of `decoder_sparse_step`; the others keep the dense MLP
of `model.intermediate_size`. Mixtral's layers are all sparse. Nothing else of the layer changes: Qwen3-MoE
has Qwen3's q/k norm, Mixtral is Mistral's attention with its optional sliding window.

Both match transformers' Qwen3MoeForCausalLM and MixtralForCausalLM on tiny random checkpoints
(tests/serve/test_peer_moe.py). Weight-only or W8A8 quantization of the experts is not implemented.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from autotune.errors import UserError
from autotune.serve import dispatch

FAMILIES = ("qwen3_moe", "mixtral")
ARCHITECTURES = {"qwen3_moe": "Qwen3MoeForCausalLM", "mixtral": "MixtralForCausalLM"}
# the HF names of a sparse layer's tensors under model.layers.N.: (router, expert prefix, gate, up, down)
HF_NAMES = {"qwen3_moe": ("mlp.gate.weight", "mlp.experts", "gate_proj", "up_proj", "down_proj"),
            "mixtral": ("block_sparse_moe.gate.weight", "block_sparse_moe.experts", "w1", "w3", "w2")}


@dataclasses.dataclass(frozen=True)
class MoeSpec:
    """The sparse layers of a model: `model.moe` in a preset, or read from a checkpoint's config.json."""

    num_experts: int
    top_k: int
    intermediate_size: int  # each expert's (Qwen3-MoE's moe_intermediate_size)
    norm_topk_prob: bool = True
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "mlp_only_layers", tuple(int(i) for i in self.mlp_only_layers))
        for name in ("num_experts", "top_k", "intermediate_size", "decoder_sparse_step"):
            if int(getattr(self, name)) < 1:
                raise UserError(f"model.moe.{name} is {getattr(self, name)} (set it to a positive integer)")
        if self.top_k > self.num_experts:
            raise UserError(f"model.moe.top_k={self.top_k} exceeds model.moe.num_experts={self.num_experts}")

    @classmethod
    def from_cfg(cls, node: Mapping[str, Any]) -> MoeSpec:
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(node) - fields)
        if unknown:
            raise UserError(f"model.moe has unknown keys {unknown} (known: {', '.join(sorted(fields))})")
        values: dict[str, Any] = {k: (tuple(v) if k == "mlp_only_layers" else v) for k, v in dict(node).items()}
        return cls(**values)

    def sparse(self, layer: int) -> bool:
        return layer not in self.mlp_only_layers and (layer + 1) % self.decoder_sparse_step == 0


def check(config) -> None:
    """A ModelConfig's MoE settings agree with its family; refuse what the built-in model does not serve."""
    spec = config.moe
    if (config.family in FAMILIES) != (spec is not None):
        raise UserError(f"model.family '{config.family}' " + ("needs model.moe (experts, top_k, intermediate_size)"
                        if spec is None else "is dense: set model.moe=null or a MoE family (qwen3_moe, mixtral)"))
    if spec is None:
        return
    if config.family == "mixtral" and not spec.norm_topk_prob:
        raise UserError("model.moe.norm_topk_prob=false: Mixtral always renormalises its top-k weights")
    if config.family == "mixtral" and spec.intermediate_size != config.intermediate_size:
        raise UserError(f"model.moe.intermediate_size={spec.intermediate_size} differs from model.intermediate_size="
                        f"{config.intermediate_size}: Mixtral's experts are its MLP (config.json has one width)")
    if config.quant != "none":
        raise UserError(f"model.quant={config.quant} with a MoE model: quantized experts are not implemented "
                        "(serve it with model.quant=none)")


class SparseMoe(torch.nn.Module):
    """Router, top-k and the routed experts of one layer: h [T, hidden] -> [T, hidden]."""

    def __init__(self, c, spec: MoeSpec, device):
        super().__init__()
        kw = dict(device=device, dtype=c.dtype)
        self.spec = spec
        e, i, h = spec.num_experts, spec.intermediate_size, c.hidden_size
        self.router = torch.nn.Parameter(torch.empty(e, h, **kw), requires_grad=False)
        self.w13 = torch.nn.Parameter(torch.empty(e, 2 * i, h, **kw), requires_grad=False)
        self.w2 = torch.nn.Parameter(torch.empty(e, h, i, **kw), requires_grad=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        weights, ids = route(dispatch.linear(h, self.router), self.spec.top_k, self.spec.norm_topk_prob)
        return dispatch.fused_moe(h, self.w13, self.w2, weights, ids)


def route(logits: torch.Tensor, top_k: int, renormalise: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Router logits [T, experts] -> (top-k weights [T, k] fp32, expert ids [T, k] int32), as transformers'
    Qwen3MoeTopKRouter and MixtralTopKRouter compute them (softmax in fp32, then top-k, then renormalise)."""
    probs = torch.softmax(logits.float(), dim=-1)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    if renormalise:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids.to(torch.int32)


def sparse_block(c, layer: int, device) -> SparseMoe | None:
    """Layer `layer`'s MoE block, or None where the layer keeps the dense MLP."""
    if c.moe is None or not c.moe.sparse(layer):
        return None
    return SparseMoe(c, c.moe, device)


# --- checkpoints (config.json and tensor names) --------------------------------------------------------------

def read_spec(hf: Mapping[str, Any], family: str, file: Path) -> MoeSpec | None:
    """The MoE settings of a config.json in the transformers 4 layout (Qwen3-MoE: num_experts) or 5 (both
    families: num_local_experts); None for a dense family or a Qwen3-MoE with no experts."""
    if family not in FAMILIES:
        return None
    experts = hf.get("num_local_experts", hf.get("num_experts"))
    if not experts:
        raise UserError(f"model.checkpoint: {file} sets no num_experts / num_local_experts for {family} "
                        f"(a dense model_type serves a dense checkpoint)")
    if family == "mixtral":
        return MoeSpec(int(experts), int(hf.get("num_experts_per_tok", 2)), int(hf["intermediate_size"]))
    if "moe_intermediate_size" not in hf:
        raise UserError(f"model.checkpoint: {file} lacks moe_intermediate_size (each expert's width)")
    return MoeSpec(int(experts), int(hf.get("num_experts_per_tok", 8)), int(hf["moe_intermediate_size"]),
                   bool(hf.get("norm_topk_prob", False)), int(hf.get("decoder_sparse_step", 1)),
                   tuple(hf.get("mlp_only_layers") or ()))


def hf_keys(c) -> dict[str, Any]:
    """The config.json keys of `c`'s MoE settings, in the layout transformers 4 and 5 both read."""
    spec = c.moe
    if c.family == "mixtral":
        return {"num_local_experts": spec.num_experts, "num_experts_per_tok": spec.top_k}
    return {"num_experts": spec.num_experts, "num_experts_per_tok": spec.top_k,
            "moe_intermediate_size": spec.intermediate_size, "norm_topk_prob": spec.norm_topk_prob,
            "decoder_sparse_step": spec.decoder_sparse_step, "mlp_only_layers": list(spec.mlp_only_layers)}


def layout(c, ours: str, hf: str) -> list[tuple[str, str, int, int]]:
    """checkpoint.layout's rows of one sparse layer: (our parameter, HF tensor, first row, end row), the rows
    counted in the parameter's [experts * rows, width] view (w13: expert e's gate at e * 2I, its up at
    e * 2I + I; w2: expert e's down at e * hidden)."""
    router, experts, gate, up, down = HF_NAMES[c.family]
    e_count, i, h = c.moe.num_experts, c.moe.intermediate_size, c.hidden_size
    rows = [(ours + "moe.router", hf + router, 0, e_count)]
    for e in range(e_count):
        rows += [(ours + "moe.w13", f"{hf}{experts}.{e}.{gate}.weight", 2 * e * i, 2 * e * i + i),
                 (ours + "moe.w13", f"{hf}{experts}.{e}.{up}.weight", 2 * e * i + i, 2 * (e + 1) * i),
                 (ours + "moe.w2", f"{hf}{experts}.{e}.{down}.weight", e * h, (e + 1) * h)]
    return rows


def rows_view(p: torch.Tensor) -> torch.Tensor:
    """A parameter as [rows, width]: the experts' [E, rows, width] flattened, 1-D and 2-D ones unchanged."""
    return p.flatten(0, 1) if p.dim() == 3 else p
