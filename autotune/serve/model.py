"""The served model: a Llama-style decoder whose replaceable ops all go through `autotune.serve.dispatch`.

`model.family` picks the architecture: llama (Llama 3.x), qwen2 (Qwen2/2.5: q/k/v projections with
biases), qwen3 (Qwen3: RMSNorm over each head of q and k before RoPE, through the rms_norm dispatch point
on the [tokens * heads, head_dim] rows) or mistral (Llama's layer with sliding-window attention, which
a checkpoint's config.json switches on); all four match transformers' modelling code (tests/serve/
test_peer_transformers.py). The mixtures of experts qwen3_moe and mixtral are those layers with the MLP replaced
by `autotune.serve.moe` (router, top-k, `dispatch.fused_moe`) where their config says so.

Token embedding, RMSNorm, rotary position embedding (rotate-half, as Hugging Face Llama checkpoints
expect), grouped-query attention over a KV cache, SwiGLU MLP, LM head. Every projection and the LM head
go through `dispatch.linear` (the projections through `dispatch.int8_linear` with `model.quant=int8`, and
int8 x int8 after `dispatch.fused_add_rms_norm_quant` with `model.quant=w8a8`: autotune.serve.quant),
attention over vLLM's paged KV cache through `dispatch.paged_attention` (autotune.serve.attention). The
residual stream is arranged as in vLLM's Llama: layer 0 does `residual = h; h = rms_norm(h)`, every later norm is
`h, residual = fused_add_rms_norm(h, residual, w)`, the final norm included. q/k/v and gate/up are merged
projections, as in vLLM, so silu_and_mul sees [T, 2 * intermediate].

    model = build_model(compose([]).model, "cpu")          # seeded random weights (or model.checkpoint=PATH)
    tokens, logits = greedy_generate(model, check_prompts(model.config.vocab_size, 4, 16, 0), 8)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

from autotune.errors import UserError
from autotune.serve import dispatch, moe, quant
from autotune.serve.attention import BLOCK_SIZE, Batch, KVCache, Segment, attend, write_kv
from autotune.targets.base import parse_dtype

MODEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
FAMILIES = ("llama", "qwen2", "qwen3", "mistral") + moe.FAMILIES  # MoE families: autotune.serve.moe


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    name: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float
    rms_norm_eps: float
    max_seq_len: int
    tie_embeddings: bool
    dtype: torch.dtype
    init_seed: int = 0
    quant: str = "none"  # none | int8 (weight-only) | w8a8 (int8 weights and activations): autotune.serve.quant
    rope_scaling: dict[str, Any] | None = None  # {"rope_type": "llama3" | "linear", factors...}, from a checkpoint
    family: str = "llama"
    attention_windows: tuple[int, ...] | None = None  # per-layer sliding window (0: full), from a checkpoint
    moe: moe.MoeSpec | None = None  # the sparse layers of qwen3_moe and mixtral (autotune.serve.moe)

    @property
    def qkv_bias(self) -> bool:
        return self.family == "qwen2"

    @property
    def qk_norm(self) -> bool:
        return self.family in ("qwen3", "qwen3_moe")

    def __post_init__(self):
        sizes = ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads",
                 "head_dim", "max_seq_len")
        for field in sizes:
            if getattr(self, field) < 1:
                raise UserError(f"model.{field} is {getattr(self, field)} (set it to a positive integer)")
        if self.num_heads % self.num_kv_heads:
            raise UserError(f"model.num_heads={self.num_heads} is not a multiple of model.num_kv_heads="
                            f"{self.num_kv_heads} (grouped-query attention needs whole groups)")
        if self.head_dim % 2:
            raise UserError(f"model.head_dim={self.head_dim} is odd (rotary embedding needs an even head_dim)")
        if self.dtype not in MODEL_DTYPES:
            raise UserError(f"model.dtype {self.dtype} is not supported (use float32, bfloat16 or float16)")
        quant.mode(self.quant)  # a UserError for a mode nobody registered
        if self.family not in FAMILIES:
            raise UserError(f"model.family '{self.family}' is unknown (use one of {', '.join(FAMILIES)})")
        if self.attention_windows is not None and len(self.attention_windows) != self.num_layers:
            raise ValueError(f"attention_windows has {len(self.attention_windows)} entries for "
                             f"{self.num_layers} layers")
        moe.check(self)

    @classmethod
    def from_cfg(cls, model_cfg, **overrides) -> ModelConfig:
        """From a `cfg.model` node (a preset in conf/model/); `overrides` replace fields (checkpoint dims)."""
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in dict(model_cfg).items() if k in fields}
        values.setdefault("name", "custom")
        values.update(overrides)
        if isinstance(values.get("moe"), Mapping):
            values["moe"] = moe.MoeSpec.from_cfg(values["moe"])
        missing = sorted(fields - set(values) - {"init_seed", "rope_scaling", "family", "attention_windows", "quant",
                                                 "moe"})
        if missing:
            raise UserError(f"the model config lacks {', '.join(missing)} (start from a preset in conf/model/)")
        if not isinstance(values["dtype"], torch.dtype):
            try:
                values["dtype"] = parse_dtype(str(values["dtype"]))
            except ValueError:
                raise UserError(f"unknown model.dtype '{values['dtype']}' (use float32, bfloat16 or float16)") from None
        return cls(**values)


def inverse_frequencies(config: ModelConfig) -> torch.Tensor:
    """RoPE's inv_freq [head_dim / 2] in fp32, with the checkpoint's scaling (Llama 3.x "llama3", "linear").

    Computed in fp32 in the order of operations of transformers' rope functions, so that the tables, and
    the logits, agree with transformers to the last bit of the frequencies."""
    d = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    scaling = config.rope_scaling or {"rope_type": "default"}
    if scaling["rope_type"] == "linear":
        return inv_freq / scaling["factor"]
    if scaling["rope_type"] == "llama3":
        return _llama3_scaled(inv_freq, scaling)
    return inv_freq


def _llama3_scaled(inv_freq: torch.Tensor, scaling: dict[str, Any]) -> torch.Tensor:
    """Llama 3.1+: wavelengths longer than original / low_freq_factor are stretched by `factor`, those shorter
    than original / high_freq_factor kept, and the band between them interpolated smoothly."""
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    original = scaling["original_max_position_embeddings"]
    wavelength = 2 * math.pi / inv_freq
    stretched = torch.where(wavelength > original / low, inv_freq / factor, inv_freq)
    smooth = (original / wavelength - low) / (high - low)
    smoothed = (1 - smooth) * stretched / factor + smooth * stretched
    middle = ~(wavelength < original / high) * ~(wavelength > original / low)
    return torch.where(middle, smoothed, stretched)


def cos_sin_cache(config: ModelConfig, device) -> torch.Tensor:
    """vLLM's cos_sin_cache [max_seq_len, head_dim]: cos then sin of each position's angles, computed in fp32 and
    stored in the model's dtype (as vLLM's RotaryEmbedding and transformers' rotary embedding round them)."""
    positions = torch.arange(config.max_seq_len, dtype=torch.float32)
    angles = torch.outer(positions, inverse_frequencies(config))
    return torch.cat((angles.cos(), angles.sin()), dim=-1).to(device=device, dtype=config.dtype)


