"""fused_moe: the routed experts of a mixture-of-experts layer as one op, in vLLM's argument layout.

hidden_states [T, H]; w13 [E, 2I, H] each expert's gate rows then up rows (vLLM's w1 / w13, transformers 5's
gate_up_proj); w2 [E, H, I] each expert's down projection; topk_weights [T, k] fp32 and topk_ids [T, k]
int32, the router's choice: k distinct experts per token and their weights. out[t] = sum over j of
topk_weights[t, j] * w2[e] @ (silu(gate) * up), gate, up = split(w13[e] @ hidden_states[t]), e =
topk_ids[t, j]; output [T, H] in hidden_states' dtype. The weights are applied as given: renormalising them
is the router's job (Qwen3-MoE's norm_topk_prob), not this op's.

The reference rounds where vLLM does: the gate/up projection, the SiLU-and-mul activation (its CUDA op rounds
the SiLU to the dtype before the product too) and each slot's weighted down projection are stored in the
activations' dtype (vLLM's intermediate caches 1 to 3), and the slots are summed in fp32 (moe_sum). A kernel that
keeps fp32 throughout is closer to the fp64 golden and passes through the golden fallback; one that rounds at the
same places matches it.

Case shape: (tokens, experts, top_k, hidden, intermediate). make_inputs routes a "hot" expert to about
three quarters of the tokens (it gets many, past any per-expert capacity), leaves about a quarter of the
experts without a token (their blocks must not be computed into anything), sends a token to the last
expert and one to expert 0 (every expert index is reached), and draws the weights as the top-k of a
softmax over all experts, in half the cases renormalised to sum to 1 as Mixtral's and Qwen3-MoE's routers give them
(a round-15 attacker's kernel dropped the last slot only then), in half in the router's order (largest first); they
differ per slot, so a kernel that ignores, squares or renormalises them is off. Decode-sized cases (a few tokens,
128 experts) leave most experts with zero or one token.

CPU plan (cut_shape): tokens are the independent work and are cut; the number of experts, top-k and every
expert index are never cut; hidden and intermediate are cut like a GEMM's N and K (more than one tile,
their ragged remainders kept); range cases (range_cuts) take each preset's hidden and intermediate further.

Tolerances: torch.testing's per-dtype defaults; the fp64-golden fallback accepts kernels that sum in
another order or keep the intermediates in fp32, judged against the worst of the reference's roundings placed
where such kernels place theirs (`reference_variants`).
"""

import functools

import torch
import torch.nn.functional as F

from autotune.targets.base import (
    ATOMIC_REDUCTIONS,
    ROWS_SHARE_ROUNDING,
    ForeignOp,
    OpClass,
    Target,
    activations,
    layer_scaled,
    upcast,
)
from autotune.targets.space import Knob, SearchSpace, configs


def fused_moe(hidden_states: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
              topk_ids: torch.Tensor) -> torch.Tensor:
    # vLLM's path stores in the model's dtype the gate/up GEMM's output, the SiLU before it multiplies up
    # (csrc/activation_kernels.cu) and a slot's weighted share before the top-k sum
    return experts(hidden_states, w13, w2, topk_weights, topk_ids, frozenset({"gate_up", "silu", "share"}))


def experts(hidden_states: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
            topk_ids: torch.Tensor, stores: frozenset[str]) -> torch.Tensor:
    """The routed experts with the intermediates named in `stores` rounded to the model's dtype ("gate_up", "silu",
    "share"); the activation between the two GEMMs always is."""
    dtype, inter = hidden_states.dtype, w2.shape[2]

    def stored(t: torch.Tensor, what: str) -> torch.Tensor:
        return upcast(t.to(dtype)) if what in stores else t

    x = upcast(hidden_states)
    out = torch.zeros_like(x)
    ids = topk_ids.long()
    for expert in torch.unique(ids).tolist():
        token, slot = (ids == expert).nonzero(as_tuple=True)
        gate_up = stored(x[token] @ upcast(w13[expert]).T, "gate_up")  # [n, 2I]
        act = upcast((stored(F.silu(gate_up[:, :inter]), "silu") * gate_up[:, inter:]).to(dtype))
        down = act @ upcast(w2[expert]).T  # [n, H]
        out.index_add_(0, token, stored(down * upcast(topk_weights)[token, slot, None], "share"))
    return out.to(dtype)


