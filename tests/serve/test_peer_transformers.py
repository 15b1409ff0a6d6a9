"""Peer test against transformers' own modelling code: tiny random models of each family, saved by
transformers, loaded through model.checkpoint, must give the same fp32 logits (within 1e-5) and the same
greedy tokens as the transformers model on the same prompts. The mixtures of experts (Qwen3MoeForCausalLM,
MixtralForCausalLM) run 8 experts, 2 per token: with and without renormalised top-k weights, a dense layer
among sparse ones (mlp_only_layers, decoder_sparse_step), Mixtral with a sliding window.

Weights are re-drawn after transformers' init (N(0, 0.02) linears and zero biases would make near-uniform
logits and leave Qwen2's biases untested): linears N(0, 1/fan_in), norms 1 + N(0, 0.1), biases N(0, 0.5).
Greedy decoding runs through autotune's KV cache (a batched prefill, then batched decodes); the
transformers side recomputes the whole sequence every step, so the two share nothing but the weights.
"""

import json
import shutil

import pytest
import torch
import transformers

from autotune.config import compose
from autotune.errors import UserError
from autotune.serve import build_model, check_prompts, greedy_generate
from autotune.serve.attention import Segment
from autotune.serve.checkpoint import save_checkpoint
from autotune.serve.model import inverse_frequencies

FP32 = dict(rtol=1e-5, atol=1e-5)  # the issue's bound; measured differences are ~1e-6 (logits' std ~1)
TINY = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=256, rms_norm_eps=1e-6)
LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
CASES = {
    "llama": ("Llama", {}),
    "llama-tied": ("Llama", {"tie_word_embeddings": True}),
    "llama3-rope": ("Llama", {"rope_parameters": LLAMA3_ROPE}),
    "qwen2": ("Qwen2", {}),
    "qwen2-window": ("Qwen2", {"use_sliding_window": True, "sliding_window": 8, "max_window_layers": 1}),
    "qwen3": ("Qwen3", {"tie_word_embeddings": True,
                        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}}),
    "mistral": ("Mistral", {"sliding_window": None}),
    "mistral-window": ("Mistral", {"sliding_window": 8}),
    "qwen3_moe": ("Qwen3Moe", {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 24,
                               "norm_topk_prob": False, "mlp_only_layers": [1]}),
    "qwen3_moe-renorm": ("Qwen3Moe", {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 24,
                                      "norm_topk_prob": True, "decoder_sparse_step": 2}),
    "mixtral": ("Mixtral", {"num_local_experts": 8, "num_experts_per_tok": 2}),
    "mixtral-window": ("Mixtral", {"num_local_experts": 8, "num_experts_per_tok": 2, "sliding_window": 8}),
}
FAMILY = {"Qwen3Moe": "qwen3_moe"}  # the model_type where it is not the class prefix in lower case
PROMPT_LEN, NEW_TOKENS = 12, 16  # 28 positions: a window of 8 masks in both prefill and decode


def randomise(model, tied: bool, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * noise)
            elif p.dim() == 1:
                p.copy_(0.5 * noise)
            elif "embed_tokens" in name:
                p.copy_(noise * (p.shape[1] ** -0.5 if tied else 1.0))
            else:  # fan-in: the last dim (transformers 5 keeps the experts as [E, rows, fan-in] tensors)
                p.copy_(noise * p.shape[-1] ** -0.5)


def make_hf(case: str):
    prefix, extra = CASES[case]
    config = getattr(transformers, f"{prefix}Config")(**TINY, **extra)
    model = getattr(transformers, f"{prefix}ForCausalLM")(config).eval()
    randomise(model, bool(extra.get("tie_word_embeddings")), seed=0)
    return model


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny matmuls on 2 shared cores: one thread runs a forward in 2 ms, two threads took 1 s (measured)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """case -> (transformers model, the folder save_pretrained wrote)."""
    out = {}
    for case in CASES:
        model = make_hf(case)
        folder = tmp_path_factory.mktemp(case)
        model.save_pretrained(folder, safe_serialization=True)
        out[case] = model, folder
    return out


def load(folder):
    return build_model(compose(["model.dtype=float32", f"model.checkpoint={folder}"]).model, "cpu")


def hf_greedy(model, prompt: list[int], steps: int) -> tuple[list[int], torch.Tensor]:
    """transformers' greedy decoding by recomputing the whole sequence each step (no cache): tokens, logits."""
    ids, logits = list(prompt), []
    with torch.no_grad():
        for _ in range(steps):
            last = model(torch.tensor([ids])).logits[0, -1]
            logits.append(last)
            ids.append(int(last.argmax()))
    return ids[len(prompt):], torch.stack(logits)


