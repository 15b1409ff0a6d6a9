"""Loading and saving the served model as a Hugging Face checkpoint folder: config.json + *.safetensors.

`model.checkpoint=PATH` names a local folder (nothing is ever downloaded). Its config.json (read by
`hf_config`: Llama, Qwen2, Qwen3, Mistral, Qwen3-MoE or Mixtral, transformers 4 or 5 layout) replaces the preset's
dimensions; the preset keeps its dtype, so `model.dtype` still decides the serving precision. Tensors keep their HF
names (model.layers.N.self_attn.q_proj.weight, ...); the model's merged projections (qkv_proj,
gate_up_proj, qkv_bias, and a MoE layer's w13 / w2 of every expert) are filled from, and saved to, row
ranges of them (the experts' [E, rows, width] tensors as [E * rows, width]: `moe.layout`). Sharded checkpoints are read
through model.safetensors.index.json. Every tensor is accounted for: one the config does not explain
(a stray q/k/v bias, say) is an error, as is one it needs and the files lack.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from autotune.errors import UserError
from autotune.serve import moe
from autotune.serve.hf_config import hf_config, load_json
from autotune.serve.hf_config import read_config as _read_config

INDEX = "model.safetensors.index.json"
# Tensors transformers itself skips on load: RoPE tables some exporters save, recomputed from the config.
IGNORED = re.compile(r"model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq")
MAX_NAMED = 6  # how many tensor names an error lists before "and N more"


def _folder(path) -> Path:
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise UserError(f"model.checkpoint: no folder at {folder} (give a local folder with config.json and "
                        f"*.safetensors)")
    return folder


def read_config(path, model_cfg) -> dict:
    """ModelConfig fields from the folder's config.json, to override the preset `model_cfg` with."""
    return _read_config(_folder(path), model_cfg)


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
        ]
        if c.moe is not None and c.moe.sparse(i):  # the router and every expert (autotune.serve.moe)
            rows += moe.layout(c, ours, hf)
        else:
            rows += [
                (ours + "gate_up_proj", hf + "mlp.gate_proj.weight", 0, c.intermediate_size),
                (ours + "gate_up_proj", hf + "mlp.up_proj.weight", c.intermediate_size, 2 * c.intermediate_size),
                (ours + "down_proj", hf + "mlp.down_proj.weight", 0, c.hidden_size),
            ]
        if c.qkv_bias:
            rows += [(ours + "qkv_bias", hf + "self_attn.q_proj.bias", 0, q),
                     (ours + "qkv_bias", hf + "self_attn.k_proj.bias", q, q + kv),
                     (ours + "qkv_bias", hf + "self_attn.v_proj.bias", q + kv, q + 2 * kv)]
        if c.qk_norm:
            rows += [(ours + "q_norm", hf + "self_attn.q_norm.weight", 0, c.head_dim),
                     (ours + "k_norm", hf + "self_attn.k_norm.weight", 0, c.head_dim)]
    return rows


def _names(names) -> str:
    names = sorted(names)
    more = f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else ""
    return ", ".join(names[:MAX_NAMED]) + more


def _keys(file: Path) -> list[str]:
    from safetensors import safe_open

    try:
        with safe_open(str(file), framework="pt") as f:
            return list(f.keys())
    except Exception as e:  # noqa: BLE001 (safetensors raises its own error types for truncated or foreign files)
        raise UserError(f"model.checkpoint: cannot read {file} ({e}); re-export or replace it") from None


def _shards(folder: Path) -> list[Path]:
    """The weight files: those model.safetensors.index.json names (each must exist), else every *.safetensors."""
    if not (folder / INDEX).exists():
        files = sorted(folder.glob("*.safetensors"))
        if not files:
            raise UserError(f"model.checkpoint: no *.safetensors files in {folder} (only safetensors weights load)")
        return files
    weight_map = load_json(folder / INDEX, "its weight_map").get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise UserError(f"model.checkpoint: {folder / INDEX} has no weight_map; fix or re-export the checkpoint")
    files = sorted({folder / name for name in weight_map.values()})
    absent = [f.name for f in files if not f.is_file()]
    if absent:
        raise UserError(f"model.checkpoint: shard {', '.join(absent)} named in {INDEX} is missing from {folder} "
                        f"(download it again)")
    return files