def route(tokens: int, experts: int, top_k: int, gen: torch.Generator) -> torch.Tensor:
    """topk_ids [tokens, top_k] int32: k distinct experts per token, a hot expert in about 3/4 of the tokens,
    about a quarter of the experts never chosen (when k leaves room), expert 0 and the last one reached."""
    hot = int(torch.randint(0, experts, (1,), generator=gen))
    order = [e for e in torch.randperm(experts, generator=gen).tolist() if e not in (hot, 0, experts - 1)]
    idle = set(order[:max(0, min(experts // 4, experts - top_k - 3))])
    allowed = torch.tensor([e for e in range(experts) if e not in idle])
    # each token's k distinct experts: the first k of its own random order of the allowed ones, drawn for a block of
    # tokens at a time (draws of at most 32768 values: a dry call's stand-ins make small tensors for real)
    block = max(1, (1 << 15) // len(allowed))
    picks = torch.cat([allowed[torch.rand((min(block, tokens - t), len(allowed)), generator=gen).argsort(dim=-1)
                               [:, :top_k]] for t in range(0, tokens, block)])
    missing = ~(picks == hot).any(dim=-1) & (torch.rand(tokens, generator=gen) < 0.75)
    picks[missing, -1] = hot
    for t, must in ((0, experts - 1), (tokens - 1, 0)):
        row = picks[t].tolist()
        if must not in row:
            free = [j for j, e in enumerate(row) if e not in (hot, 0, experts - 1)]
            picks[t, free[0] if free else -1] = must
    ids = picks.to(torch.int32)
    perm = torch.argsort(torch.rand(tokens, top_k, generator=gen), dim=-1)  # the hot expert in any slot
    return torch.gather(ids, 1, perm)


def make_inputs(shape, dtype, gen, kind):
    tokens, experts, top_k, hidden, inter = shape
    x = activations((tokens, hidden), dtype, gen, kind, spread=None, massive=False)  # layer_scaled spreads them
    if kind == "normal":
        x = layer_scaled(x, gen, smallest=4)  # its output is quadratic in x: 1/256 would fall under atol
    w13 = (torch.randn((experts, 2 * inter, hidden), generator=gen) * hidden ** -0.5).to(dtype)
    w2 = (torch.randn((experts, hidden, inter), generator=gen) * inter ** -0.5).to(dtype)
    ids = route(tokens, experts, top_k, gen)
    probs = torch.softmax(torch.randn((tokens, experts), generator=gen) * 2.0, dim=-1)
    weights = torch.gather(probs, 1, ids.long())  # a router's top-k probabilities
    if torch.rand((), generator=gen) < 0.5:  # renormalised to sum to 1, as Mixtral's and Qwen3-MoE's routers give them
        weights = weights / weights.sum(dim=-1, keepdim=True)
    if torch.rand((), generator=gen) < 0.5:  # in the router's order (torch.topk's: the largest weight first)
        order = torch.argsort(weights, dim=-1, descending=True)
        ids, weights = torch.gather(ids, 1, order), torch.gather(weights, 1, order)
    return x, w13, w2, weights.float(), ids


def _routes(shape) -> tuple[int, int]:
    tokens, experts, top_k, _, _ = shape
    return tokens * top_k, min(experts, tokens * top_k)  # (token-expert pairs, experts with a token at most)


def bytes_moved(shape, dtype):
    tokens, _, top_k, hidden, inter = shape
    pairs, active = _routes(shape)
    e = torch.empty((), dtype=dtype).element_size()
    # the weights of every expert that gets a token, read once; x in, out; the ids and weights
    return active * 3 * inter * hidden * e + 2 * tokens * hidden * e + 8 * pairs


def flops(shape, dtype):
    _, _, _, hidden, inter = shape
    pairs, _ = _routes(shape)
    return 2 * pairs * 3 * inter * hidden  # gate/up (2I x H) and down (H x I) per token-expert pair


def cut_shape(shape, max_rows, max_elements):
    """Tokens until the token-expert pairs are at most max_rows / 4 (at least 2 tokens): Qwen3-30B-A3B's top-8
    runs 8 tokens on the default plan (2 in its extra cases), Mixtral's top-2 32, so that its hot expert spans
    two 16-row blocks of the sorted tokens; experts and top_k never cut; hidden to at most 128 plus its
    remainder modulo 32 and intermediate to at most 64 plus its remainder (two or more tiles of 32 or 64, the
    last ragged). The experts' weights are inputs the interpreter does not loop over (an idle expert costs
    nothing): (512, 128, 8, 2048, 768) runs as (8, 128, 8, 128, 64), 3.1M weight values. The interpreter's
    cost is its programs: 25 tokens of 8 of 128 experts took the template 12 s of CPU per call, 8 tokens 3 s."""
    if max_rows is None or max_elements is None:  # on a GPU: no cut
        return tuple(shape)
    tokens, experts, top_k, hidden, inter = shape
    return (min(tokens, max(2, max_rows // 4 // top_k)), experts, top_k, min(hidden, 128 + hidden % 32),
            min(inter, 64 + inter % 32))


def range_cuts(shape):
    """A served shape's range cases, every expert and top-k whole in each: hidden and intermediate to two tiles of
    128 plus their remainders modulo 64 (the expert GEMMs' K loop and N tiles beyond the ordinary cut's), 4 tokens,
    a decode step (the routing still reaches experts all over the range; the ordinary cases have the hot expert's
    many rows); and the hidden size whole, the gate/up GEMM's reduction dimension (a fixed 512-channel loop drops
    3/4 of Qwen3-30B-A3B's 2048), the others small (the experts whole in the first): 2 tokens, twice top-k experts
    (at least 8), the intermediate to a tile plus its remainder. A sample of the programs runs, and a GEMM after a
    sampled sort of the tokens runs whole. A served step of more than 64 tokens also runs at 65 with every program
    (the others small: experts as in the second, hidden and intermediate a tile plus their remainders): a grid that
    serves tokens past the first 64 in whole blocks (a persistent kernel's rounded-down share) drops the 65th. The
    default plan runs it whole, in 4 s of CPU a dtype for the example at Qwen3-30B-A3B's top-8; larger counts
    (512 served) only as a sample, and the verdict says so (plan.notes.whole_note)."""
    tokens, experts, top_k, hidden, inter = shape
    few = min(experts, max(8, 2 * top_k))
    cuts: tuple[tuple[int, ...], ...] = (
        (min(tokens, 4), experts, top_k, min(hidden, 256 + hidden % 64), min(inter, 256 + inter % 64)),
        (min(tokens, 2), few, top_k, hidden, min(inter, 32 + inter % 32)))
    if tokens > 64:
        cuts += ((65, few, top_k, min(hidden, 32 + hidden % 32), min(inter, 32 + inter % 32)),)
    if tokens > 65:  # an expert's served load: the hot one takes about 3/4 of up to 512 tokens (a stop 48 attacker's
        # kernel dropped every pair past 128 an expert, as a static capacity would; no case had more than 62)
        cuts += ((min(tokens, 512), few, top_k, min(hidden, 32 + hidden % 32), min(inter, 32 + inter % 32)),)
    return cuts


def span_cuts(shape):
    """The intermediate size whole (the gate/up GEMM's N, twice it, and the down GEMM's K) and the hidden size whole
    (the down GEMM's N), each with the other a tile plus its remainder, at a decode step of one token routed to
    top-k experts of top-k (the fewest row blocks): every served value with every program, so a grid capped along
    either with a rounded-down share of the tiles shows where it is served."""
    _, _, top_k, hidden, inter = shape
    return ((1, top_k, top_k, min(hidden, 32 + hidden % 32), inter),
            (1, top_k, top_k, hidden, min(inter, 32 + inter % 32)))


def model_shapes(dims, rows):
    """Each MoE preset's experts at a drawn token count and at a decode step of 4 tokens."""
    moe = dims.get("moe")
    if not moe:
        return ()
    e, k, i, h = int(moe["num_experts"]), int(moe["top_k"]), int(moe["intermediate_size"]), int(dims["hidden_size"])
    return (rows, e, k, h, i), (4, e, k, h, i)


def input_elements(shape) -> int:
    tokens, experts, top_k, hidden, inter = shape
    return tokens * hidden + 3 * experts * inter * hidden + 2 * tokens * top_k


def output_elements(shape) -> int:
    return shape[0] * shape[3]


def _shape_from_dims(dims: list):
    """[hidden_states [T, H], w13 [E, 2I, H], w2 [E, H, I], topk_weights [T, k], topk_ids [T, k], ...] ->
    (T, E, k, H, I): ours and vLLM's fused-experts ops take these five first, in this order."""
    x, w13, w2, weights = dims[0], dims[1], dims[2], dims[3]
    return x[0], w13[0], weights[1], x[1], w2[2]


# vLLM's Triton fused MoE (fused_moe_kernel) as knobs: BLOCK_SIZE_M rows of the expert-sorted tokens per
# program (16 at decode, where an expert gets a token or two; 64-128 in prefill), BLOCK_SIZE_N/K the GEMM
# tile, GROUP_SIZE_M the L2-friendly launch order. First: vLLM's default for a small batch (its
# get_default_config: M <= E -> 16, 32, 64, 1).
SEARCH = SearchSpace(
    template="fused_moe.py.j2",
    knobs=(
        Knob("block_m", (16, 32, 64, 128), "expert-sorted token rows per program (each expert's padded to it)"),
        Knob("block_n", (32, 64, 128, 256), "output columns per program"),
        Knob("block_k", (32, 64, 128, 256), "reduction step"),
        Knob("group_m", (1, 8, 16, 32), "row blocks walking the column blocks together (L2 reuse)"),
        Knob("warps", (2, 4, 8), "warps per program"),
        Knob("stages", (2, 3, 4, 5), "software-pipelining depth of the K loop"),
    ),
    configs=configs(("block_m", "block_n", "block_k", "group_m", "warps", "stages"), [
        (16, 32, 64, 1, 4, 3), (16, 64, 128, 1, 4, 3), (32, 64, 64, 8, 4, 3), (64, 64, 32, 8, 4, 4),
        (64, 128, 64, 16, 8, 3), (128, 128, 64, 32, 8, 4), (16, 128, 128, 1, 4, 4), (32, 128, 64, 8, 4, 3),
    ]),
    # 2 experts, both on every token: each expert's sorted rows over two row blocks, the last part-empty; hidden and
    # intermediate over two column and two reduction blocks, ragged
    sweep_shapes=lambda p: ((p["block_m"] + 3, 2, 2, max(p["block_n"], p["block_k"]) + 7,
                             max(p["block_n"], p["block_k"]) + 5),),
    own_sweep=True,
)


TARGET = Target(
    name="fused_moe",
    atomic_tolerance=ATOMIC_REDUCTIONS,  # split-K / the top-k combine by tl.atomic_add: repeats may differ
    tolerances=ROWS_SHARE_ROUNDING,  # each token's activation rounded once, as vLLM does, in all its outputs
    # the same sums rounded elsewhere, as correct kernels do: SiLU and up multiplied before one rounding (and the
    # slots' shares summed in fp32); the activation fused into the gate/up GEMM's epilogue
    reference_variants=(functools.partial(experts, stores=frozenset({"gate_up"})),
                        functools.partial(experts, stores=frozenset())),
    summary="the routed experts of a MoE layer: top-k expert SwiGLU MLPs per token, weighted and summed",
    reference=fused_moe,
    make_inputs=make_inputs,
    bytes_moved=bytes_moved,
    flops=flops,
    # (tokens, experts, top_k, hidden, intermediate): Qwen3-30B-A3B at a decode step of 4 and a 512-token chunk;
    # Mixtral 8x7B at 64 tokens
    default_shapes=((4, 128, 8, 2048, 768), (512, 128, 8, 2048, 768), (64, 8, 2, 4096, 14336)),
    # one token; top-1; as many experts as top-k (every expert busy); ragged hidden / intermediate; the tiny preset
    edge_shapes=((1, 8, 2, 64, 32), (5, 4, 1, 96, 40), (3, 4, 4, 72, 24), (9, 16, 4, 128, 64)),
    foreign_ops=(
        # vLLM's fused-experts torch op (vllm/model_executor/layers/fused_moe/fused_moe.py, 0.32: `fused_experts`;
        # before, `outplace_` and `inplace_fused_experts`): hidden_states, w1 [E, 2I, H], w2 [E, H, I], topk_weights,
        # topk_ids first, then activation and quantization flags
        ForeignOp("vllm::fused_experts"),
        ForeignOp("vllm::outplace_fused_experts"),
        ForeignOp("vllm::inplace_fused_experts"),
        # SGLang's: the same five first (sglang::*_fused_experts on a GPU, sgl-kernel's fused_experts_cpu on a CPU)
        ForeignOp("sglang::outplace_fused_experts"),
        ForeignOp("sglang::inplace_fused_experts"),
        ForeignOp("sgl_kernel::fused_experts_cpu"),
    ),
    shape_from_dims=_shape_from_dims,
    # a decode step reads each chosen expert's weights for a token or two (memory); a prefill chunk reuses each
    # weight tile over many sorted tokens (tensor cores): the floor says which
    op_class=OpClass.MIXED,
    advice=("Group the token-expert pairs by expert first (a sort or a count-and-scatter of topk_ids, as vLLM's "
            "moe_align_block_size does, each expert's rows padded to the row block), so that each program multiplies "
            "a block of one expert's rows by that expert's weight tiles with `tl.dot`: an expert with no token costs "
            "nothing, and a hot expert's many rows share each weight tile.",
            "w13 holds each expert's gate rows [0, I) then its up rows [I, 2I): silu(gate) * up, with gate_up and the "
            "activation each stored in the model's dtype as the reference does, then the down projection by w2, "
            "weighted by the pair's topk_weight and summed over the token's top_k experts in float32."),
    search=SEARCH,
    dims=("tokens", "experts", "top_k", "hidden", "intermediate"),
    example="fused_moe.py",
    cut_shape=cut_shape,
    range_cuts=range_cuts,
    span_cuts=span_cuts,
    input_elements=input_elements,
    output_elements=output_elements,
    model_shapes=model_shapes,
)
