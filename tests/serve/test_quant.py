"""model.quant=int8: the projections are int8 with per-channel scales and go through int8_linear."""

import pytest
import torch
from omegaconf import OmegaConf

from autotune.config import compose
from autotune.errors import UserError
from autotune.serve import build_model, check_prompts, dispatch, greedy_generate
from autotune.serve.attention import Segment
from autotune.config import groups
from autotune.serve import moe, quant
from autotune.serve.model import FAMILIES
from autotune.serve.quant import PROJECTIONS


@pytest.fixture(scope="module")
def int8_model():
    return build_model(compose(["model.quant=int8"]).model, "cpu")


def test_projections_are_int8_and_route_through_int8_linear(int8_model):
    layer = int8_model.layers[0]
    for name in PROJECTIONS:
        assert not hasattr(layer, name)
        assert getattr(layer, f"{name}_int8").dtype == torch.int8
        assert getattr(layer, f"{name}_scale").dtype == torch.float32
    calls = []
    ref_int8, ref_linear = dispatch.current("int8_linear"), dispatch.current("linear")
    spies = {"int8_linear": lambda *a: calls.append("int8_linear") or ref_int8(*a),
             "linear": lambda *a: calls.append("linear") or ref_linear(*a)}
    with dispatch.using(spies):
        int8_model([Segment(0, 0, (1, 2, 3))], int8_model.new_cache(1, 8))
    layers = int8_model.config.num_layers
    assert calls.count("int8_linear") == 4 * layers and calls.count("linear") == 1  # the LM head stays float


def test_int8_model_tracks_the_float_model(tiny, int8_model):
    prompts = check_prompts(tiny.config.vocab_size, n=2, length=8, seed=0)
    _, ref = greedy_generate(tiny, prompts, 2)
    _, got = greedy_generate(int8_model, prompts, 2)
    assert not torch.equal(ref, got)  # the weights did change
    assert torch.corrcoef(torch.stack([ref.flatten(), got.flatten()]))[0, 1] > 0.99


def test_unknown_quant_mode_is_a_user_error():
    with pytest.raises(UserError, match="model.quant='fp4' is not supported"):
        build_model(compose(["model.quant=fp4"]).model, "cpu")


@pytest.fixture(scope="module")
def w8a8_model():
    return build_model(compose(["model.quant=w8a8"]).model, "cpu")


def test_w8a8_norms_feeding_projections_are_fused_with_the_quantization(w8a8_model):
    calls = []
    spies = {name: (lambda name, ref: lambda *a: calls.append(name) or ref(*a))(name, dispatch.current(name))
             for name in ("fused_add_rms_norm_quant", "fused_add_rms_norm", "rms_norm", "int8_linear", "linear")}
    with dispatch.using(spies):
        w8a8_model([Segment(0, 0, (1, 2, 3))], w8a8_model.new_cache(1, 8))
    layers = w8a8_model.config.num_layers
    # layer 0's input norm starts the residual stream (rms_norm); every other norm before a projection is fused
    assert calls.count("fused_add_rms_norm_quant") == 2 * layers - 1
    assert calls.count("rms_norm") == 1 and calls.count("fused_add_rms_norm") == 1  # the final norm: float
    assert calls.count("int8_linear") == 0 and calls.count("linear") == 1  # int8 x int8; the LM head float


def test_w8a8_model_tracks_the_float_model(tiny, w8a8_model):
    prompts = check_prompts(tiny.config.vocab_size, n=2, length=8, seed=0)
    _, ref = greedy_generate(tiny, prompts, 2)
    _, got = greedy_generate(w8a8_model, prompts, 2)
    assert not torch.equal(ref, got)
    assert torch.corrcoef(torch.stack([ref.flatten(), got.flatten()]))[0, 1] > 0.99


def test_every_preset_takes_every_quant_mode():
    """model.quant is one setting of the config (conf/config.yaml), not a key each preset must carry:
    `model=qwen3_0_6b model.quant=int8` was an unknown setting before."""
    modes = list(quant.MODES)
    for i, preset in enumerate(groups()["model"]):
        name = modes[i % len(modes)]
        assert compose([f"model={preset}", f"model.quant={name}"]).model.quant == name


@pytest.fixture(scope="module")
def tiny_cfg():
    return compose([]).model


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_serves_every_quant_mode(family, tiny_cfg):
    base = tiny_cfg
    if family in moe.FAMILIES:  # an MoE family needs model.moe; Mixtral's experts are its MLP (one width)
        base = compose(["model=tiny_moe"]).model
        base = OmegaConf.merge(base, {"intermediate_size": base.moe.intermediate_size})
    for name, handler in quant.MODES.items():
        cfg = OmegaConf.merge(base, {"family": family, "quant": name})
        if family in moe.FAMILIES and name != "none":  # quantized experts are refused, with what to do instead
            with pytest.raises(UserError, match="model.quant=none"):
                build_model(cfg, "cpu")
            continue
        model = build_model(cfg, "cpu")
        calls = []
        spies = {t: (lambda t, ref: lambda *a: calls.append(t) or ref(*a))(t, dispatch.current(t))
                 for t in handler.targets}
        with dispatch.using(spies):
            logits = model([Segment(0, 0, (1, 2, 3))], model.new_cache(1, 8))
        assert torch.isfinite(logits).all(), (family, name)
        assert set(calls) == set(handler.targets), (family, name)  # the mode's dispatch points were called


def test_a_new_quant_mode_is_one_registered_class(tiny_cfg):
    """The README's "Adding a quant mode", done in the test: a class with `@quant.register` is all a mode needs to
    be accepted by the config, the model and every family (fp16 weights here, a throwaway)."""
    @quant.register
    class Fp16Weights(quant.QuantMode):
        name = "test_fp16_weights"

        def prepare(self, layer) -> None:
            for proj in PROJECTIONS:
                setattr(layer, proj, torch.nn.Parameter(getattr(layer, proj).half().float(), requires_grad=False))

    try:
        assert compose(["model.quant=test_fp16_weights"]).model.quant == "test_fp16_weights"
        model = build_model(OmegaConf.merge(tiny_cfg, {"quant": "test_fp16_weights"}), "cpu")
        assert torch.isfinite(model([Segment(0, 0, (1, 2, 3))], model.new_cache(1, 8))).all()
        assert torch.equal(model.layers[0].qkv_proj, model.layers[0].qkv_proj.half().float())
    finally:
        del quant.MODES["test_fp16_weights"]
