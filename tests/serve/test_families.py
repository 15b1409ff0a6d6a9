"""The model families' own parts on random weights: Qwen3's q/k norm as rms_norm calls, Qwen2's biases, presets."""

import pytest
import torch

from autotune.config import compose
from autotune.errors import UserError
from autotune.serve import build_model, dispatch
from autotune.serve.attention import Segment
from autotune.serve.model import ModelConfig


def test_qwen3_normalises_each_q_and_k_head_through_the_rms_norm_dispatch_point():
    model = build_model(compose(["model.family=qwen3"]).model, "cpu")
    c, calls = model.config, []
    reference = dispatch.current("rms_norm")

    def recording(x, weight, eps):
        calls.append((tuple(x.shape), tuple(weight.shape)))
        return reference(x, weight, eps)

    with dispatch.using({"rms_norm": recording}):
        model([Segment(0, 0, (1, 2, 3, 4, 5))], model.new_cache(1, 8))
    t, d = 5, c.head_dim
    per_layer = [((t * c.num_heads, d), (d,)), ((t * c.num_kv_heads, d), (d,))]
    assert calls == [((t, c.hidden_size), (c.hidden_size,))] + per_layer * c.num_layers
    with dispatch.using({"rms_norm": lambda x, w, eps: reference(x, w * 0.5, eps)}):
        changed = model([Segment(0, 0, (1, 2, 3, 4, 5))], model.new_cache(1, 8))
    assert not torch.allclose(changed, model([Segment(0, 0, (1, 2, 3, 4, 5))], model.new_cache(1, 8)))


def test_qwen2_has_random_qkv_biases_and_llama_has_none():
    qwen2 = build_model(compose(["model.family=qwen2"]).model, "cpu")
    bias = qwen2.layers[0].qkv_bias
    assert bias.shape == ((4 + 2 * 2) * 32,) and 0.05 < bias.std() < 0.2
    llama = build_model(compose([]).model, "cpu")
    assert llama.layers[0].qkv_bias is None and not any("bias" in n for n, _ in llama.named_parameters())


@pytest.mark.parametrize("preset, family", [("qwen2_5_0_5b", "qwen2"), ("qwen3_0_6b", "qwen3"),
                                            ("mistral_7b", "mistral"), ("llama3_8b", "llama")])
def test_family_presets_describe_their_models(preset, family):
    config = ModelConfig.from_cfg(compose([f"model={preset}"]).model)
    assert config.family == family and config.dtype == torch.bfloat16


def test_unknown_family_is_a_user_error():
    with pytest.raises(UserError, match="model.family 'gpt2' is unknown"):
        build_model(compose(["model.family=gpt2"]).model, "cpu")
