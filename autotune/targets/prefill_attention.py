"""prefill_attention: causal attention of packed prompt chunks against their KV-cache slots, grouped-query heads.

q [T, heads, D] holds the query rows of C chunks back to back: chunk c is rows cu_seqlens[c] ..
cu_seqlens[c + 1] (int64 [C + 1], cu_seqlens[0] = 0, cu_seqlens[C] = T), the tokens at positions
starts[c], starts[c] + 1, ... of the sequence in cache slot slots[c] (chunked prefill: a chunk may
start after a prefix already in the cache). k_cache, v_cache [slots, kv_heads, L, D] already hold the
chunk's own keys. Query row i of chunk c attends to cache positions 0 .. starts[c] + i (causal), query
head h to kv head h // (heads // kv_heads). max_query_len = the longest chunk. fp32 math, output
[T, heads, D] in q's dtype. The built-in model ran this for every multi-token segment of a step before it took
vLLM's paged cache and paged_attention (see decode_attention: no engine calls this target now).

Case shape: (num_chunks, num_heads, num_kv_heads, head_dim, max_query_len[, max_context]). make_inputs draws
each chunk's length in [1, max_query_len] (one gets max_query_len; the lengths depend on the shape alone,
so that the total T does too) and its start in [0, max_context - max_query_len] (max_context defaults to
twice max_query_len; when given, the longest chunk ends at it: its last query sees the whole context, as the
last chunk of a long prompt does), gives the cache 2 more slots and 3 more positions than needed, all filled
with finite garbage, and shuffles the slots.

Tolerances: torch.testing's per-dtype defaults, no override: the search agent's kernel (fp32 products
and sums, online softmax) passes them in fp32, bf16 and fp16 on every case, and the checker's
fp64-golden fallback accepts results that sum in another order.
"""

import torch

from autotune.targets.base import ATTENTION_SCALES, OpClass, Target, activations, grouped_heads, upcast
from autotune.targets.space import Knob, SearchSpace, configs


def prefill_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor,
                      starts: torch.Tensor, cu_seqlens: torch.Tensor, scale: float, max_query_len: int
                      ) -> torch.Tensor:
    _, heads, d = q.shape
    kv_heads = k_cache.shape[1]
    group = heads // kv_heads
    out = torch.empty_like(q)
    bounds, first = cu_seqlens.tolist(), starts.tolist()
    for c, slot in enumerate(slots.tolist()):
        r0, r1, start = bounds[c], bounds[c + 1], first[c]
        n, ctx = r1 - r0, first[c] + r1 - r0
        qg = upcast(q[r0:r1]).reshape(n, kv_heads, group, d).permute(1, 2, 0, 3).reshape(kv_heads, group * n, d)
        k, v = upcast(k_cache[slot, :, :ctx]), upcast(v_cache[slot, :, :ctx])  # [kv_heads, ctx, D]
        scores = (torch.matmul(qg, k.transpose(-1, -2)) * scale).view(heads, n, ctx)
        query_pos = torch.arange(start, ctx, device=q.device)
        future = torch.arange(ctx, device=q.device)[None, :] > query_pos[:, None]  # [n, ctx]
        probs = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
        o = torch.matmul(probs.reshape(kv_heads, group * n, ctx), v)  # [kv_heads, group * n, D]
        out[r0:r1] = o.view(kv_heads, group, n, d).permute(2, 0, 1, 3).reshape(n, heads, d).to(q.dtype)
    return out


def _context(shape) -> int:
    """The longest context a chunk's last query sees: the optional sixth dim, else twice the longest chunk."""
    return shape[5] if len(shape) > 5 else 2 * shape[4]