def _weight(*shape, device, dtype) -> torch.nn.Parameter:
    return torch.nn.Parameter(torch.empty(shape, device=device, dtype=dtype), requires_grad=False)


class DecoderLayer(torch.nn.Module):
    def __init__(self, c: ModelConfig, device, window: int = 0, index: int = 0):
        super().__init__()
        kw = dict(device=device, dtype=c.dtype)
        self.c, self.window = c, window  # window: sliding-window length, 0 for full attention
        self.quant = quant.mode(c.quant)  # how the projections and the norms feeding them run (autotune.serve.quant)
        self.moe = moe.sparse_block(c, index, device)  # a MoE layer's experts instead of the dense MLP, else None
        self.input_norm = _weight(c.hidden_size, **kw)
        self.qkv_proj = _weight((c.num_heads + 2 * c.num_kv_heads) * c.head_dim, c.hidden_size, **kw)
        self.o_proj = _weight(c.hidden_size, c.num_heads * c.head_dim, **kw)
        self.post_norm = _weight(c.hidden_size, **kw)
        if self.moe is None:
            self.gate_up_proj = _weight(2 * c.intermediate_size, c.hidden_size, **kw)
            self.down_proj = _weight(c.hidden_size, c.intermediate_size, **kw)
        self.qkv_bias = _weight((c.num_heads + 2 * c.num_kv_heads) * c.head_dim, **kw) if c.qkv_bias else None
        self.q_norm = _weight(c.head_dim, **kw) if c.qk_norm else None
        self.k_norm = _weight(c.head_dim, **kw) if c.qk_norm else None

    def forward(self, h, residual, rope_cache, batch: Batch, k_cache, v_cache):
        """h, residual [T, hidden] -> (MLP output, residual stream), both [T, hidden]."""
        h, residual = self.add_norm(h, residual, self.input_norm)
        h = self.attention(h, rope_cache, batch, k_cache, v_cache)
        h, residual = self.add_norm(h, residual, self.post_norm)
        if self.moe is not None:
            return self.moe(h), residual
        h = self.project(dispatch.silu_and_mul(self.project(h, "gate_up_proj")), "down_proj")
        return h, residual

    def add_norm(self, h, residual, weight):
        """(the normed residual stream, the stream): layer 0 starts it (`residual = h`, then rms_norm), later
        norms add h to it first; with model.quant=w8a8 the normed rows come quantized, as (q int8, scale)."""
        eps = self.c.rms_norm_eps
        if residual is None:
            return dispatch.rms_norm(h, weight, eps), h
        return self.quant.add_norm(self, h, residual, weight, eps)

    def project(self, x, name: str):
        """x @ W.T for projection `name`, as the quant mode computes it (dispatch.linear for a float model)."""
        return self.quant.project(self, x, name)

    def attention(self, h, rope_cache, batch: Batch, k_cache, v_cache):
        c = self.c
        qkv = self.project(h, "qkv_proj")
        t = qkv.shape[0]
        q, k, v = (qkv if self.qkv_bias is None else qkv + self.qkv_bias).split(
            [c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim, c.num_kv_heads * c.head_dim], dim=-1)
        if c.qk_norm:  # Qwen3: RMSNorm over each head, as rows of the rms_norm target's [rows, width] contract
            q = dispatch.rms_norm(q.reshape(t * c.num_heads, c.head_dim), self.q_norm, c.rms_norm_eps)
            k = dispatch.rms_norm(k.reshape(t * c.num_kv_heads, c.head_dim), self.k_norm, c.rms_norm_eps)
        # q and k as views of the qkv projection (dense after Qwen3's norm), rotated together as vLLM's layers do
        q, k = dispatch.rotary_embedding(batch.positions, q.view(t, c.num_heads, c.head_dim),
                                         k.view(t, c.num_kv_heads, c.head_dim), rope_cache, True)
        write_kv(k_cache, v_cache, batch, k, v.reshape(t, c.num_kv_heads, c.head_dim))
        out = attend(q, k_cache, v_cache, batch, 1.0 / math.sqrt(c.head_dim), window=self.window)
        return self.project(out, "o_proj")


