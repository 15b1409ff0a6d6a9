"""decode_attention: one query token per sequence against its slot of the KV cache, grouped-query heads.

q [B, heads, D]; k_cache, v_cache [slots, kv_heads, L, D], the per-layer slot cache the built-in model kept
before it took vLLM's paged cache (it calls paged_attention now: no engine calls this target; kept for the
kernels, cheats and ports written for it until it is retired into paged attention); slots [B] (int64) the cache
slot of each sequence; context_lens [B] (int64) how many cached positions each sequence attends to (its
position + 1, this step's key included); max_context = max(context_lens). Query head h reads kv head
h // (heads // kv_heads).
out[b, h] = softmax(q[b, h] . K[slot_b, kvh, :ctx_b]^T * scale) @ V[slot_b, kvh, :ctx_b], fp32 math,
output [B, heads, D] in q's dtype. Positions at and beyond ctx_b hold stale values (another sequence's,
an earlier request's): they must not count.

Case shape: (num_seqs, num_heads, num_kv_heads, head_dim, max_context). make_inputs draws each
sequence's context length in [1, max_context] (one sequence gets max_context), gives the cache 3 more
positions and 2 more slots than needed, all filled with finite garbage, and shuffles the slots.

Tolerances: torch.testing's per-dtype defaults, no override: the search agent's split-K kernel (fp32
products and sums, online softmax) passes them in fp32, bf16 and fp16 on every case (tests/verify/
test_correct.py), and the checker's fp64-golden fallback accepts results that sum in another order.
"""

import torch

from autotune.targets.base import ATTENTION_SCALES, OpClass, Target, activations, grouped_heads, upcast
from autotune.targets.space import Knob, SearchSpace, configs


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor,
                     context_lens: torch.Tensor, scale: float, max_context: int) -> torch.Tensor:
    b, heads, d = q.shape
    kv_heads = k_cache.shape[1]
    group = heads // kv_heads
    k = upcast(k_cache[slots, :, :max_context])  # [B, kv_heads, L, D]
    v = upcast(v_cache[slots, :, :max_context])
    scores = torch.matmul(upcast(q).reshape(b, kv_heads, group, d), k.transpose(-1, -2)) * scale  # [B, kvh, g, L]
    padding = torch.arange(max_context, device=q.device)[None, :] >= context_lens[:, None]  # [B, L]
    probs = torch.softmax(scores.masked_fill(padding[:, None, None, :], float("-inf")), dim=-1)
    return torch.matmul(probs, v).reshape(b, heads, d).to(q.dtype)


def make_inputs(shape, dtype, gen, kind):
    seqs, heads, kv_heads, head_dim, max_context = shape
    grouped_heads(heads, kv_heads)
    q = activations((seqs, heads, head_dim), dtype, gen, kind)
    cache_shape = (seqs + 2, kv_heads, max_context + 3, head_dim)
    # "large" scales the keys too: logits in the tens of thousands overflow exp without the max subtraction
    k_cache = activations(cache_shape, dtype, gen, "large" if kind == "large" else "normal")
    v_cache = activations(cache_shape, dtype, gen, "normal")
    slots = torch.randperm(seqs + 2, generator=gen)[:seqs]
    context_lens = torch.randint(1, max_context + 1, (seqs,), generator=gen)
    context_lens[torch.randint(0, seqs, (1,), generator=gen)] = max_context
    return q, k_cache, v_cache, slots, context_lens, head_dim ** -0.5, max_context


