"""Checkpoints in the Hugging Face Llama layout: round trip, dims from config.json, and bad folders."""

import json
import math

import pytest
import torch
from safetensors.torch import load_file, save_file

from autotune.config import compose
from autotune.errors import UserError
from autotune.serve import build_model, check_prompts, greedy_generate
from autotune.serve.checkpoint import read_config, save_checkpoint
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


def shard(saved, folder, drop_file=False):
    """The checkpoint split into two shards with a model.safetensors.index.json, as save_pretrained writes it."""
    folder.mkdir()
    (folder / "config.json").write_text((saved / "config.json").read_text())
    tensors = load_file(saved / "model.safetensors")
    names = sorted(tensors)
    parts = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file, part in parts.items():
        save_file({n: tensors[n] for n in part}, str(folder / file))
    weight_map = {n: file for file, part in parts.items() for n in part}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder


def test_sharded_checkpoints_load_through_their_index(saved, tmp_path, tiny):
    loaded = load(shard(saved, tmp_path / "sharded"))
    for (name, a), (_, b) in zip(tiny.named_parameters(), loaded.named_parameters()):
        assert torch.equal(a, b), name
    (tmp_path / "sharded" / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(UserError, match="shard model-00002-of-00002.safetensors named in model.safetensors.index.json "
                                        "is missing"):
        load(tmp_path / "sharded")


def test_every_tensor_is_accounted_for(saved, tmp_path):
    def add(name):
        return lambda t: t.update({name: torch.zeros(t["model.layers.0.self_attn.q_proj.weight"].shape[0])})

    stray = copy_checkpoint(saved, tmp_path / "a", edit_tensors=add("model.layers.0.self_attn.q_proj.bias"))
    with pytest.raises(UserError, match=r"holds tensor model\.layers\.0\.self_attn\.q_proj\.bias that the llama "
                                        r"architecture .* does not use \(q/k/v biases: only a qwen2"):
        load(stray)
    extra = copy_checkpoint(saved, tmp_path / "b", edit_tensors=add("model.visual.proj"))
    with pytest.raises(UserError, match=r"holds tensor model\.visual\.proj that"):
        load(extra)
    # transformers skips saved RoPE tables, and so do we
    table = copy_checkpoint(saved, tmp_path / "c", edit_tensors=add("model.layers.1.self_attn.rotary_emb.inv_freq"))
    load(table)
    # a Qwen2 config needs the biases a Llama checkpoint lacks: all of them are named
    qwen2 = copy_checkpoint(saved, tmp_path / "d",
                            edit_config=lambda c: c.update(model_type="qwen2", architectures=None))
    with pytest.raises(UserError, match=r"tensor model\.layers\.0\.self_attn\.k_proj\.bias, model\.layers\.0\.self_attn"
                                        r"\.q_proj\.bias, .*, model\.layers\.1\.self_attn\.v_proj\.bias is missing"):
        load(qwen2)


def test_tied_checkpoint_with_a_different_lm_head_is_refused(saved, tmp_path):
    tied = copy_checkpoint(saved, tmp_path / "a", edit_config=lambda c: c.update(tie_word_embeddings=True))
    with pytest.raises(UserError, match="tie_word_embeddings but lm_head.weight .* differs"):
        load(tied)
    same = copy_checkpoint(saved, tmp_path / "b", edit_config=lambda c: c.update(tie_word_embeddings=True),
                           edit_tensors=lambda t: t.update({"lm_head.weight": t["model.embed_tokens.weight"].clone()}))
    assert load(same).config.tie_embeddings


@pytest.mark.parametrize("edit, message", [
    (dict(rope_parameters={"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0}), "rope type 'yarn'"),
    (dict(rope_parameters={"rope_type": "dynamic", "factor": 2.0}), "rope type 'dynamic'"),
    (dict(rope_parameters={"full_attention": {"rope_type": "default"}}), "rope_parameters per layer type"),
    (dict(rope_parameters={"rope_type": "llama3", "factor": 8.0}), "rope type 'llama3' needs low_freq_factor"),
    (dict(partial_rotary_factor=0.5), "partial_rotary_factor"),
    (dict(hidden_act="gelu"), "hidden_act 'gelu'"),
    (dict(attention_bias=True), "attention_bias"),
    (dict(model_type="mistral", architectures=["LlamaForCausalLM"]), r"model_type 'mistral', architectures"),
    (dict(model_type=None, architectures=["GPT2LMHeadModel"]), "model_type 'None'"),
])
def test_configs_the_model_does_not_implement_are_refused(saved, tmp_path, edit, message):
    with pytest.raises(UserError, match=message):
        load(copy_checkpoint(saved, tmp_path / "m", edit_config=lambda c: c.update(edit)))


def test_rope_parameters_come_first_and_top_level_keys_are_the_fallback(saved, tmp_path):
    nested = copy_checkpoint(saved, tmp_path / "a", edit_config=lambda c: c.update(
        rope_theta=10000.0, rope_parameters={"rope_type": "linear", "rope_theta": 500000.0, "factor": 2.0}))
    config = load(nested).config
    assert config.rope_theta == 500000.0 and config.rope_scaling == {"rope_type": "linear", "factor": 2.0}
    flat = copy_checkpoint(saved, tmp_path / "b", edit_config=lambda c: c.update(
        rope_theta=250000.0, rope_scaling={"type": "linear", "factor": 4.0}))
    config = load(flat).config
    assert config.rope_theta == 250000.0 and config.rope_scaling == {"rope_type": "linear", "factor": 4.0}
    unscaled = inverse_frequencies(dataclass_with(config, rope_scaling=None))
    torch.testing.assert_close(inverse_frequencies(config) * 4, unscaled)


def test_sliding_windows_that_cannot_matter_are_dropped(saved, tmp_path):
    preset = compose([]).model  # max_seq_len 512

    def windows(**edit):
        folder = copy_checkpoint(saved, tmp_path / str(len(list(tmp_path.iterdir()))), edit_config=lambda c: c.update(
            max_position_embeddings=4096, architectures=None, **edit))
        return read_config(folder, preset)["attention_windows"]

    assert windows(model_type="mistral", sliding_window=512) is None  # never masks within 512 positions
    assert windows(model_type="mistral", sliding_window=64) == (64, 64)
    assert windows(model_type="mistral", sliding_window=None) is None
    # Qwen2.5's config.json names a window but does not use it; with use_sliding_window, from max_window_layers on
    assert windows(model_type="qwen2", sliding_window=32, use_sliding_window=False) is None
    assert windows(model_type="qwen2", sliding_window=32, use_sliding_window=True, max_window_layers=1) == (0, 32)
    assert windows(model_type="qwen3", sliding_window=32, use_sliding_window=True,
                   layer_types=["sliding_attention", "full_attention"]) == (32, 0)
    assert windows(model_type="llama", sliding_window=32) is None