class LlamaModel(torch.nn.Module):
    """`model(segments, cache)` runs one engine step and returns logits at each segment's last token."""

    rope_cache: torch.Tensor  # a buffer (registered in __init__), declared for the type checker

    def __init__(self, config: ModelConfig, device: str | torch.device = "cpu"):
        super().__init__()
        c = self.config = config
        kw = dict(device=device, dtype=c.dtype)
        self.embed = _weight(c.vocab_size, c.hidden_size, **kw)
        windows = c.attention_windows or (0,) * c.num_layers
        self.layers = torch.nn.ModuleList(DecoderLayer(c, device, w, i) for i, w in enumerate(windows))
        self.norm = _weight(c.hidden_size, **kw)
        self.lm_head_weight = None if c.tie_embeddings else _weight(c.vocab_size, c.hidden_size, **kw)
        self.register_buffer("rope_cache", cos_sin_cache(c, device), persistent=False)

    @property
    def lm_head(self) -> torch.Tensor:
        return self.embed if self.lm_head_weight is None else self.lm_head_weight

    @property
    def device(self) -> torch.device:
        return self.embed.device

    def new_cache(self, max_slots: int, max_len: int, block_size: int = BLOCK_SIZE) -> KVCache:
        c = self.config
        if max_len > c.max_seq_len:
            raise ValueError(f"a cache of length {max_len} exceeds model.max_seq_len={c.max_seq_len}")
        return KVCache(c.num_layers, c.num_kv_heads, c.head_dim, max_slots=max_slots, max_len=max_len,
                       dtype=c.dtype, device=self.device, block_size=block_size)

    @torch.inference_mode()
    def forward(self, segments: list[Segment], cache: KVCache, all_logits: bool = False) -> torch.Tensor:
        """Logits [segments, vocab] at each segment's last token ([T, vocab] for every token with all_logits)."""
        batch = Batch.build(segments, cache, self.config.vocab_size, self.device)
        h = F.embedding(batch.tokens, self.embed)  # [T, hidden]
        residual = None
        for i, layer in enumerate(self.layers):
            h, residual = layer(h, residual, self.rope_cache, batch, *cache.layer(i))
        h, _ = dispatch.fused_add_rms_norm(h, residual, self.norm, self.config.rms_norm_eps)
        if not all_logits:
            h = h[batch.last_rows]
        return dispatch.linear(h, self.lm_head)


