"""Checkpoints in the Hugging Face Llama layout: round trip, dims from config.json, and bad folders."""

import json
import math

import pytest
import torch
from safetensors.torch import load_file, save_file

from autotune.config import compose
from autotune.errors import UserError
from autotune.serve import build_model, check_prompts, greedy_generate
from autotune.serve.checkpoint import save_checkpoint
from autotune.serve.model import ModelConfig, inverse_frequencies


@pytest.fixture(scope="module")
def saved(tmp_path_factory, tiny):
    return save_checkpoint(tiny, tmp_path_factory.mktemp("ckpt") / "tiny-llama")


def load(path, *overrides):
    # Another preset on purpose: config.json must replace its dimensions.
    return build_model(compose(["model=llama3_8b", "model.dtype=float32", f"model.checkpoint={path}", *overrides]).model,
                       "cpu")


@pytest.mark.parametrize("tied", [False, True])
def test_round_trip_gives_the_same_model(tmp_path, tied):
    model = build_model(compose([f"model.tie_embeddings={tied}", "model.init_seed=5"]).model, "cpu")
    folder = save_checkpoint(model, tmp_path / "m")
    names = set(load_file(folder / "model.safetensors"))
    assert "model.layers.1.self_attn.k_proj.weight" in names and "model.layers.0.mlp.up_proj.weight" in names
    assert ("lm_head.weight" in names) != tied
    loaded = load(folder)
    assert loaded.config == dataclass_with(model.config, name="m", init_seed=0)
    for (name, a), (_, b) in zip(model.named_parameters(), loaded.named_parameters()):
        assert torch.equal(a, b), name
    prompts = check_prompts(model.config.vocab_size, 2, 6, 0)
    assert torch.equal(greedy_generate(model, prompts, 4)[1], greedy_generate(loaded, prompts, 4)[1])


def dataclass_with(config, **changes):
    import dataclasses

    return dataclasses.replace(config, **changes)


def test_hf_config_fields_are_read(saved, tmp_path):
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes((saved / "model.safetensors").read_bytes())
    hf = json.loads((saved / "config.json").read_text())
    del hf["head_dim"]  # optional: hidden_size / num_attention_heads
    hf.update(max_position_embeddings=131072, torch_dtype="bfloat16",
              rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192})
    (folder / "config.json").write_text(json.dumps(hf))
    config = load(folder, "model.max_seq_len=300").config
    assert config.head_dim == 32 and config.max_seq_len == 300 and config.dtype == torch.float32
    assert config.rope_scaling["factor"] == 8.0


def test_llama3_rope_scaling_stretches_only_long_wavelengths():
    base = ModelConfig.from_cfg(compose(["model=llama3_8b"]).model)
    scaled = dataclass_with(base, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                "original_max_position_embeddings": 8192.0})
    plain, stretched = inverse_frequencies(base), inverse_frequencies(scaled)
    wavelength = 2 * math.pi / plain
    short, long = wavelength < 8192 / 4, wavelength > 8192
    assert torch.equal(stretched[short], plain[short])
    torch.testing.assert_close(stretched[long], plain[long] / 8)
    middle = ~short & ~long
    assert middle.any() and ((stretched[middle] < plain[middle]) & (stretched[middle] > plain[middle] / 8)).all()


def copy_checkpoint(saved, folder, edit_config=None, edit_tensors=None):
    folder.mkdir()
    hf = json.loads((saved / "config.json").read_text())
    tensors = load_file(saved / "model.safetensors")
    (edit_config or (lambda c: None))(hf)
    (edit_tensors or (lambda t: None))(tensors)
    (folder / "config.json").write_text(json.dumps(hf))
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


def test_bad_checkpoints_are_user_errors(saved, tmp_path):
    with pytest.raises(UserError, match="no folder at"):
        load(tmp_path / "missing")
    missing = copy_checkpoint(saved, tmp_path / "a", edit_tensors=lambda t: t.pop("model.layers.1.mlp.down_proj.weight"))
    with pytest.raises(UserError, match=r"tensor model\.layers\.1\.mlp\.down_proj\.weight is missing"):
        load(missing)
    wider = copy_checkpoint(saved, tmp_path / "b", edit_config=lambda c: c.update(intermediate_size=400))
    with pytest.raises(UserError, match=r"gate_proj\.weight in model\.safetensors has shape \[352, 128\]"):
        load(wider)
    other = copy_checkpoint(saved, tmp_path / "c", edit_config=lambda c: c.update(model_type="gpt2", architectures=None))
    with pytest.raises(UserError, match="model_type 'gpt2'.*does not serve .*Qwen2ForCausalLM"):
        load(other)
    yarn = copy_checkpoint(saved, tmp_path / "d", edit_config=lambda c: c.update(rope_scaling={"rope_type": "yarn"}))
    with pytest.raises(UserError, match="rope type 'yarn'.*supported: default, linear, llama3"):
        load(yarn)
    broken = copy_checkpoint(saved, tmp_path / "e")
    (broken / "config.json").write_text("{")
    with pytest.raises(UserError, match="config.json is not valid JSON"):
        load(broken)
    (broken / "config.json").unlink()
    with pytest.raises(UserError, match="config.json is missing"):
        load(broken)
    truncated = copy_checkpoint(saved, tmp_path / "f")
    (truncated / "model.safetensors").write_bytes(b"\x10\x00\x00")
    with pytest.raises(UserError, match="cannot read .*model.safetensors"):
        load(truncated)
