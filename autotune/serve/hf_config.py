"""A Hugging Face config.json, as transformers 4 or 5 writes it, read into ModelConfig fields (and written back).

Six families load, each with its own architecture: Llama 3.x (`llama`), Qwen2/2.5 (`qwen2`: q/k/v
biases), Qwen3 (`qwen3`: RMSNorm on the q/k head views), Mistral (`mistral`: sliding-window
attention) and the mixtures of experts Qwen3-MoE (`qwen3_moe`) and Mixtral (`mixtral`), whose expert
settings `autotune.serve.moe.read_spec` reads (num_experts in transformers 4, num_local_experts in 5). RoPE:
transformers 5 nests rope_theta and the rope type with its factors under `rope_parameters`; transformers 4 has
top-level `rope_theta` and `rope_scaling`. The nested form wins, the top-level keys are the fallback. The rope
types implemented are those these families use (default, llama3, linear); any other, and any option the built-in
model does not implement, is a UserError that names it, never a silently different model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from autotune.errors import UserError
from autotune.serve import moe

REQUIRED_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                 "mistral": "MistralForCausalLM", **moe.ARCHITECTURES}
ROPE_KEYS = {"default": (), "linear": ("factor",),
             "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")}
DEFAULT_THETA = 10000.0  # transformers' default for all four families when config.json has no rope_theta


def load_json(file: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(file.read_text())
    except FileNotFoundError:
        raise UserError(f"model.checkpoint: {file} is missing (a checkpoint folder needs {what})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"model.checkpoint: {file} is not valid JSON ({e}); fix or replace the file") from None
    if not isinstance(data, dict):
        raise UserError(f"model.checkpoint: {file} holds a JSON {type(data).__name__}, not an object")
    return data


def read_config(folder: Path, model_cfg) -> dict[str, Any]:
    """ModelConfig fields from the folder's config.json, to override the preset `model_cfg` with."""
    file = folder / "config.json"
    hf = load_json(file, "a Hugging Face config.json")
    missing = [k for k in REQUIRED_KEYS if k not in hf]
    if missing:
        raise UserError(f"model.checkpoint: {file} lacks {', '.join(missing)} (is it a decoder LLM's config.json?)")
    family = _family(hf, file)
    _refuse_unimplemented(hf, family, file)
    heads = hf["num_attention_heads"]
    max_seq_len = min(int(model_cfg.max_seq_len), int(hf.get("max_position_embeddings", model_cfg.max_seq_len)))
    theta, scaling = _rope(hf, file)
    return {
        "name": file.parent.name,
        "family": family,
        "vocab_size": hf["vocab_size"],
        "hidden_size": hf["hidden_size"],
        "intermediate_size": hf["intermediate_size"],
        "num_layers": hf["num_hidden_layers"],
        "num_heads": heads,
        "num_kv_heads": hf.get("num_key_value_heads") or heads,
        "head_dim": hf.get("head_dim") or hf["hidden_size"] // heads,
        "rope_theta": theta,
        "rms_norm_eps": float(hf.get("rms_norm_eps", 1e-6)),
        "tie_embeddings": bool(hf.get("tie_word_embeddings", False)),
        "max_seq_len": max_seq_len,
        "rope_scaling": scaling,
        "attention_windows": _windows(hf, family, max_seq_len, file),
        "moe": moe.read_spec(hf, family, file),
    }


def _family(hf: dict, file: Path) -> str:
    model_type = hf.get("model_type")
    architectures = hf.get("architectures") or []
    if model_type is None and len(architectures) == 1:
        model_type = next((f for f, a in ARCHITECTURES.items() if a == architectures[0]), None)
    supported = ", ".join(f"{a} ({f})" for f, a in ARCHITECTURES.items())
    if model_type not in ARCHITECTURES or any(a != ARCHITECTURES[model_type] for a in architectures):
        raise UserError(f"model.checkpoint: {file} describes model_type '{model_type}', architectures "
                        f"{architectures}, which the built-in model does not serve (supported: {supported})")
    return model_type


def _refuse_unimplemented(hf: dict, family: str, file: Path) -> None:
    """Options of these families that would change the math and that the built-in model does not implement."""
    problems = []
    if hf.get("hidden_act", "silu") != "silu":
        problems.append(f"hidden_act '{hf['hidden_act']}' (only silu)")
    if family != "qwen2" and hf.get("attention_bias"):
        problems.append("attention_bias: true (the built-in model has q/k/v biases only as Qwen2 has them)")
    if hf.get("mlp_bias"):
        problems.append("mlp_bias: true")
    if hf.get("pretraining_tp", 1) != 1:
        problems.append(f"pretraining_tp {hf['pretraining_tp']}")
    if problems:
        raise UserError(f"model.checkpoint: {file} sets {'; '.join(problems)}, which the built-in {family} model does "
                        f"not implement; serve a checkpoint without it")