@torch.no_grad()
def init_weights(model: LlamaModel, seed: int) -> None:
    """Seeded random weights that keep activations O(1) through the layers and give varied greedy tokens.

    Linears are N(0, 1/fan_in), so each projection keeps the variance of its input, and norms are 1:
    the tiny preset's logits then have std 1.0, and 4 check prompts x 12 greedy tokens hold 37 distinct ids.
    (With N(0, 0.02) linears, the training init, the logits' std drops to 0.23 and greedy decoding falls
    into 1- to 4-token loops within a few steps.) Embeddings are N(0, 1), except a tied one: there the
    input embedding reappears in the final hidden state, and at N(0, 1) its dot product with itself
    (~hidden) outweighs every other logit: greedy decoding repeats the last prompt token forever (measured on
    tiny, tied). N(0, 1/hidden) fixes that. Qwen2's q/k/v biases are N(0, 0.1): present, not dominant.
    """
    c = model.config
    gen = torch.Generator(device=model.device).manual_seed(seed)
    for name, p in model.named_parameters():
        if name.endswith("qkv_bias"):
            p.normal_(0.0, 0.1, generator=gen)
        elif p.dim() == 1:
            p.fill_(1.0)
        elif name == "embed":
            p.normal_(0.0, c.hidden_size ** -0.5 if c.tie_embeddings else 1.0, generator=gen)
        else:
            p.normal_(0.0, p.shape[-1] ** -0.5, generator=gen)  # fan-in: the last dim (the experts' too)


def build_model(model_cfg, device: str) -> LlamaModel:
    """The model of a `cfg.model` preset on `device`: seeded random weights, or `model_cfg.checkpoint` loaded."""
    from autotune.serve import checkpoint

    path = model_cfg.get("checkpoint")
    if path:
        config = ModelConfig.from_cfg(model_cfg, **checkpoint.read_config(path, model_cfg))
        model = LlamaModel(config, device)
        checkpoint.load_weights(model, path)
    else:
        model = LlamaModel(ModelConfig.from_cfg(model_cfg), device)
        init_weights(model, model.config.init_seed)
    for layer in model.layers:
        assert isinstance(layer, DecoderLayer)  # for the type checker: a ModuleList holds Modules
        layer.quant.prepare(layer)
    return model.eval()


def check_prompts(vocab_size: int, n: int, length: int, seed: int) -> list[list[int]]:
    """A fixed, seeded set of n prompts of `length` token ids, the same on every machine."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (n, length), generator=gen).tolist()


PREFILL_CHUNK = 8  # greedy_generate's step budget beyond one token per prompt: prompt tokens a step at least


def greedy_generate(model: LlamaModel, prompts: list[list[int]], max_new_tokens: int, block_size: int = BLOCK_SIZE
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy decoding of the prompts, stepped by the engine's own schedule (autotune.serve.engine.Schedule): prompt
    i arrives at step i, and each step's budget (a token per prompt and PREFILL_CHUNK more) goes to the running
    decodes first, then to prompt chunks over their cached prefix, so steps mix decode rows with prefill chunks as
    vLLM's do (the model check runs a kernel through such steps). Greedy tokens do not depend on the schedule.
    (tokens [N, max_new_tokens], fp32 logits [N, max_new, vocab])."""
    from autotune.serve.engine import Request, Schedule

    if not prompts or any(not p for p in prompts) or max_new_tokens < 1:
        raise ValueError("greedy_generate needs non-empty prompts and max_new_tokens >= 1")
    cache = model.new_cache(len(prompts), max(len(p) for p in prompts) + max_new_tokens, block_size)
    schedule = Schedule([Request(i, tuple(p), max_new_tokens, arrival_s=float(i)) for i, p in enumerate(prompts)],
                        len(prompts), time_scale=1.0)
    logits: list[list[torch.Tensor]] = [[] for _ in prompts]
    step = 0
    while not schedule.done():
        schedule.arrive(float(step))
        segments, samplers = schedule.plan(len(prompts) + PREFILL_CHUNK)
        step_logits = model(segments, cache).float()  # [segments, vocab]
        for seq, row in zip(samplers, step_logits):
            if seq is not None:
                logits[seq.request.request_id].append(row)
        schedule.commit(samplers, step_logits.argmax(dim=-1).tolist(), float(step))
        step += 1
    finished = sorted(schedule.finished, key=lambda r: r.request_id)
    return torch.tensor([list(r.tokens) for r in finished]), torch.stack([torch.stack(rows) for rows in logits]).cpu()
