"""rotary_embedding: RoPE as vLLM's RotaryEmbedding computes it: positions and a cos/sin cache, q and k together,
NeoX or GPT-J style, over the first rot_dim of each head.

positions int64 [T]; query [T, heads, D] and key [T, kv_heads, D] (views of the fused qkv projection, as served);
cos_sin_cache [max_position, rot_dim] in query's dtype, cos in its first rot_dim / 2 columns and sin in the rest
(vLLM's `cos_sin_cache` buffer); is_neox picks the pairs rotated together: NeoX style pairs column j with
j + rot_dim / 2 (Llama, Qwen, Mistral), GPT-J style columns 2j and 2j + 1 (GPT-J, ChatGLM). Token t rotates pair j
of every head by cos_sin_cache[positions[t]]'s cos[j] and sin[j]: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin);
columns from rot_dim on pass through (partial rotary: Phi-2's 0.4, GPT-NeoX's 0.25, ChatGLM's 0.5). Returns (query,
key) rotated, dense, in their dtype. vLLM's `_C::rotary_embedding` writes q and k in place; the
exported plugin returns these from its RotaryEmbedding's forward, as vLLM's own forward does.

Case shape: (tokens, heads, kv_heads, head_dim, rot_dim, neox, max_position). The cache's base and scaling are drawn
per case (a kernel cannot recompute the cache from a guessed theta), its rows stored in the case dtype as vLLM
stores them; the positions are a step's (`step_positions`: decodes and prefill runs), one at the cache's last row.

CPU plan (cut_shape): tokens are the independent work and are cut; heads, kv_heads, head_dim, rot_dim, the style and
the cache's rows are never cut (positions reach its last row). Range cases run each served shape's tokens whole, and
its sizes over the longest position range a family serves (LONGEST_POSITION: Llama 3.1 and 3.2's 131072-row cache),
where a kernel that goes wrong past some position would show, and a step of vLLM's most tokens
(base.ENGINE_STEP_TOKENS: 8192), sampled.

Precision: the math is in the input dtype, each product and each sum rounded to it, as vLLM computes rotary: its CUDA
kernel in `scalar_t` and its `forward_native` in the tensors' dtype (transformers' too). A kernel computing in fp32
is more accurate than that and passes by the fp64-golden fallback; one that rounds each step as vLLM does passes as
vLLM's own would (with an fp32 reference, such a kernel was 3.7x the reference's largest error in fp16, over the
fallback's 3x). Tolerances: torch.testing's per-dtype defaults (base.DEFAULT_TOLERANCES), no override.
"""

import torch

from autotune.targets.base import (
    ENGINE_STEP_TOKENS,
    RANGE_ELEMENTS,
    ForeignOp,
    Target,
    activations,
    primes,
    random_rows,
)
from autotune.targets.space import POW2, WARPS, Knob, SearchSpace, configs


def rotary_embedding(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, cos_sin_cache: torch.Tensor,
                     is_neox: bool) -> tuple[torch.Tensor, torch.Tensor]:
    cos, sin = cos_sin_cache.index_select(0, positions).chunk(2, dim=-1)  # [T, rot_dim / 2] each
    return _rotate(query, cos, sin, is_neox), _rotate(key, cos, sin, is_neox)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, is_neox: bool) -> torch.Tensor:
    """x [T, heads, D] with its first 2 * cos.shape[-1] columns rotated, the rest as they were; in x's dtype, each
    product and sum rounded to it, as vLLM computes (see the module docstring)."""
    rot = 2 * cos.shape[-1]
    turned, kept = x[..., :rot], x[..., rot:]
    x1, x2 = turned.chunk(2, dim=-1) if is_neox else (turned[..., 0::2], turned[..., 1::2])
    c, s = cos.unsqueeze(-2).to(x.dtype), sin.unsqueeze(-2).to(x.dtype)  # [T, 1, rot / 2]: one row for every head
    o1, o2 = x1 * c - x2 * s, x2 * c + x1 * s
    out = torch.cat((o1, o2), dim=-1) if is_neox else torch.stack((o1, o2), dim=-1).flatten(-2)
    return torch.cat((out, kept), dim=-1)