def _rope(hf: dict, file: Path) -> tuple[float, dict | None]:
    """(rope_theta, scaling or None): transformers 5's `rope_parameters` first, top-level keys as fallback."""
    nested = hf.get("rope_parameters")
    if nested is not None and not isinstance(nested, dict) or any(isinstance(v, dict) for v in (nested or {}).values()):
        raise UserError(f"model.checkpoint: {file} has rope_parameters per layer type ({nested}); the built-in model "
                        f"has one RoPE for all layers")
    params = dict(hf.get("rope_scaling") or {})
    params.update(nested or {})
    theta = float(params.get("rope_theta", hf.get("rope_theta", DEFAULT_THETA)))
    kind = params.get("rope_type", params.get("type")) or "default"
    if kind not in ROPE_KEYS:
        raise UserError(f"model.checkpoint: {file} uses rope type '{kind}', which the built-in model does not "
                        f"implement (supported: {', '.join(ROPE_KEYS)}); serve a checkpoint with one of those, or "
                        f"profile with the preset of the same shapes and random weights (model=<preset>)")
    partial = params.get("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0))
    if partial != 1.0:
        raise UserError(f"model.checkpoint: {file} sets partial_rotary_factor {partial}; "
                        f"the built-in model rotates the whole head")
    missing = [k for k in ROPE_KEYS[kind] if k not in params]
    if missing:
        raise UserError(f"model.checkpoint: {file} rope type '{kind}' needs {', '.join(missing)}")
    return theta, ({"rope_type": kind, **{k: float(params[k]) for k in ROPE_KEYS[kind]}} if ROPE_KEYS[kind] else None)


def _windows(hf: dict, family: str, max_seq_len: int, file: Path) -> tuple[int, ...] | None:
    """Per-layer sliding-window length (0: full attention), or None when no window can matter.

    Mistral and Mixtral slide every layer when `sliding_window` is set; Qwen3-MoE every layer with
    `use_sliding_window` (its attention reads config.sliding_window alone); Qwen2/3 only with
    `use_sliding_window`, on the layers `layer_types` marks (transformers 5) or else from layer
    `max_window_layers` on (transformers 4).
    A window at least as long as the longest sequence served (model.max_seq_len) never masks anything.
    """
    window = hf.get("sliding_window")
    if family == "llama" or (family not in ("mistral", "mixtral") and not hf.get("use_sliding_window")):
        window = None
    if window is None or int(window) >= max_seq_len:
        return None
    layers = hf["num_hidden_layers"]
    if family in ("mistral", "mixtral", "qwen3_moe"):
        types = ["sliding_attention"] * layers
    else:
        start = hf.get("max_window_layers", layers)
        types = (hf.get("layer_types")
                 or ["sliding_attention" if i >= start else "full_attention" for i in range(layers)])
    unknown = set(types) - {"sliding_attention", "full_attention"}
    if len(types) != layers or unknown:
        raise UserError(f"model.checkpoint: {file} layer_types {types} is not one of full_attention/sliding_attention "
                        f"per layer ({layers} layers)")
    windows = tuple(int(window) if t == "sliding_attention" else 0 for t in types)
    return windows if any(windows) else None


def hf_config(c) -> dict[str, Any]:
    """config.json of ModelConfig `c`, in the layout both transformers 4 and 5 read (top-level rope keys)."""
    config = {
        "architectures": [ARCHITECTURES[c.family]],
        "model_type": c.family,
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_layers,
        "num_attention_heads": c.num_heads,
        "num_key_value_heads": c.num_kv_heads,
        "head_dim": c.head_dim,
        "hidden_act": "silu",
        "rope_theta": c.rope_theta,
        "rms_norm_eps": c.rms_norm_eps,
        "tie_word_embeddings": c.tie_embeddings,
        "max_position_embeddings": c.max_seq_len,
        "torch_dtype": str(c.dtype).removeprefix("torch."),
    }
    if c.rope_scaling:
        config["rope_scaling"] = dict(c.rope_scaling)
    config.update(_window_keys(c))
    if c.moe is not None:
        config.update(moe.hf_keys(c))
    return config


def _window_keys(c) -> dict[str, Any]:
    if not c.attention_windows:
        return {"sliding_window": None, "use_sliding_window": False} if c.family != "llama" else {}
    window = max(c.attention_windows)
    if c.family in ("mistral", "mixtral"):
        return {"sliding_window": window}
    if c.family == "qwen3_moe":
        return {"sliding_window": window, "use_sliding_window": True}
    types = ["sliding_attention" if w else "full_attention" for w in c.attention_windows]
    return {"sliding_window": window, "use_sliding_window": True, "layer_types": types,
            "max_window_layers": types.index("sliding_attention")}
