"""rotary_embedding: rotate-half (GPT-NeoX style) RoPE on one of q or k, in the built-in model's layout.

x: [tokens, heads, head_dim]; cos, sin: [tokens, head_dim // 2] in fp32, already gathered at each
token's position. With x1, x2 the two halves of the last dim: out = [x1*cos - x2*sin, x2*cos + x1*sin],
fp32 math, output in x's dtype.

Tolerances: torch.testing's per-dtype defaults (base.DEFAULT_TOLERANCES), no override: correct Triton
kernels pass them in fp32, bf16 and fp16 on every case (tests/verify/test_correct.py), and the
checker's fp64-golden fallback accepts results that round differently but are no less accurate.
"""

import torch

from autotune.targets.base import ForeignOp, Target, activations, primes, random_rows, upcast
from autotune.targets.space import POW2, WARPS, Knob, SearchSpace, configs


def rotary_embedding(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    xf = upcast(x)
    x1, x2 = xf[..., :half], xf[..., half:]
    c, s = upcast(cos).unsqueeze(-2), upcast(sin).unsqueeze(-2)  # [T, 1, half] broadcast over heads
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).to(x.dtype)


def make_inputs(shape, dtype, gen, kind):
    tokens, _, head_dim = shape
    x = activations(shape, dtype, gen, kind)
    positions = torch.randint(0, 8192, (tokens,), generator=gen).float()
    inv_freq = 1.0 / (500000.0 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    angles = positions[:, None] * inv_freq[None, :]
    return x, angles.cos(), angles.sin()


def model_shapes(dims, rows):
    """q and k as the model's attention passes them: [tokens, heads, head_dim] and [tokens, kv_heads, head_dim]."""
    head_dim = int(dims["head_dim"])
    return ((rows, int(dims["num_heads"]), head_dim), (rows, int(dims["num_kv_heads"]), head_dim))


def random_shapes(rng):
    """An odd number of heads of a head_dim whose half is prime (so neither is a power of two)."""
    return ((random_rows(rng), rng.choice((3, 5, 7)), 2 * rng.choice(primes(17, 80))),)


def bytes_moved(shape, dtype):
    tokens, heads, head_dim = shape
    e = torch.empty((), dtype=dtype).element_size()
    return 2 * tokens * heads * head_dim * e + 2 * tokens * (head_dim // 2) * 4  # x in/out, fp32 cos/sin


def flops(shape, dtype):
    tokens, heads, head_dim = shape
    return 3 * tokens * heads * head_dim


# One token's cos/sin row is loaded once per program and shared by its heads: more heads per
# program reuse it more (Liger-Kernel's rope takes all of a token's heads), fewer give a decode
# step with one token more programs. First 16: two programs per token for 32 query heads.
SEARCH = SearchSpace(
    template="rotary_embedding.py.j2",
    knobs=(Knob("heads", tuple(h for h in POW2 if h <= 64), "heads of one token per program"), WARPS),
    configs=configs(("heads", "warps"), [
        (16, "auto"), (32, "auto"), (8, "auto"), (4, "auto"), (64, 16), (2, 4), (1, 4), (16, 8),
    ]),
    sweep_shapes=lambda p: ((3, p["heads"] + 3, 96), (2, 1, 32)),  # a part-empty head tile; half-widths 48 and 16
)


TARGET = Target(
    name="rotary_embedding",
    summary="rotate-half RoPE on x [tokens, heads, head_dim] with fp32 cos/sin [tokens, head_dim/2]",
    reference=rotary_embedding,
    make_inputs=make_inputs,
    bytes_moved=bytes_moved,
    flops=flops,
    default_shapes=((1, 32, 128), (64, 32, 128), (256, 8, 128)),
    edge_shapes=((1, 1, 64), (7, 3, 96), (3, 40, 128), (512, 2, 32)),
    # q and k are views of the fused qkv projection (row stride > heads * head_dim; k at an offset); cos and sin
    # the halves of one gathered cos_sin_cache row, as autotune's vLLM plugin passes them
    layouts=("contiguous", "offset0", "qkv_q", "qkv_k", "cos_sin_vllm"),
    model_shapes=model_shapes,
    random_shapes=random_shapes,
    # vLLM's _C::rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox): query [T, H*D]
    # at argument 1, D at argument 3 (vLLM 0.32's CPU trace: query [17, 256], head_size 32 -> (17, 8, 32))
    # vLLM's and SGLang's (positions, query [T, H*D], key, head_size, cos_sin_cache, is_neox); SGLang's GPU path
    # (sgl_kernel.apply_rope_with_cos_sin_cache_inplace) passes q already viewed as [T, H, D] first
    foreign_ops=(ForeignOp("_C::rotary_embedding", case_arg=1, head_size_arg=3),
                 ForeignOp("sgl_kernel::rotary_embedding", case_arg=1, head_size_arg=3),
                 ForeignOp("sgl_kernel::rotary_embedding_cpu", case_arg=1, head_size_arg=3),
                 ForeignOp("sgl_kernel::apply_rope_pos_ids_cos_sin_cache")),
    search=SEARCH,
    example="rotary_embedding.py",
    dims=("tokens", "heads", "head_dim"),
    advice=("No reduction: each output element needs x at j and at j +- head_dim/2 of the same head, and the "
            "token's cos and sin at j mod head_dim/2. A program per token (or per token and block of heads) "
            "loads that token's cos/sin row once and reuses it for every head it rotates.",
            "x is a strided view (q or k inside the fused qkv projection): index it by its token, head and dim "
            "strides, and write a dense output.",),
    directions=("Explore the heads per program: all of a token's heads in one program (most cos/sin reuse) "
                "against fewer heads and more programs for a decode step's few tokens.",
                "Focus on memory traffic: each x element read once, the two halves of a head loaded as two "
                "half-width blocks, cos/sin read once per token."),
)