def _check_shape(shape) -> None:
    """ValueError unless the shape is a rotary call some model makes."""
    tokens, heads, kv_heads, head_dim, rot_dim, neox, max_position = shape
    if min(tokens, heads, kv_heads, max_position) < 1 or rot_dim < 2 or rot_dim % 2 or rot_dim > head_dim \
            or neox not in (0, 1):
        raise ValueError(f"no rotary call has the shape {list(shape)} (rot_dim even, 2..head_dim; neox 0 or 1)")


def make_inputs(shape, dtype, gen, kind):
    _check_shape(shape)
    tokens, heads, kv_heads, head_dim, rot_dim, neox, max_position = shape
    positions = step_positions(tokens, max_position, gen)
    query = activations((tokens, heads, head_dim), dtype, gen, kind)
    key = activations((tokens, kv_heads, head_dim), dtype, gen, "large" if kind == "large" else "normal")
    # a base from 1e3 to 1e7 (Llama 2's 1e4, Llama 3's 5e5, Qwen's 1e6) and a linear scaling from 1 to 8
    base, factor = (10 ** (3 + 4 * torch.rand(1, generator=gen)), 1 + 7 * torch.rand(1, generator=gen))
    inv_freq = 1.0 / (base ** (torch.arange(0, rot_dim, 2, dtype=torch.float32) / rot_dim)) / factor
    angles = torch.outer(torch.arange(max_position, dtype=torch.float32), inv_freq)
    cache = torch.cat((angles.cos(), angles.sin()), dim=-1).to(dtype)
    return positions, query, key, cache, bool(neox)


def step_positions(tokens: int, max_position: int, gen: torch.Generator) -> torch.Tensor:
    """positions [T] as a served step lays them out: decodes (one token each, anywhere in the cache) and prefill
    chunks (a run of consecutive positions from where the sequence stands), about as many of each, in a drawn order;
    a token drawn per case sits at the cache's last row. Positions drawn independently had no run: a round-15
    attacker's kernel read a run of 4 from its first row, wrong in every prefill chunk, and passed."""
    positions = torch.empty(tokens, dtype=torch.int64)
    t = 0
    while t < tokens:
        n = 1 if torch.rand((), generator=gen) < 0.5 else int(torch.randint(2, tokens - t + 2, (1,), generator=gen))
        n = min(n, tokens - t, max_position)
        start = int(torch.randint(0, max_position - n + 1, (1,), generator=gen))
        positions[t:t + n] = torch.arange(start, start + n)
        t += n
    positions[int(torch.randint(0, tokens, (1,), generator=gen))] = max_position - 1
    return positions


def _heads(shape) -> int:
    return shape[1] + shape[2]


def bytes_moved(shape, dtype):
    tokens, _, _, head_dim, rot_dim, _, _ = shape
    e = torch.empty((), dtype=dtype).element_size()
    return 2 * tokens * _heads(shape) * head_dim * e + tokens * (rot_dim * e + 8)  # q, k in/out; cache rows; positions


def flops(shape, dtype):
    return 3 * shape[0] * _heads(shape) * shape[4]


def input_elements(shape) -> int:
    tokens, _, _, head_dim, rot_dim, _, max_position = shape
    return tokens * (1 + _heads(shape) * head_dim) + max_position * rot_dim


def output_elements(shape) -> int:
    return shape[0] * _heads(shape) * shape[3]