def assert_peers(ours, hf) -> None:
    prompts = check_prompts(ours.config.vocab_size, 2, PROMPT_LEN, seed=0)
    cache = ours.new_cache(max_slots=1, max_len=PROMPT_LEN)
    logits = ours([Segment(0, 0, tuple(prompts[0]))], cache, all_logits=True)
    with torch.no_grad():
        expected = hf(torch.tensor([prompts[0]])).logits[0]
    assert 0.3 < expected.std() < 5  # meaningful logits, not near-uniform ones
    torch.testing.assert_close(logits, expected, **FP32)
    tokens, step_logits = greedy_generate(ours, prompts, NEW_TOKENS)
    for i, prompt in enumerate(prompts):
        hf_tokens, hf_logits = hf_greedy(hf, prompt, NEW_TOKENS)
        assert tokens[i].tolist() == hf_tokens
        # Not a 1- or 2-token loop (random tied models fall into 3-token loops; untied ones give 4-11 ids):
        # the tokens test more than one argmax, and the logits of every step are compared above.
        assert len(set(hf_tokens)) >= 3
        torch.testing.assert_close(step_logits[i], hf_logits, **FP32)


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_transformers(saved, case):
    hf, folder = saved[case]
    ours = load(folder)
    prefix = CASES[case][0]
    assert ours.config.family == FAMILY.get(prefix, prefix.lower())
    assert bool(ours.config.attention_windows) == case.endswith("-window")
    assert_peers(ours, hf)


def test_transformers_4_layout_loads_the_same_model(saved, tmp_path):
    """Top-level rope_theta / rope_scaling (transformers 4) instead of the nested rope_parameters (5)."""
    hf, folder = saved["llama3-rope"]
    old = tmp_path / "llama3-rope-v4"
    shutil.copytree(folder, old)
    config = json.loads((old / "config.json").read_text())
    rope = config.pop("rope_parameters")
    config.update(rope_theta=rope.pop("rope_theta"), rope_scaling=rope, transformers_version="4.46.0")
    (old / "config.json").write_text(json.dumps(config))
    ours = load(old)
    assert ours.config.rope_theta == 500000.0 and ours.config.rope_scaling["rope_type"] == "llama3"
    assert_peers(ours, hf)


def test_transformers_4_qwen2_layout_with_an_unused_window_loads(saved, tmp_path):
    """Qwen2.5's own config.json: top-level rope_theta, sliding_window set but use_sliding_window false."""
    hf, folder = saved["qwen2"]
    old = tmp_path / "qwen2-v4"
    shutil.copytree(folder, old)
    config = json.loads((old / "config.json").read_text())
    config.update(rope_theta=config.pop("rope_parameters")["rope_theta"], rope_scaling=None, sliding_window=4,
                  use_sliding_window=False, max_window_layers=0, transformers_version="4.43.1")
    del config["layer_types"]
    (old / "config.json").write_text(json.dumps(config))
    ours = load(old)
    assert ours.config.attention_windows is None
    assert_peers(ours, hf)


@pytest.mark.parametrize("case", ["qwen3_moe", "mixtral-window"])
def test_transformers_4_moe_layout_loads_the_same_model(saved, tmp_path, case):
    """transformers 4's config.json: top-level rope_theta, Qwen3-MoE's expert count as num_experts (5 writes
    num_local_experts for both families)."""
    hf, folder = saved[case]
    old = tmp_path / f"{case}-v4"
    shutil.copytree(folder, old)
    config = json.loads((old / "config.json").read_text())
    config.update(rope_theta=config.pop("rope_parameters")["rope_theta"], transformers_version="4.51.0")
    if case == "qwen3_moe":
        config["num_experts"] = config.pop("num_local_experts")
    (old / "config.json").write_text(json.dumps(config))
    ours = load(old)
    assert ours.config.moe.num_experts == 8 and ours.config.moe.top_k == 2
    assert_peers(ours, hf)


def test_sharded_save_pretrained_loads_through_its_index(saved, tmp_path):
    hf, _ = saved["qwen3"]
    hf.save_pretrained(tmp_path, safe_serialization=True, max_shard_size="40KB")
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 2
    assert_peers(load(tmp_path), hf)
    (tmp_path / shards[1]).unlink()
    with pytest.raises(UserError, match=f"shard {shards[1]} named in model.safetensors.index.json is missing"):
        load(tmp_path)


def test_llama3_scaling_and_theta_matter_on_the_tiny_config(saved):
    """The rope test above can fail: serving the same weights with default RoPE, or theta 10000, differs."""
    hf, folder = saved["llama3-rope"]
    ours = load(folder)
    assert torch.equal(inverse_frequencies(ours.config), hf.model.rotary_emb.inv_freq)
    prompt = tuple(check_prompts(ours.config.vocab_size, 1, PROMPT_LEN, seed=0)[0])
    good = ours([Segment(0, 0, prompt)], ours.new_cache(1, PROMPT_LEN), all_logits=True)
    import dataclasses

    for wrong in ({"rope_scaling": None}, {"rope_theta": 10000.0, "rope_scaling": None}):
        other = type(ours)(dataclasses.replace(ours.config, **wrong))
        other.load_state_dict(ours.state_dict())
        bad = other([Segment(0, 0, prompt)], other.new_cache(1, PROMPT_LEN), all_logits=True)
        assert (bad - good).abs().max() > 1e-2


MOE_PRESET = {"qwen3_moe": ["model=tiny_moe"], "mixtral": ["model=tiny_moe", "model.intermediate_size=64"]}


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3", "mistral", "qwen3_moe", "mixtral"])
def test_saved_checkpoints_load_in_transformers(tmp_path, family):
    """save_checkpoint writes what transformers reads as the same model (AutoModelForCausalLM)."""
    ours = build_model(compose([*MOE_PRESET.get(family, []), f"model.family={family}", "model.init_seed=3"]).model,
                       "cpu")
    folder = save_checkpoint(ours, tmp_path / family)
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    assert type(hf).__name__ == json.loads((folder / "config.json").read_text())["architectures"][0]
    assert_peers(ours, hf)
