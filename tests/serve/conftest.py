"""Shared fixtures for the serve tests: the tiny preset's config and model (fp32, GQA: 4 heads, 2 kv heads)."""

import pytest
import torch

from autotune.config import compose
from autotune.serve import build_model


@pytest.fixture(scope="session")
def cfg():
    return compose([])


@pytest.fixture(scope="session")
def tiny(cfg):
    return build_model(cfg.model, "cpu")


def plain_logits(hf: dict[str, torch.Tensor], c, tokens: list[int]) -> torch.Tensor:
    """Logits [T, vocab] of a whole sequence, straight from the HF-named weights: no dispatch, no cache."""

    def norm(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + c.rms_norm_eps) * w

    def rope(x):  # x: [T, heads, D], rotate-half
        d = x.shape[-1]
        inv_freq = 1.0 / (c.rope_theta ** (torch.arange(0, d, 2).float() / d))
        angles = torch.arange(x.shape[0]).float()[:, None] * inv_freq[None, :]
        cos, sin = torch.cat([angles.cos()] * 2, -1)[:, None], torch.cat([angles.sin()] * 2, -1)[:, None]
        rotated = torch.cat([-x[..., d // 2:], x[..., :d // 2]], dim=-1)
        return x * cos + rotated * sin

    t, group = len(tokens), c.num_heads // c.num_kv_heads
    x = hf["model.embed_tokens.weight"][tokens].float()
    for i in range(c.num_layers):
        w = {k.removeprefix(f"model.layers.{i}."): v.float() for k, v in hf.items() if k.startswith(f"model.layers.{i}.")}
        h = norm(x, w["input_layernorm.weight"])
        q = rope((h @ w["self_attn.q_proj.weight"].T).view(t, c.num_heads, c.head_dim))
        k = rope((h @ w["self_attn.k_proj.weight"].T).view(t, c.num_kv_heads, c.head_dim))
        v = (h @ w["self_attn.v_proj.weight"].T).view(t, c.num_kv_heads, c.head_dim)
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        attn = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True)  # [heads, T, D]
        x = x + attn.transpose(0, 1).reshape(t, -1) @ w["self_attn.o_proj.weight"].T
        h = norm(x, w["post_attention_layernorm.weight"])
        gate, up = h @ w["mlp.gate_proj.weight"].T, h @ w["mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ w["mlp.down_proj.weight"].T
    head = hf.get("lm_head.weight", hf["model.embed_tokens.weight"]).float()
    return norm(x, hf["model.norm.weight"].float()) @ head.T


def hf_weights(model) -> dict[str, torch.Tensor]:
    """The model's weights under their Hugging Face names."""
    from autotune.serve.checkpoint import layout

    params = dict(model.named_parameters())
    return {hf: params[ours][row0:row1] for ours, hf, row0, row1 in layout(model)}


@pytest.fixture(scope="session")
def reference():
    """reference(model, tokens) -> plain full-sequence logits [T, vocab] in fp32."""
    return lambda model, tokens: plain_logits(hf_weights(model), model.config, tokens)