def make_inputs(shape, dtype, gen, kind):
    chunks, heads, kv_heads, head_dim, max_query_len = shape[:5]
    grouped_heads(heads, kv_heads)
    context = _context(shape)
    # the chunk lengths set q's shape, which must not change when the checker refills the same buffers with
    # new values: they come from the shape alone; the starts, slots and values from `gen`
    by_shape = torch.Generator().manual_seed(chunks * 1_000_003 + max_query_len)
    lengths = torch.randint(1, max_query_len + 1, (chunks,), generator=by_shape)
    longest = torch.randint(0, chunks, (1,), generator=by_shape)
    lengths[longest] = max_query_len
    starts = torch.randint(0, context - max_query_len + 1, (chunks,), generator=gen)
    if len(shape) > 5:  # the longest chunk ends at the end of the context: its last query sees all of it
        starts[longest] = context - max_query_len
    cu_seqlens = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    q = activations((int(cu_seqlens[-1]), heads, head_dim), dtype, gen, kind)
    cache_shape = (chunks + 2, kv_heads, context + 3, head_dim)
    # "large" scales the keys too: logits in the tens of thousands overflow exp without the max subtraction
    k_cache = activations(cache_shape, dtype, gen, "large" if kind == "large" else "normal")
    v_cache = activations(cache_shape, dtype, gen, "normal")
    slots = torch.randperm(chunks + 2, generator=gen)[:chunks]
    return q, k_cache, v_cache, slots, starts, cu_seqlens, head_dim ** -0.5, max_query_len