def cut_shape(shape, max_rows, max_elements):
    """Tokens cut to max_rows and to max_elements values of q and k; nothing else."""
    if max_rows is None or max_elements is None:  # on a GPU: no cut
        return tuple(shape)
    width = _heads(shape) * shape[3]
    return (max(1, min(shape[0], max_rows, max_elements // width)), *shape[1:])


# The most positions a served family's cache holds (vLLM's cos_sin_cache has max_position_embeddings rows): Llama 3.1
# and 3.2's 131072 (Qwen3's 40960, Mistral's and Qwen2.5's 32768, Llama 3's 8192)
LONGEST_POSITION = 131072


def range_cuts(shape):
    """The tokens whole up to RANGE_ELEMENTS values of q and k (819 tokens of Llama 3 8B's 40 heads of 128): a kernel
    whose grid or tile follows the token count meets a served step's. Then the shape's heads and dims at 64 tokens
    over LONGEST_POSITION cache rows (every token's position drawn over them). Then a step of ENGINE_STEP_TOKENS
    tokens (a prompt of 4200 tokens is one step on an H100/H200), one kv head and RANGE_ELEMENTS values of query
    heads (4 of 128, 16 of 32): a kernel that goes wrong past some token sees it, in a drawn sample of its programs
    and the last (never whole: more than verify.range_whole_work values)."""
    tokens, heads, kv_heads, *dims, max_position = shape
    return ((max(1, min(tokens, RANGE_ELEMENTS // (_heads(shape) * shape[3]))), *shape[1:]),
            (min(tokens, 64), heads, kv_heads, *dims, LONGEST_POSITION),
            (ENGINE_STEP_TOKENS, max(1, RANGE_ELEMENTS // (ENGINE_STEP_TOKENS * shape[3])), 1, *dims, max_position))


# (heads, kv_heads, head_dim, rot_dim, neox) of the families vLLM serves beyond the presets, from their config.json:
# Llama 2 7B and 13B (MHA), Llama 3 70B, Llama 3.1 405B, Llama 3.2 3B, Qwen2.5 1.5B, 3B, 7B (a group of 7 over 4 kv
# heads) and 14B, Gemma 2 2B, 9B and 27B, Phi-3 mini (MHA over 96), Phi-2 (0.4 of 80), ChatGLM3 (GPT-J style over
# half), GPT-J (GPT-J style, 64 of 256), GPT-NeoX-20B (0.25 of 96), Falcon-7B (71 heads on one kv head), Qwen3-Next
# (0.25 of 256). A kernel keyed to one model's sizes meets that model's here.
SERVED_HEADS = ((32, 32, 128, 128, 1), (40, 40, 128, 128, 1), (64, 8, 128, 128, 1), (128, 8, 128, 128, 1),
                (24, 8, 128, 128, 1), (12, 2, 128, 128, 1), (16, 2, 128, 128, 1), (28, 4, 128, 128, 1),
                (40, 8, 128, 128, 1), (8, 4, 256, 256, 1), (16, 8, 256, 256, 1), (32, 16, 128, 128, 1),
                (32, 32, 96, 96, 1), (32, 32, 80, 32, 1), (32, 2, 128, 64, 0), (16, 16, 256, 64, 0),
                (64, 64, 96, 24, 1), (71, 1, 64, 64, 1), (16, 2, 256, 64, 1))


def model_shapes(dims, rows):
    """q and k of a preset's attention: full rotary, NeoX style (every preset is), its whole position range; and five
    tokens of each SERVED_HEADS family over a 4099-row cache (their longest positions come with the range cases)."""
    head_dim = int(dims["head_dim"])
    preset = (rows, int(dims["num_heads"]), int(dims["num_kv_heads"]), head_dim, head_dim, 1, int(dims["max_seq_len"]))
    return (preset, *((5, *heads, 4099) for heads in SERVED_HEADS))


def random_shapes(rng):
    """Odd query heads over one kv head or as many, a head_dim whose half is prime, all or a prime part of it
    rotated, either style, a prime cache length."""
    heads = rng.choice((3, 5, 7))
    half = rng.choice(primes(17, 80))
    rot = 2 * rng.choice((half, rng.choice(primes(2, half))))
    return ((random_rows(rng), heads, rng.choice((1, heads)), 2 * half, rot, rng.randint(0, 1),
             rng.choice(primes(64, 10000))),)


def _dims(d: list) -> list[int]:
    return [int(v) for v in d]


def _flag(text: str) -> int:
    if text not in ("True", "False", "1", "0", "true", "false"):
        raise ValueError(f"not a recorded bool: {text!r}")
    return int(text in ("True", "1", "true"))


def _case(q: list[int], k: list[int], cache: list[int], neox: int, head_size: int | None = None):
    """(tokens, heads, kv_heads, head_dim, rot_dim, neox, max_position) from q and k [T, H, D] or [T, H * D]."""
    if len(q) == 2:
        if not head_size or q[1] % head_size or k[1] % head_size:
            raise ValueError(f"widths {q[1]}, {k[1]} are not multiples of head size {head_size}")
        q, k = [q[0], q[1] // head_size, head_size], [k[0], k[1] // head_size, head_size]
    return (q[0], q[1], k[1], q[2], cache[1], neox, cache[0])


def own_call(dims: list, concrete: list):
    """autotune::rotary_embedding(positions, query [T, H, D], key [T, KVH, D], cos_sin_cache [P, R], is_neox)."""
    return _case(_dims(dims[1]), _dims(dims[2]), _dims(dims[3]), _flag(concrete[4]))


def engine_call(dims: list, concrete: list):
    """vLLM's and SGLang's (positions, query [T, H*D] or [T, H, D], key, head_size, cos_sin_cache [P, R], is_neox)
    (vLLM 0.32's CPU trace: query [17, 256], key [17, 64], head_size 32, cache [2048, 32], True)."""
    return _case(_dims(dims[1]), _dims(dims[2]), _dims(dims[4]), _flag(concrete[5]), int(float(concrete[3])))


def flashinfer_call(dims: list, concrete: list):
    """sgl-kernel's apply_rope_pos_ids_cos_sin_cache(q [T, H, R], k [T, KVH, R], q_rope, k_rope, cos_sin_cache,
    pos_ids, interleave, ...): SGLang hands it only the rotated columns, so head_dim reads as rot_dim."""
    return _case(_dims(dims[0]), _dims(dims[1]), _dims(dims[4]), 1 - _flag(concrete[6]))


def _no_dims_rule(dims: list):
    raise ValueError("a rotary call's case needs its scalars (the style, a head size): map the op `like` one of "
                     "rotary_embedding's declared ops")


# One token's cos/sin row is loaded once per program and shared by its heads: more heads per program reuse it more
# (Liger-Kernel's rope takes all of a token's heads), fewer give a decode step's few tokens more programs.
SEARCH = SearchSpace(
    template="rotary_embedding.py.j2",
    knobs=(Knob("heads", tuple(h for h in POW2 if h <= 64), "heads of one token per program"), WARPS),
    configs=configs(("heads", "warps"), [
        (16, "auto"), (32, "auto"), (8, "auto"), (4, "auto"), (64, 16), (2, 4), (1, 4), (16, 8),
    ]),
    # a part-empty head tile in both styles, partial rotary with a pass-through tail, half-widths 48, 16 and 9
    sweep_shapes=lambda p: ((3, p["heads"] + 3, 1, 96, 96, 1, 50), (2, 1, p["heads"] + 1, 32, 18, 0, 9),
                            (2, 2, 1, 64, 16, 1, 7)),
)


TARGET = Target(
    name="rotary_embedding",
    summary="vLLM's RoPE: positions into a cos/sin cache, q [T, H, D] and k [T, KVH, D] together, NeoX or GPT-J "
            "style, partial rotary dim",
    reference=rotary_embedding,
    make_inputs=make_inputs,
    bytes_moved=bytes_moved,
    flops=flops,
    # (tokens, heads, kv_heads, head_dim, rot_dim, neox, max_position): Llama 3 8B at one decode token, a decode
    # step of 256 and a prefill chunk; ChatGLM3-6B (2 kv heads, GPT-J style over half of each head); Phi-2 (head_dim
    # 80, NeoX style over 32 of it)
    default_shapes=((1, 32, 8, 128, 128, 1, 8192), (256, 32, 8, 128, 128, 1, 8192), (2048, 32, 8, 128, 128, 1, 8192),
                    (64, 32, 2, 128, 64, 0, 8192), (64, 32, 32, 80, 32, 1, 2048)),
    # one token of a one-row cache; GPT-J style over odd heads, head_dim 96; a prime cache; a 131072-row cache at a
    # small rot_dim; GPT-J style over an odd half-width (9 pairs); GPT-NeoX's 0.25 of 96; head_dim 256 (Gemma); many
    # tokens of a tiny model; Llama 3.1 405B's 128 query heads (its 131072 positions: the range cases); Falcon-7B's
    # 71 on one kv head; Qwen3-Next's 0.25 of a 256 head_dim (192 columns passed through)
    edge_shapes=((1, 1, 1, 64, 64, 1, 1), (7, 3, 1, 96, 96, 0, 100), (3, 40, 8, 128, 128, 1, 4099),
                 (5, 4, 2, 64, 16, 1, 131072), (9, 6, 2, 72, 18, 0, 333), (4, 8, 8, 96, 24, 1, 2048),
                 (3, 8, 4, 256, 256, 1, 512), (512, 2, 1, 32, 32, 1, 8192), (3, 128, 8, 128, 128, 1, 8192),
                 (2, 71, 1, 64, 64, 1, 2048), (4, 16, 2, 256, 64, 1, 4096)),
    # q and k as views of the fused qkv projection (row stride (heads + 2 kv_heads) * head_dim, k at heads * head_dim),
    # as the built-in model and vLLM's layers pass them; dense (after Qwen3's per-head norm)
    layouts=("contiguous", "offset0", "qkv"),
    model_shapes=model_shapes,
    random_shapes=random_shapes,
    # query holds the case's dtype (argument 0 is the int64 positions)
    foreign_ops=(ForeignOp("autotune::rotary_embedding", case_arg=1, call_rule=own_call),
                 ForeignOp("_C::rotary_embedding", case_arg=1, call_rule=engine_call),
                 ForeignOp("sgl_kernel::rotary_embedding", case_arg=1, call_rule=engine_call),
                 ForeignOp("sgl_kernel::rotary_embedding_cpu", case_arg=1, call_rule=engine_call),
                 ForeignOp("sgl_kernel::apply_rope_pos_ids_cos_sin_cache", call_rule=flashinfer_call)),
    shape_from_dims=_no_dims_rule,
    search=SEARCH,
    example="rotary_embedding.py",
    dims=("tokens", "heads", "kv_heads", "head_dim", "rot_dim", "neox", "max_position"),
    cut_shape=cut_shape,
    range_cuts=range_cuts,
    input_elements=input_elements,
    output_elements=output_elements,
    advice=("No reduction: a token's pair j (columns j and j + rot_dim/2 with is_neox, 2j and 2j + 1 without) of every "
            "head turns by cache row positions[t]'s cos[j] = cos_sin_cache[p, j] and sin[j] = cos_sin_cache[p, "
            "rot_dim/2 + j]; columns rot_dim..head_dim are copied. A program per token (or per token and block of "
            "heads) loads that token's position and cache row once and reuses them for all its q and k heads.",
            "query and key are strided views (inside the fused qkv projection): index them by their token, head and "
            "dim strides, and write dense outputs; the cache is in query's dtype, computed on in float32.",),
    directions=("Explore the heads per program: all of a token's q and k heads in one program (most cache-row reuse) "
                "against fewer heads and more programs for a decode step's few tokens.",
                "Focus on memory traffic: each q and k element read once, the pairs loaded as two half-width blocks, "
                "the cache row read once per token."),
)