def bytes_moved(shape, dtype):
    seqs, heads, kv_heads, head_dim, max_context = shape
    e = torch.empty((), dtype=dtype).element_size()
    # q in, out; K and V of each sequence read once (for a mean context of about half the longest)
    return 2 * seqs * heads * head_dim * e + 2 * seqs * kv_heads * (max_context // 2 + 1) * head_dim * e + 16 * seqs


def flops(shape, dtype):
    seqs, heads, kv_heads, head_dim, max_context = shape
    return 4 * seqs * heads * (max_context // 2 + 1) * head_dim  # QK^T and PV, multiply-adds


def cut_shape(shape, max_rows, max_elements):
    """At most max_rows / 64 sequences (2 at least: their lengths differ) and 2 kv heads (two, so that a wrong
    head mapping shows) with their whole query group (the GQA ratio is kept), head_dim kept; the context
    shrinks until the keys read hold max_elements / 4 values. With the checker's defaults: 4 sequences of
    up to 64 positions (2 of up to 32 in the extra cases); 69 cases of the search agent's kernel in 49 s
    on 2 busy cores with 8 sequences of 128, too slow for every candidate of a run."""
    if max_rows is None or max_elements is None:  # on a GPU: no cut
        return tuple(shape)
    seqs, heads, kv_heads, head_dim, max_context = shape
    seqs = min(seqs, max(2, max_rows // 64))
    group = heads // kv_heads
    kv = min(kv_heads, 2)
    context = min(max_context, max(16, max_elements // (4 * seqs * kv * head_dim)))
    return seqs, kv * group, kv, head_dim, context


def model_shapes(dims, rows):
    """What a preset serves: a decode batch of `rows` sequences over its heads and the longest context it serves."""
    return ((max(1, min(rows, 8)), int(dims["num_heads"]), int(dims["num_kv_heads"]), int(dims["head_dim"]),
             int(dims["max_seq_len"])),)


def range_cuts(shape):
    """One sequence (it gets the longest context), every head, kv head and head_dim position, the whole context;
    and a served batch of more than 8 sequences whole with that context, on one kv head and its query group (a
    kernel's scratch or split count sized by sequences x context goes wrong only when both are large; the cache
    of 64 sequences of 4096 positions holds 34M values a tensor). Sampled, so its cost is the inputs'. The
    presets' batches of 8 at their longest context stay out: the first cut holds that context once."""
    seqs, heads, kv_heads, head_dim, max_context = shape
    cuts: tuple[tuple[int, ...], ...] = ((1, heads, kv_heads, head_dim, max_context),)
    if seqs > 8:
        cuts += ((seqs, heads // kv_heads, 1, head_dim, max_context),)
    return cuts


def input_elements(shape) -> int:
    """q, the two caches (2 slots and 3 positions more than the case needs, see make_inputs), slots and lengths:
    the cache is far larger than the case's output."""
    seqs, heads, kv_heads, head_dim, max_context = shape
    return seqs * heads * head_dim + 2 * (seqs + 2) * kv_heads * (max_context + 3) * head_dim + 2 * seqs


def output_elements(shape) -> int:
    seqs, heads, _, head_dim, _ = shape
    return seqs * heads * head_dim


# A decode step has one program per (sequence, kv head): 8 x 8 = 64 for Llama 3 8B at batch 8, too few to fill
# an H100's 132 SMs, so split-K (flash-decoding) spreads long contexts over more programs. First: 64 keys a
# step, no split (the safe one, no merge kernel); then splits for small batches and long contexts, bigger and
# smaller key blocks, and the pipelining depth.
SEARCH = SearchSpace(
    template="decode_attention.py.j2",
    knobs=(
        Knob("block_n", (16, 32, 64, 128, 256), "keys per iteration of the context loop"),
        Knob("splits", (1, 2, 4, 8, 16),
             "programs sharing one sequence's context (split-K), merged by a second kernel"),
        Knob("warps", (1, 2, 4, 8), "warps per program"),
        Knob("stages", (1, 2, 3, 4), "software-pipelining depth of the key loop"),
    ),
    configs=configs(("block_n", "splits", "warps", "stages"), [
        (64, 1, 4, 2), (64, 4, 4, 2), (128, 1, 4, 2), (32, 1, 4, 2), (64, 8, 4, 3), (128, 2, 8, 3),
        (16, 1, 2, 1), (256, 4, 8, 2), (64, 16, 4, 2),
    ]),
    # contexts over two key blocks (splits part-empty), ragged head_dim 48
    sweep_shapes=lambda p: ((2, 4, 2, 48, p["block_n"] + 5),),
    own_sweep=True,
)


TARGET = Target(
    name="decode_attention",
    scalar_values={"scale": ATTENTION_SCALES},  # off head_dim ** -0.5 too (Gemma 2)
    summary="GQA decode attention: one query token per sequence over its KV-cache slot, variable context lengths",
    reference=decode_attention,
    make_inputs=make_inputs,
    bytes_moved=bytes_moved,
    flops=flops,
    # (seqs, heads, kv_heads, head_dim, max_context): Llama 3 8B and 3.2 1B at batch 8 and 64
    default_shapes=((8, 32, 8, 128, 1024), (64, 32, 8, 128, 4096)),
    # one sequence of context 1 (the tiny model's head_dim); MHA; MQA; head_dim not a power of two, with a
    # context of more than one 64-key block
    edge_shapes=((1, 4, 2, 32, 1), (3, 4, 4, 64, 37), (5, 8, 1, 128, 100), (2, 12, 4, 96, 70)),
    # no foreign ops: vLLM's unified_attention_with_output and cpu_attention_with_kv_cache take a paged cache of
    # blocks and mix decode and prefill rows in one call, not this case's layout
    # autotune::decode_attention(q [B, H, D], k_cache [S, KVH, L, D], ...): the cache length stands for the
    # longest context (max_context is a scalar, not in the profiler's input dims)
    shape_from_dims=lambda dims: (dims[0][0], dims[0][1], dims[1][1], dims[0][2], dims[1][2]),
    # one query row per (sequence, head) against the whole context: about 1 FLOP per byte of KV read, so the
    # cache read bounds it like a memory-bound op, while the head group's dot products are small GEMMs
    op_class=OpClass.MIXED,
    search=SEARCH,
    example="decode_attention.py",
    dims=("seqs", "heads", "kv_heads", "head_dim", "max_context"),
    advice=("One program per (sequence, kv head) serves the heads // kv_heads query heads that share it (GQA): "
            "load each key/value block once for the whole group, with an online softmax (running max and sum) "
            "in float32.",
            "Read only each sequence's own context length from its cache slot; the rest of the slot is garbage.",),
    cut_shape=cut_shape,
    range_cuts=range_cuts,
    range_relax=(4,),  # the longest context in one range case per value
    model_shapes=model_shapes,
    input_elements=input_elements,
    output_elements=output_elements,
)