def _index(folder: Path) -> dict[str, Path]:
    """HF tensor name -> the .safetensors file that holds it."""
    where: dict[str, Path] = {}
    for file in _shards(folder):
        for name in _keys(file):
            if name in where:
                raise UserError(f"model.checkpoint: tensor {name} is in both {where[name].name} and {file.name}; "
                                f"keep one copy")
            where[name] = file
    return where


def _account(model, where: dict[str, Path], folder: Path) -> None:
    """Every tensor the config needs is there, and every tensor there is one the config explains."""
    c = model.config
    needed = {hf for _, hf, _, _ in layout(model)}
    missing = needed - set(where)
    if missing:
        raise UserError(f"model.checkpoint: tensor {_names(missing)} is missing from {folder} (the checkpoint does "
                        f"not match its config.json)")
    tied_head = {"lm_head.weight"} if c.tie_embeddings else set()  # checked against the embedding after loading
    spare = {n for n in set(where) - needed - tied_head if not IGNORED.fullmatch(n)}
    if spare:
        hint = (" (q/k/v biases: only a qwen2 model_type has them)" if any(n.endswith("_proj.bias") for n in spare)
                else "")
        raise UserError(f"model.checkpoint: {folder} holds tensor {_names(spare)} that the {c.family} architecture "
                        f"of its config.json does not use{hint}; fix config.json or use the matching checkpoint")


@torch.no_grad()
def load_weights(model, path) -> None:
    """Fill every parameter of `model` from the checkpoint folder; a UserError names any missing, spare or
    misfit tensor."""
    from safetensors import safe_open

    folder = _folder(path)
    where = _index(folder)
    _account(model, where, folder)
    params = dict(model.named_parameters())
    by_file: dict[Path, list] = {}
    for entry in layout(model):
        by_file.setdefault(where[entry[1]], []).append(entry)
    for file, entries in by_file.items():
        with safe_open(str(file), framework="pt") as f:
            for param_name, hf_name, row0, row1 in entries:
                target = moe.rows_view(params[param_name])[row0:row1]
                tensor = f.get_tensor(hf_name)
                if tuple(tensor.shape) != tuple(target.shape):
                    raise UserError(f"model.checkpoint: {hf_name} in {file.name} has shape {list(tensor.shape)}, "
                                    f"config.json implies {list(target.shape)}")
                target.copy_(tensor)
    if model.config.tie_embeddings and "lm_head.weight" in where:
        _check_tied(model, where["lm_head.weight"])


def _check_tied(model, file: Path) -> None:
    """tie_word_embeddings with an lm_head.weight saved too: transformers uses the embedding; so do we, if the
    two agree."""
    from safetensors import safe_open

    with safe_open(str(file), framework="pt") as f:
        head = f.get_tensor("lm_head.weight")
    if head.shape != model.embed.shape or not torch.equal(head.to(model.embed.dtype), model.embed):
        raise UserError(f"model.checkpoint: config.json sets tie_word_embeddings but lm_head.weight in {file.name} "
                        f"differs from model.embed_tokens.weight; set tie_word_embeddings to false to use it")


def save_checkpoint(model, path) -> Path:
    """Write `model` as config.json + model.safetensors in the HF layout of its family; returns the folder."""
    from safetensors.torch import save_file

    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    params = dict(model.named_parameters())
    tensors = {hf: moe.rows_view(params[ours])[row0:row1].detach().contiguous().cpu()
               for ours, hf, row0, row1 in layout(model)}
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(hf_config(model.config), indent=2) + "\n")
    return folder