def _tokens_and_context(shape) -> tuple[int, int]:
    chunks, _, _, _, max_query_len = shape[:5]
    # about half the longest chunk each, starting about half way into the context
    return chunks * (max_query_len // 2 + 1), _context(shape) // 2


def bytes_moved(shape, dtype):
    chunks, heads, kv_heads, head_dim, _ = shape[:5]
    tokens, context = _tokens_and_context(shape)
    e = torch.empty((), dtype=dtype).element_size()
    return 2 * tokens * heads * head_dim * e + 2 * chunks * kv_heads * context * head_dim * e


def flops(shape, dtype):
    _, heads, _, head_dim, _ = shape[:5]
    tokens, context = _tokens_and_context(shape)
    # QK^T and PV (2 flops per multiply-add each) over a mean causal context of about 3/4 max_query_len
    return 3 * tokens * heads * context * head_dim


def cut_shape(shape, max_rows, max_elements):
    """At most max_rows / 128 chunks (2 at least: they differ in length and start), 2 kv heads with groups of
    at most 2 query heads (a wrong head mapping still shows), head_dim kept; chunks of at most
    max_elements / 4096 tokens (at least 16): 64 with the checker's defaults, 16 in the extra cases.
    (With 4 chunks of 128 tokens and groups of 4 one fp16 case ran past the 120 s limit on 2 busy cores.)"""
    if max_rows is None or max_elements is None:  # on a GPU: no cut
        return tuple(shape)
    chunks, heads, kv_heads, head_dim, max_query_len = shape[:5]  # a long context is the range cases' business
    group = min(heads // kv_heads, 2)
    kv = min(kv_heads, 2)
    chunks = min(chunks, max(2, max_rows // 128))
    return chunks, kv * group, kv, head_dim, min(max_query_len, max(16, max_elements // 4096))


def model_shapes(dims, rows):
    """What a preset serves: a chunk of up to `rows` tokens at the end of the longest context it serves."""
    return ((1, int(dims["num_heads"]), int(dims["num_kv_heads"]), int(dims["head_dim"]),
             max(1, min(rows, int(dims["max_seq_len"]))), int(dims["max_seq_len"])),)


def range_cuts(shape):
    """One chunk of at most 65 query rows (two row blocks of 32, and one more) at the end of the shape's whole
    context, every head, kv head and head_dim position: the reference over 2,048 rows against 8,192 keys in 32
    heads (137 GFLOP, several GB of scores in fp64) is not for a CPU; rows are independent work. And a chunk of more
    than 65 rows whole, as a prompt's first chunk (its context is its own rows), on one kv head and its query group:
    a kernel that switches at a chunk length meets the served one (sampled: 2048 rows against 2048 keys is the
    reference's 8.6 GFLOP in fp64, seconds)."""
    heads, kv_heads, head_dim, max_query_len = shape[1:5]
    rows = min(max_query_len, 65)
    cuts: tuple[tuple[int, ...], ...] = ((1, heads, kv_heads, head_dim, rows, max(_context(shape), rows)),)
    if max_query_len > 65:
        cuts += ((1, heads // kv_heads, 1, head_dim, max_query_len, max_query_len),)
    return cuts


def input_elements(shape) -> int:
    """q (at most max_query_len rows per chunk), the two caches (2 slots more, twice the chunk plus 3 positions,
    see make_inputs), slots, starts and cu_seqlens: the cache is larger than the case's output."""
    chunks, heads, kv_heads, head_dim, max_query_len = shape[:5]
    cache = (chunks + 2) * kv_heads * (_context(shape) + 3) * head_dim
    return chunks * max_query_len * heads * head_dim + 2 * cache + 3 * chunks + 1


def output_elements(shape) -> int:
    chunks, heads, _, head_dim, max_query_len = shape[:5]
    return chunks * max_query_len * heads * head_dim


# Flash-attention forward tiles (the Triton tutorial's 64-128 square tiles, 4-8 warps); small query blocks for
# short chunks, where a 128-row block would be mostly masked. First: 64 x 64 on 4 warps.
SEARCH = SearchSpace(
    template="prefill_attention.py.j2",
    knobs=(
        Knob("block_m", (16, 32, 64, 128), "query rows per program"),
        Knob("block_n", (16, 32, 64, 128), "keys per iteration of the causal loop"),
        Knob("warps", (2, 4, 8), "warps per program"),
        Knob("stages", (1, 2, 3, 4), "software-pipelining depth of the key loop"),
    ),
    configs=configs(("block_m", "block_n", "warps", "stages"), [
        (64, 64, 4, 2), (128, 64, 8, 3), (64, 32, 4, 2), (32, 64, 4, 2), (128, 128, 8, 2), (16, 32, 2, 1),
        (64, 128, 4, 3), (128, 32, 4, 4),
    ]),
    # over two query or key blocks, the last ragged; ragged head_dim 48
    sweep_shapes=lambda p: ((2, 4, 2, 48, max(p["block_m"], p["block_n"]) + 3),),
    own_sweep=True,
)


TARGET = Target(
    name="prefill_attention",
    scalar_values={"scale": ATTENTION_SCALES},  # off head_dim ** -0.5 too (Gemma 2)
    summary="causal GQA attention of packed prompt chunks (cu_seqlens, per-chunk start) over their KV-cache slots",
    reference=prefill_attention,
    make_inputs=make_inputs,
    bytes_moved=bytes_moved,
    flops=flops,
    # (chunks, heads, kv_heads, head_dim, max_query_len): Llama 3 8B, 4 prompts of 512, 1 chunk of 2048
    default_shapes=((4, 32, 8, 128, 512), (1, 32, 8, 128, 2048)),
    # one token of the tiny model; MHA; MQA; head_dim not a power of two, ragged chunks
    edge_shapes=((1, 4, 2, 32, 1), (3, 4, 4, 64, 37), (2, 8, 1, 128, 20), (3, 12, 4, 96, 23)),
    # no foreign ops: vLLM's attention ops take a paged cache and mix decode and prefill rows (see decode_attention)
    # autotune::prefill_attention(q [T, H, D], k_cache [S, KVH, L, D], slots [C], ...): C chunks of T / C rows
    shape_from_dims=lambda dims: (dims[3][0], dims[0][1], dims[1][1], dims[0][2],
                                  max(1, dims[0][0] // max(1, dims[3][0]))),
    op_class=OpClass.COMPUTE_BOUND,  # each key tile is reused by a block of query rows: tensor-core bound
    search=SEARCH,
    example="prefill_attention.py",
    dims=("chunks", "heads", "kv_heads", "head_dim", "max_query_len", "max_context"),
    advice=("FlashAttention's forward: a block of query rows per program, a loop over key blocks up to the "
            "causal limit only (the chunk's start position plus the row), an online softmax in float32, and "
            "`tl.dot` for q @ k^T and p @ v with the 16-bit tiles fed straight in (p cast to v's dtype).",),
    cut_shape=cut_shape,
    range_cuts=range_cuts,
    range_relax=(5,),  # the longest context in one range case per value
    model_shapes=model_shapes,
    input_elements=input_elements,
    output_elements=output_elements,
)
