"""The model families' own parts on random weights: Qwen3's q/k norm as rms_norm calls, Qwen2's biases, presets."""

import pytest
import torch

from autotune.config import compose
from autotune.errors import UserError
from autotune.serve import build_model, dispatch
from autotune.serve.attention import Segment
from autotune.serve.model import LlamaModel, ModelConfig


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


@pytest.mark.parametrize("preset, family, experts, top_k, billions", [("qwen3_30b_a3b", "qwen3_moe", 128, 8, 30.5),
                                                                      ("mixtral_8x7b", "mixtral", 8, 2, 46.7)])
def test_moe_presets_have_the_real_dimensions(preset, family, experts, top_k, billions):
    """Built on the meta device (no memory): the parameter count is the published one (30.5B, 46.7B)."""
    config = ModelConfig.from_cfg(compose([f"model={preset}"]).model)
    assert config.family == family and config.dtype == torch.bfloat16
    assert (config.moe.num_experts, config.moe.top_k, config.moe.norm_topk_prob) == (experts, top_k, True)
    model = LlamaModel(config, "meta")
    assert all(layer.moe is not None for layer in model.layers)
    assert abs(sum(p.numel() for p in model.parameters()) / 1e9 - billions) < 0.1


def test_moe_layers_call_the_router_and_fused_moe_dispatch_points():
    model = build_model(compose(["model=tiny_moe", "model.moe.mlp_only_layers=[1]"]).model, "cpu")
    c, calls = model.config, []
    reference = dispatch.current("fused_moe")

    def recording(x, w13, w2, weights, ids):
        calls.append((tuple(x.shape), tuple(w13.shape), tuple(w2.shape), weights.dtype, ids.dtype,
                      bool((weights.sum(-1) - 1).abs().max() < 1e-5), ids.unique(dim=-1).shape == ids.shape))
        return reference(x, w13, w2, weights, ids)

    with dispatch.using({"fused_moe": recording}):
        before = model([Segment(0, 0, (1, 2, 3, 4, 5))], model.new_cache(1, 8))
    e, k, i, h = c.moe.num_experts, c.moe.top_k, c.moe.intermediate_size, c.hidden_size
    assert calls == [((5, h), (e, 2 * i, h), (e, h, i), torch.float32, torch.int32, True, True)]  # layer 1 is dense
    assert model.layers[1].moe is None and model.layers[1].gate_up_proj.shape == (2 * c.intermediate_size, h)
    with dispatch.using({"fused_moe": lambda x, w13, w2, weights, ids: reference(x, w13, w2, weights * 0.5, ids)}):
        changed = model([Segment(0, 0, (1, 2, 3, 4, 5))], model.new_cache(1, 8))
    assert not torch.allclose(changed, before)


@pytest.mark.parametrize("overrides, words", [
    (["model=tiny_moe", "model.quant=int8"], "quantized experts are not implemented"),
    (["model=tiny_moe", "model.family=mixtral", "model.intermediate_size=64", "model.moe.norm_topk_prob=false"],
     "Mixtral always renormalises"),
    (["model=tiny_moe", "model.family=llama"], "is dense"),
    (["model.family=qwen3_moe"], "needs model.moe"),
    (["model=tiny_moe", "model.moe.top_k=17"], "exceeds model.moe.num_experts=16"),
])
def test_moe_settings_the_model_cannot_serve_are_refused(overrides, words):
    with pytest.raises(UserError, match=words):
        build_model(compose(overrides).model, "cpu")
