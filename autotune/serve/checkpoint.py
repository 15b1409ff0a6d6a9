"""Loading and saving the served model in the Hugging Face Llama layout: config.json + *.safetensors.

`model.checkpoint=PATH` names a local folder (nothing is ever downloaded). Its config.json (LlamaConfig
keys) replaces the preset's dimensions; the preset keeps its dtype, so `model.dtype` still decides the
serving precision. Tensors keep their HF names (model.layers.N.self_attn.q_proj.weight, ...); the
model's merged projections (qkv_proj, gate_up_proj) are filled from, and saved to, row ranges of them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from autotune.errors import UserError

REQUIRED_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
SUPPORTED_ROPE = {None, "default", "llama3"}


def _folder(path) -> Path:
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise UserError(f"model.checkpoint: no folder at {folder} (give a local folder with config.json and "
                        f"*.safetensors)")
    return folder


def read_config(path, model_cfg) -> dict[str, Any]:
    """ModelConfig fields from the folder's config.json, to override the preset `model_cfg` with."""
    file = _folder(path) / "config.json"
    try:
        hf = json.loads(file.read_text())
    except FileNotFoundError:
        raise UserError(f"model.checkpoint: {file} is missing (a checkpoint folder needs a HF-style config.json)"
                        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"model.checkpoint: {file} is not valid JSON ({e}); fix or replace the file") from None
    missing = [k for k in REQUIRED_KEYS if k not in hf]
    if missing:
        raise UserError(f"model.checkpoint: {file} lacks {', '.join(missing)} (is it a Llama config.json?)")
    if hf.get("model_type", "llama") != "llama" or hf.get("attention_bias") or hf.get("mlp_bias"):
        biased = bool(hf.get("attention_bias") or hf.get("mlp_bias"))
        raise UserError(f"model.checkpoint: {file} describes a '{hf.get('model_type')}' model (biases: {biased}); "
                        f"only bias-free Llama checkpoints load")
    heads = hf["num_attention_heads"]
    return {
        "name": file.parent.name,
        "vocab_size": hf["vocab_size"],
        "hidden_size": hf["hidden_size"],
        "intermediate_size": hf["intermediate_size"],
        "num_layers": hf["num_hidden_layers"],
        "num_heads": heads,
        "num_kv_heads": hf.get("num_key_value_heads") or heads,
        "head_dim": hf.get("head_dim") or hf["hidden_size"] // heads,
        "rope_theta": float(hf.get("rope_theta", 10000.0)),
        "rms_norm_eps": float(hf.get("rms_norm_eps", 1e-6)),
        "tie_embeddings": bool(hf.get("tie_word_embeddings", False)),
        "max_seq_len": min(int(model_cfg.max_seq_len), int(hf.get("max_position_embeddings", model_cfg.max_seq_len))),
        "rope_scaling": _rope_scaling(hf.get("rope_scaling"), file),
    }


def _rope_scaling(scaling: dict | None, file: Path) -> dict | None:
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type"))
    if kind not in SUPPORTED_ROPE:
        raise UserError(f"model.checkpoint: {file} uses rope_scaling '{kind}', which the built-in model does not "
                        f"implement (supported: llama3, or none)")
    if kind != "llama3":
        return None
    keys = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
    if any(k not in scaling for k in keys):
        raise UserError(f"model.checkpoint: {file} rope_scaling needs {', '.join(keys)}")
    return {k: float(scaling[k]) for k in keys}


def layout(model) -> list[tuple[str, str, int, int]]:
    """(model parameter, HF tensor name, first row, end row) for every tensor of the checkpoint."""
    c = model.config
    q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    rows = [("embed", "model.embed_tokens.weight", 0, c.vocab_size), ("norm", "model.norm.weight", 0, c.hidden_size)]
    if not c.tie_embeddings:
        rows.append(("lm_head_weight", "lm_head.weight", 0, c.vocab_size))
    for i in range(c.num_layers):
        ours, hf = f"layers.{i}.", f"model.layers.{i}."
        rows += [
            (ours + "input_norm", hf + "input_layernorm.weight", 0, c.hidden_size),
            (ours + "qkv_proj", hf + "self_attn.q_proj.weight", 0, q),
            (ours + "qkv_proj", hf + "self_attn.k_proj.weight", q, q + kv),
            (ours + "qkv_proj", hf + "self_attn.v_proj.weight", q + kv, q + 2 * kv),
            (ours + "o_proj", hf + "self_attn.o_proj.weight", 0, c.hidden_size),
            (ours + "post_norm", hf + "post_attention_layernorm.weight", 0, c.hidden_size),
            (ours + "gate_up_proj", hf + "mlp.gate_proj.weight", 0, c.intermediate_size),
            (ours + "gate_up_proj", hf + "mlp.up_proj.weight", c.intermediate_size, 2 * c.intermediate_size),
            (ours + "down_proj", hf + "mlp.down_proj.weight", 0, c.hidden_size),
        ]
    return rows


def _index(folder: Path) -> dict[str, Path]:
    """HF tensor name -> the .safetensors file that holds it."""
    from safetensors import safe_open

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise UserError(f"model.checkpoint: no *.safetensors files in {folder} (only safetensors weights load)")
    where = {}
    for file in files:
        try:
            with safe_open(str(file), framework="pt") as f:
                where.update({name: file for name in f.keys()})
        except Exception as e:  # safetensors raises its own error types for truncated or foreign files
            raise UserError(f"model.checkpoint: cannot read {file} ({e}); re-export or replace it") from None
    return where


@torch.no_grad()
def load_weights(model, path) -> None:
    """Fill every parameter of `model` from the checkpoint folder; a UserError names any missing or misfit tensor."""
    from safetensors import safe_open

    folder = _folder(path)
    where = _index(folder)
    params = dict(model.named_parameters())
    by_file: dict[Path, list] = {}
    for entry in layout(model):
        if entry[1] not in where:
            raise UserError(f"model.checkpoint: tensor {entry[1]} is missing from {folder}/*.safetensors "
                            f"(the checkpoint does not match its config.json)")
        by_file.setdefault(where[entry[1]], []).append(entry)
    for file, entries in by_file.items():
        with safe_open(str(file), framework="pt") as f:
            for param_name, hf_name, row0, row1 in entries:
                target = params[param_name][row0:row1]
                tensor = f.get_tensor(hf_name)
                if tuple(tensor.shape) != tuple(target.shape):
                    raise UserError(f"model.checkpoint: {hf_name} in {file.name} has shape {list(tensor.shape)}, "
                                    f"config.json implies {list(target.shape)}")
                target.copy_(tensor)


def save_checkpoint(model, path) -> Path:
    """Write `model` as config.json + model.safetensors in the HF Llama layout; returns the folder."""
    from safetensors.torch import save_file

    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    params = dict(model.named_parameters())
    tensors = {hf: params[ours][row0:row1].detach().contiguous().cpu() for ours, hf, row0, row1 in layout(model)}
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(hf_config(model.config), indent=2) + "\n")
    return folder


def hf_config(c) -> dict[str, Any]:
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_layers,
        "num_attention_heads": c.num_heads,
        "num_key_value_heads": c.num_kv_heads,
        "head_dim": c.head_dim,
        "rope_theta": c.rope_theta,
        "rms_norm_eps": c.rms_norm_eps,
        "tie_word_embeddings": c.tie_embeddings,
        "max_position_embeddings": c.max_seq_len,
        "torch_dtype": str(c.dtype).removeprefix("torch."),
    }
    if c.rope_scaling:
        config["rope_scaling"] = {"rope_type": "llama3", **c.rope_scaling}
    return config
