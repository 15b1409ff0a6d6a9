"""paged_attention: vLLM's unified attention: varlen queries of many sequences, mixed prefill and decode rows,
over a paged KV cache with a block table; causal, optional sliding window, grouped-query heads.

q [T, heads, D] holds the query rows of S sequences back to back: sequence s is rows cu_seqlens_q[s] ..
cu_seqlens_q[s + 1] (int32 [S + 1], vLLM's query_start_loc), n_s rows (1 for a decode, more for a prefill
chunk). k_cache, v_cache [num_blocks, block_size, kv_heads, D] (the layout of vLLM's Triton backend) already
hold every sequence's keys, this step's included: sequence s has seq_lens[s] (int32 [S], vLLM's seqused_k)
positions, position p in block block_table[s, p // block_size] (int32 [S, max_blocks]) at offset
p % block_size. Query row i of sequence s sits at position seq_lens[s] - n_s + i and attends to the positions
at or before it (causal), only the last `window` of them when window > 0 (vLLM's window_size = (window - 1, 0);
Mistral's sliding window); query head h reads kv head h // (heads // kv_heads). fp32 math, output [T, heads, D]
in q's dtype. max_query_len and max_seq_len are the longest n_s and seq_lens[s] (vLLM passes both).

Case shape: (num_seqs, num_heads, num_kv_heads, head_dim, block_size, max_query_len, max_context).
make_inputs gives one sequence max_query_len query rows and another max_context positions, about half of the
rest a single row (decodes), draws the other lengths, gives each sequence its blocks from a shuffled pool
(never in order) with 3 spare blocks of finite garbage, fills the block table's unused entries with other
sequences' blocks (a kernel that reads past a sequence's length reads real-looking stale keys), and gives about
half of the shapes a sliding window shorter than the longest context (from the shape, as the lengths are).

CPU plan (cut_shape): the number of sequences and a prefill's query rows are the independent work and are cut;
heads, kv_heads, the GQA group (odd ones included: Qwen2.5-0.5B's 7), head_dim and block_size are never cut;
the context is cut only where kv_heads x context exceeds what the interpreter walks in seconds, and every
preset's longest context runs whole on one kv head (model_shapes): an 8192-long context through a 16-token
block table of 512 shuffled entries.

Tolerances: torch.testing's per-dtype defaults; the fp64-golden fallback accepts other summation orders.
"""

import bisect
import itertools

import torch

from autotune.targets.base import (
    ATTENTION_SCALES,
    RANGE_ELEMENTS,
    ROWS_SHARE_ROUNDING,
    ForeignOp,
    OpClass,
    Target,
    activations,
    grouped_heads,
    upcast,
)
from autotune.targets.space import Knob, SearchSpace, configs


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cu_seqlens_q: torch.Tensor,
                    seq_lens: torch.Tensor, block_table: torch.Tensor, scale: float, window: int, max_query_len: int,
                    max_seq_len: int) -> torch.Tensor:
    out = torch.empty_like(q)
    bounds, lengths = cu_seqlens_q.tolist(), seq_lens.tolist()
    rows = [bounds[s + 1] - bounds[s] for s in range(len(lengths))]
    decodes = [s for s, n in enumerate(rows) if n == 1]
    for first in range(0, len(decodes), 64):  # a decode step's many sequences, 64 at a time, not one by one
        some = decodes[first:first + 64]
        _decodes(q, k_cache, v_cache, [bounds[s] for s in some], seq_lens[some], block_table[some], scale, window, out)
    block_size, kv_heads, d = k_cache.shape[1], k_cache.shape[2], q.shape[2]
    group = q.shape[1] // kv_heads
    for s, ctx in enumerate(lengths):
        r0, n = bounds[s], rows[s]
        if n <= 1:
            continue
        blocks = block_table[s, :(ctx + block_size - 1) // block_size].long()
        k = upcast(k_cache[blocks].reshape(-1, kv_heads, d)[:ctx]).permute(1, 0, 2)  # [kv_heads, ctx, D]
        v = upcast(v_cache[blocks].reshape(-1, kv_heads, d)[:ctx]).permute(1, 0, 2)
        qg = upcast(q[r0:r0 + n]).reshape(n, kv_heads, group, d).permute(1, 2, 0, 3).reshape(kv_heads, group * n, d)
        scores = (torch.matmul(qg, k.transpose(-1, -2)) * scale).view(kv_heads * group, n, ctx)
        query_pos = torch.arange(ctx - n, ctx, device=q.device)[:, None]
        key_pos = torch.arange(ctx, device=q.device)[None, :]
        hidden = key_pos > query_pos
        if window > 0:
            hidden |= key_pos <= query_pos - window
        probs = torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1)
        o = torch.matmul(probs.reshape(kv_heads, group * n, ctx), v)  # [kv_heads, group * n, D]
        out[r0:r0 + n] = o.view(kv_heads, group, n, d).permute(2, 0, 1, 3).reshape(n, kv_heads * group, d).to(q.dtype)
    return out


def _decodes(q, k_cache, v_cache, rows: list[int], ctx: torch.Tensor, table: torch.Tensor, scale: float, window: int,
             out: torch.Tensor) -> None:
    """Decodes (one query row each, at its sequence's last position) in one batched product: each sequence's keys
    gathered through its block table to the batch's longest context ([batch, longest, kv_heads, D]); a key past its
    own context is hidden, and its value zeroed (it may be another sequence's, or garbage)."""
    block_size, kv_heads, d = k_cache.shape[1], k_cache.shape[2], q.shape[2]
    batch, group, ctx = len(rows), q.shape[1] // kv_heads, ctx.long()
    key_pos = torch.arange(int(ctx.max()), device=q.device)
    blocks, offsets = table[:, key_pos // block_size].long(), key_pos % block_size  # [batch, longest], [longest]
    beyond = key_pos[None, :] >= ctx[:, None]
    hidden = beyond | (key_pos[None, :] <= ctx[:, None] - 1 - window) if window > 0 else beyond
    per_head = lambda x: x.permute(0, 2, 1, 3).reshape(batch * kv_heads, -1, d)  # [batch * kv_heads, longest, D]
    k = per_head(upcast(k_cache[blocks, offsets]))
    v = per_head(upcast(v_cache[blocks, offsets]).masked_fill(beyond[:, :, None, None], 0.0))
    qg = upcast(q[rows]).reshape(batch * kv_heads, group, d)
    # torch.bmm, also for one key: the checker reads a reference's fp32 products at TF32 where aten multiplies
    # matrices (einsum would multiply a single key elementwise)
    scores = torch.bmm(qg, k.transpose(1, 2)).view(batch, kv_heads, group, -1) * scale
    probs = torch.softmax(scores.masked_fill(hidden[:, None, None, :], float("-inf")), dim=-1)
    o = torch.bmm(probs.view(batch * kv_heads, group, -1), v)  # [batch * kv_heads, group, D]
    out[rows] = o.reshape(batch, kv_heads * group, d).to(q.dtype)



def rows_problem(args: tuple, rows: list[int]) -> tuple[tuple, list[int]]:
    """A call of only the sequences holding `rows`, each cut to its query rows from the first asked to the last
    (each row keeps its position: the cut sequence ends at the last one's, so the causal limit and the window fall
    where they did), over the cache blocks their tables name (renumbered): (its arguments, the rows it answers)."""
    q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_table, scale, window, _, _ = args
    bounds, lengths = cu_seqlens_q.tolist(), seq_lens.tolist()
    spans: dict[int, tuple[int, int]] = {}  # sequence -> (first, last) row asked for
    for row in rows:
        s = bisect.bisect_right(bounds, row) - 1
        first, last = spans.get(s, (row, row))
        spans[s] = (min(first, row), max(last, row))
    seqs = sorted(spans)
    taken = [r for s in seqs for r in range(spans[s][0], spans[s][1] + 1)]
    counts = [spans[s][1] - spans[s][0] + 1 for s in seqs]
    # the last row asked of sequence s sits at position lengths[s] - rows of s + its index in s
    contexts = [lengths[s] - (bounds[s + 1] - bounds[s]) + (spans[s][1] - bounds[s]) + 1 for s in seqs]
    cu = torch.tensor([0, *itertools.accumulate(counts)], dtype=cu_seqlens_q.dtype)
    block_size = k_cache.shape[1]
    needed = torch.tensor([(c + block_size - 1) // block_size for c in contexts])
    table = block_table[seqs, :int(needed.max())].long()
    reached = torch.arange(table.shape[1])[None, :] < needed[:, None]
    table = torch.where(reached, table, table[:, :1])  # an entry past a context names a block reached (any: hidden)
    blocks, renumbered = torch.unique(table, return_inverse=True)  # the blocks reached, the table into them
    return (q[taken], k_cache[blocks], v_cache[blocks], cu, torch.tensor(contexts, dtype=seq_lens.dtype),
            renumbered.to(block_table.dtype), scale, window, max(counts), max(contexts)), taken

# Sliding windows the families serve (Mistral 7B v0.1 and Gemma 2: 4096 keys; Gemma 3: 1024, its 1B: 512): a
# kernel's window is met past its key tiles, as served, and not only below a short context; and a prefill chunk
# longer than its window (the default mixed step: 2048 rows under Gemma 3's 1024), where a chunk's own keys leave
# the window of its later rows
SERVED_WINDOWS = (4096, 1024, 512)


def _lengths(shape) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(query rows, context lengths, window) from the shape alone: the checker's refill keeps q's shape and the
    scalar arguments, and refills only the tensors; a decode's context but the longest's is at most its length here
    (make_inputs draws it per call, up to the blocks this length gives it).
    One sequence is a prefill chunk of max_query_len rows over a short prefix (a new prompt's chunk; in a decode-only
    step a decode at a drawn context), one reaches max_context, about half of the others are decodes, the rest
    drawn; about 4 in 10 prefills are fresh prompts (no prefix); in half of the shapes the decodes come first, in
    the others any order, the one at max_context last; the window is _window's."""
    seqs, _, _, _, _, max_query_len, max_context = shape
    by_shape = torch.Generator().manual_seed(seqs * 1_000_003 + max_query_len * 7919 + max_context)
    longest = min(max_query_len, max_context)
    rows = torch.randint(1, longest + 1, (seqs,), generator=by_shape)
    rows[torch.rand(seqs, generator=by_shape) < 0.5] = 1
    rows[0] = longest
    spare = (torch.rand(seqs, generator=by_shape) * (max_context - rows + 1)).long()
    ctx = torch.minimum(rows + spare, torch.tensor(max_context))
    if max_query_len > 1:
        ctx[0] = min(max_context, longest + int(torch.randint(0, 2 * longest + 17, (1,), generator=by_shape)))
    elif seqs > 1:  # a decode-only step's first decode may run up to a key short of the longest (make_inputs)
        ctx[0] = max(1, max_context - 1)
    ctx[-1] = max_context
    # new prompts (no cached prefix: the context is the chunk), about 4 in 10 of the prefills but the longest context:
    # an attacker's kernel took the causal limit at a fresh prompt's end, and a context was almost never its chunk
    fresh = (torch.rand(seqs, generator=by_shape) < 0.4) & (rows > 1)
    fresh[-1] = False
    ctx = torch.where(fresh, rows, ctx)
    # the order of the others: the decodes first, as vLLM's scheduler and autotune's own (serve/engine.py) put them,
    # or any (an attacker's kernel took every row for a decode when sequence 0 was one); the one at max_context stays
    # last, where a sampled range case always runs a program (the grid's tail: sampling._draw)
    decodes_first = bool(torch.rand(1, generator=by_shape) < 0.5)
    others = torch.argsort((rows[:-1] > 1).int(), stable=True) if decodes_first else \
        torch.randperm(seqs - 1, generator=by_shape)
    order = torch.cat([others, torch.tensor([seqs - 1])])
    return rows[order], ctx[order], _window(shape)


# The windows a shape's cases take in turn (with scale: cases.plan), so that every shape meets several, decode-only
# steps included (a stop 46 attacker's launcher passed window 0 to decode-only steps, and then to grouped ones only,
# and passed while each shape had one window, _window's): none, the families' (SERVED_WINDOWS: past a cut context
# only at the longest contexts, which run whole), and two odd ones inside the cut contexts (within a key tile, and
# across tiles of 64 and 128). _window stays the window of the range cases and dry calls, which run no scalars.
CASE_WINDOWS = (0, 37, 203, *SERVED_WINDOWS)


def _window(shape) -> int:
    """The sliding window, from the sizes no cut changes (the GQA group, head_dim, block_size, and whether the step
    is decode-only), so that the range cases and probes of a served shape make the launches it makes (vLLM's kernel
    takes the window as a constexpr): none for half the combinations, a family's (SERVED_WINDOWS) for a quarter,
    an odd one below 1000 (no multiple of a key tile) for the rest."""
    _, heads, kv_heads, head_dim, block_size, max_query_len, _ = shape
    key = heads // kv_heads * 103 + head_dim * 37 + block_size * 131 + (max_query_len == 1) * 31
    by_sizes = torch.Generator().manual_seed(key)
    pick, served, odd = torch.randint(0, 1 << 20, (3,), generator=by_sizes).tolist()
    return (0, 0, SERVED_WINDOWS[served % len(SERVED_WINDOWS)], 1 + 2 * (odd % 500))[pick % 4]


# the query rows' magnitudes (base.row_scales), narrower than the other activations': a logit's rounding error grows
# with its size, and a row's scores at q x 256 would differ between two correct fp32 kernels by more than fp32's
# tolerance; from 1/4 to 16 the largest scores reach about 70 (Gemma 2 caps its logits at 50). The keys and values
# as drawn, with no massive value: a value row 256 times the others, or a value of 4096, under a small weight put an
# fp32 output's rounding error past twice the reference's (the fallback's bound) in 1 of 4 judgings of the example.
# The values' tokens take the queries' spread: a fourth attacker's kernel clamped V to +-7, which N(0, 1) never
# reaches, and was off by up to 933 on values with the activations' magnitudes
Q_SPREAD = (-2.0, 4.0)


# The most cached values (keys, and as many values) a call's cache holds: past it the sequences share blocks, drawn
# at random, as prefix caching has them share a prompt's (1024 decodes over up to 512 keys own 16,606 blocks of 16
# x 128: 136 MB a bf16 call to make, send and place, for the few sequences a sampled case's programs read)
CACHE_ELEMENTS = 1 << 22


def _block_pool(per_seq: torch.Tensor, num_blocks: int, gen: torch.Generator) -> torch.Tensor:
    """Block ids in the order the sequences take them (each its next per_seq[s]): a fresh allocator's consecutive
    runs from a drawn block for about half the sequences, the others' blocks scattered among themselves (a cache after
    frees and prefix hits). Scattered for every sequence, no table held a run, and a kernel that takes a shortcut where
    it finds one (block_table[s, i] == block_table[s, 0] + i) would have been judged only off it."""
    pool = torch.roll(torch.arange(num_blocks), int(torch.randint(0, num_blocks, (1,), generator=gen)))
    mixed = (torch.rand(per_seq.numel(), generator=gen) < 0.5).tolist()
    scattered = [i for n, end, m in zip(per_seq.tolist(), per_seq.cumsum(0).tolist(), mixed)
                 if m for i in range(end - n, min(end, num_blocks))]
    at = torch.tensor(scattered, dtype=torch.long)
    pool[at] = pool[at[torch.randperm(len(at), generator=gen)]]
    return pool


def make_inputs(shape, dtype, gen, kind):
    seqs, heads, kv_heads, head_dim, block_size, max_query_len, max_context = shape
    grouped_heads(heads, kv_heads)
    rows, ctx, window = _lengths(shape)
    cu = torch.cat([torch.zeros(1, dtype=torch.long), rows.cumsum(0)])
    q = activations((int(cu[-1]), heads, head_dim), dtype, gen, kind, spread=Q_SPREAD, massive=False)
    per_seq = (ctx + block_size - 1) // block_size
    width = (max_context + block_size - 1) // block_size
    own = int(per_seq.sum()) + 3
    num_blocks = min(own, max(width + 3, CACHE_ELEMENTS // (block_size * kv_heads * head_dim)))
    pool = _block_pool(per_seq, num_blocks, gen)
    table = pool[torch.randint(0, num_blocks, (seqs, width), generator=gen)]  # unused entries: others' blocks (as
    # an SGLang-style pool's stale ones), or in half the calls zeros (below)
    start, shared = 0, num_blocks < own  # shared: each sequence's blocks drawn from all of them
    entries, blocks = table.numpy(), pool.numpy()  # the same memory
    for s, n in enumerate(per_seq.tolist()):
        entries[s, :n] = torch.randperm(num_blocks, generator=gen)[:n].numpy() if shared else blocks[start:start + n]
        start += n
    cache_shape = (num_blocks, block_size, kv_heads, head_dim)
    # "large" scales the keys too: logits in the tens of thousands overflow exp without the max subtraction
    k_cache = activations(cache_shape, dtype, gen, "large" if kind == "large" else "normal", spread=None,
                          massive=False)
    v_cache = activations(cache_shape, dtype, gen, "normal", spread=Q_SPREAD, massive=False)
    # a decode's context but the longest's, drawn per call: a stop 48 attacker's split-context path was right only
    # for the longest sequence, and a context fixed by the shape tells a kernel which sequences run long
    decode = rows == 1
    decode[-1] = False
    full = ctx // block_size  # the full blocks of each sequence's context as drawn (a decode's is redrawn shorter)
    ctx = torch.where(decode, _decode_contexts(ctx, gen), ctx)
    table = _prefix_hits(table, full, gen)  # drawn last: every draw above is as it was before prefix hits
    if torch.rand((), generator=gen) < 0.5:  # vLLM's tables: zeros past a sequence's blocks (block 0, its null block)
        table[torch.arange(width)[None, :] >= ((ctx + block_size - 1) // block_size)[:, None]] = 0
    return (q, k_cache, v_cache, cu.to(torch.int32), ctx.to(torch.int32), table.to(torch.int32), head_dim ** -0.5,
            window, int(rows.max()), int(ctx.max()))


def _prefix_hits(table: torch.Tensor, full: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """About half the sequences after the first begin with full blocks of an earlier one, at the same places in their
    tables: a prefix cache hit (vLLM's and SGLang's automatic prefix caching hand a prompt that starts as another did
    the very blocks that hold it). A round-16 attacker's kernel skipped keys in blocks it had met at the head of the
    previous sequence's table, and no table had shared one."""
    table = table.clone()
    later = torch.arange(1, table.shape[0])
    earlier = (torch.rand(later.numel(), generator=gen) * later).long()  # uniform below each sequence's index
    shared = torch.minimum(full[later], full[earlier])
    hit = 1 + (torch.rand(later.numel(), generator=gen) * shared).long().clamp(max=(shared - 1).clamp(min=0))
    hits = (torch.rand(later.numel(), generator=gen) < 0.5) & (shared > 0)
    rows = table.numpy()  # the same memory: in order, so that a hit can take an earlier one's hit blocks
    for s, e, n in zip(later[hits].tolist(), earlier[hits].tolist(), hit[hits].tolist()):
        rows[s, :n] = rows[e, :n]
    return table


def _decode_contexts(most: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """A context per sequence from 1 to `most`, uniform, half of them moved to a key tile's edge (a multiple of 16
    to 256, or one key either side), where a key loop that stops one key short or one tile early goes wrong: a stop
    48 attacker's decode dropped its own newest key at contexts of 1 mod 128, 1 decode in 128."""
    n = most.numel()
    drawn = 1 + (torch.rand(n, generator=gen) * most).long().clamp(max=most - 1)
    tile = 2 ** torch.randint(4, 9, (n,), generator=gen)
    edge = (drawn + tile // 2) // tile * tile + torch.randint(-1, 2, (n,), generator=gen)
    moved = torch.rand(n, generator=gen) < 0.5
    return torch.where(moved, edge.clamp(min=1).minimum(most), drawn)


def _work(shape) -> tuple[int, int]:
    """(query rows, mean keys read per sequence): about half the rows are decodes, contexts about half the longest."""
    seqs, _, _, _, _, max_query_len, max_context = shape
    return max(seqs, seqs * (max_query_len + 1) // 2), max(1, max_context // 2)


def bytes_moved(shape, dtype):
    seqs, heads, kv_heads, head_dim, _, _, _ = shape
    rows, context = _work(shape)
    e = torch.empty((), dtype=dtype).element_size()
    return 2 * rows * heads * head_dim * e + 2 * seqs * kv_heads * context * head_dim * e + 8 * seqs


def flops(shape, dtype):
    _, heads, _, head_dim, _, _, _ = shape
    rows, context = _work(shape)
    return 4 * rows * heads * context * head_dim  # QK^T and PV, 2 FLOPs per multiply-add each


LONG_WORK = 16384  # heads x context kept whole on the CPU: 2 heads of 32 (one kv head) over 8192 keys, ~4 s a call


def cut_shape(shape, max_rows, max_elements):
    """At most max_rows / 128 sequences (2 at least: a prefill chunk and a decode) and max_rows / 32 query rows in
    the prefill (8 on the default plan, 4 in its extra cases); heads, kv_heads (so the GQA group), head_dim and
    block_size never cut. The context is kept whole while heads x context is at most LONG_WORK (the interpreter
    walks every key of every kv head one tile after another: 32 heads over 1024 keys took the template 14 s of
    CPU a call), else cut to 2048 / heads keys (at least 64). So each preset's kv_heads, group and head_dim run
    uncut at a short context (model_shapes), and its longest context (8192) runs uncut on one kv head."""
    if max_rows is None or max_elements is None:  # on a GPU: no cut
        return tuple(shape)
    seqs, heads, kv_heads, head_dim, block_size, max_query_len, max_context = shape
    if heads * max_context > LONG_WORK:
        max_context = max(64, 2048 // heads)
    return (min(seqs, max(2, max_rows // 128)), heads, kv_heads, head_dim, block_size,
            min(max_query_len, max(4, max_rows // 32), max_context), max_context)


def coherent(shape):
    """No more query rows than the context."""
    *rest, max_query_len, max_context = shape
    return (*rest, min(max_query_len, max_context), max_context)


def range_cuts(shape):
    """Every sequence, every head, kv head, head_dim and block size, and a prefill's every query row up to 512 (the
    query blocks after a chunk's first, the sequences a grid over them reaches late); the context to at least the
    query rows, else to 512 (a ragged last block kept) or fewer where the sequences' keys would pass RANGE_ELEMENTS,
    but never within two key tiles of 128 (a stop 48 attacker's kernel read keys past the first tile from kv head 0
    in steps of 32 sequences or more: many sequences, a second tile and a kv head past 0 had never met; the cache
    is shared past CACHE_ELEMENTS). And a served step of more than 8 sequences whole, its longest query and longest
    context together, on one kv head and its query group: a kernel's scratch or split count sized by sequences x
    context, or a path taken past a chunk length, goes wrong only there (sampled: 1024 decodes over up to 512 keys
    are 33M cached values a tensor; a 2048-row chunk over 4096 keys is the reference's 34M scores a head group). The
    ordinary cases keep each preset's longest context."""
    seqs, heads, kv_heads, head_dim, block_size, max_query_len, max_context = shape
    rows = min(max_query_len, 512)
    keys = min(512 + max_context % block_size, max(RANGE_ELEMENTS // (seqs * kv_heads * head_dim), 2 * 128 + 3))
    cuts: tuple[tuple[int, ...], ...] = (
        (seqs, heads, kv_heads, head_dim, block_size, rows, min(max_context, max(rows, keys, block_size + 1))),)
    if seqs > 8 or max_query_len > rows:
        cuts += ((seqs, heads // kv_heads, 1, head_dim, block_size, max_query_len, max_context),)
    return cuts


def model_shapes(dims, rows):
    """Each preset's heads, kv heads and head_dim over 3 blocks of 16 keys (the last ragged), a prefill chunk and a
    decode; its longest context on one kv head (a 512-entry block table at 8192) in a mixed step and in a
    decode-only step (max_query_len 1: a kernel may take a split-context path there) 2 keys short (a ragged last
    block), its first sequence at a drawn context; the tiny ones whole. The cases' windows take turns
    (CASE_WINDOWS)."""
    heads, kv = int(dims["num_heads"]), int(dims["num_kv_heads"])
    d, ctx = int(dims["head_dim"]), int(dims["max_seq_len"])
    if ctx <= 512:
        return ((4, heads, kv, d, 32, 24, ctx),)
    return (2, heads, kv, d, 16, 8, 45), (2, 2, 1, 32, 16, 4, ctx), (2, 2, 1, 32, 16, 1, ctx - 2)


MAX_SEQS = 1024  # vLLM's default max_num_seqs on an H100/H200: the most sequences a step holds


def step_shapes(dims, rows):
    """A decode step of `rows` sequences, at most MAX_SEQS (vLLM's and SGLang's decode batches: every count up to
    a step's) with the preset's heads, kv heads and head_dim over 3 blocks of 16 keys: the plan's other cases ran 1
    to 4, 17, 31 and 1024 sequences, and a kernel that switched on a runtime count of sequences between them met
    none."""
    return ((min(rows, MAX_SEQS), int(dims["num_heads"]), int(dims["num_kv_heads"]), int(dims["head_dim"]), 16, 1,
             45),)


def input_elements(shape) -> int:
    seqs, heads, kv_heads, head_dim, block_size, max_query_len, max_context = shape
    blocks = seqs * ((max_context + block_size - 1) // block_size) + 3
    width = (max_context + block_size - 1) // block_size
    queries = seqs * max_query_len * heads * head_dim
    cache = 2 * blocks * block_size * kv_heads * head_dim  # keys and values
    return queries + cache + seqs * (width + 2) + 1


def output_elements(shape) -> int:
    seqs, heads, _, head_dim, _, max_query_len, _ = shape
    return seqs * max_query_len * heads * head_dim


def _shape_from_dims(dims: list):
    """The case from a call's recorded dims, in the argument layouts of ours and the engines' attention ops:
    - ours: q [T, H, D], k_cache [NB, BS, KVH, D], v_cache, cu_seqlens_q [S + 1], seq_lens [S], block_table [S, MB];
    - vLLM's CPU backend `_C::cpu_attention_with_kv_cache(query, key_cache [NB, KVH, BS, D], value_cache, output,
      query_start_loc [S + 1], seq_lens [S], scale, causal, alibi, sliding_window, block_table [S, MB], ...)`;
    - SGLang's CPU `sgl_kernel::decode_attention_cpu(q [B, H, D], k_buffer [P, KVH, D], v_buffer, o, k, v, loc,
      attn_logits, req_to_token [R, MAXCTX], req_pool_indices, seq_lens [B], ...)` and `extend_attention_cpu(q [T, H,
      D], k_extend, v_extend, o, k_buffer [P, KVH, D], v_buffer, req_to_token, req_pool_indices, seq_lens [B], ...)`:
      one token per page (block size 1), req_to_token the page table.
    T rows over S sequences: the longest query is taken as T - (S - 1) (one prefill among decodes, the engines'
    usual step); the longest context as what the page table reaches."""
    q = dims[0]
    if len(dims[1]) == 3 and len(dims) >= 11 and len(dims[8]) == 2:  # SGLang decode
        seqs, kv_heads, block_size, reach = dims[10][0], dims[1][1], 1, dims[8][1]
    elif len(dims[1]) == 3 and len(dims) >= 9 and len(dims[4]) == 3:  # SGLang extend
        seqs, kv_heads, block_size, reach = dims[8][0], dims[4][1], 1, dims[6][1]
    elif len(dims) > 10 and len(dims[3]) == 3:  # vLLM CPU: output at 3, the cache head-major
        seqs, kv_heads, block_size = dims[5][0], dims[1][1], dims[1][2]
        reach = block_size * dims[10][1]
    else:
        seqs, block_size, kv_heads = dims[4][0], dims[1][1], dims[1][2]
        reach = block_size * dims[5][1]
    seqs = max(1, int(seqs))
    return seqs, q[1], kv_heads, q[2], block_size, max(1, q[0] - (seqs - 1)), int(reach)


# vLLM's unified attention kernel as knobs: BLOCK_Q query tokens of one sequence per program (with their whole
# GQA group: BLOCK_M = BLOCK_Q * group rows), TILE keys per step of the context loop (a multiple of or a divisor
# of the block size), warps and pipelining. First: vLLM's decode defaults (BLOCK_M 16, TILE 32, 4 warps).
SEARCH = SearchSpace(
    template="paged_attention.py.j2",
    knobs=(
        Knob("block_q", (1, 2, 4, 8, 16), "query tokens of one sequence per program (each with its whole GQA group)"),
        Knob("tile", (16, 32, 64, 128), "keys per step of the context loop"),
        Knob("warps", (2, 4, 8), "warps per program"),
        Knob("stages", (1, 2, 3), "software-pipelining depth of the key loop"),
    ),
    configs=configs(("block_q", "tile", "warps", "stages"), [
        (1, 32, 4, 2), (4, 32, 4, 2), (1, 64, 4, 2), (8, 64, 8, 2), (2, 16, 2, 1), (16, 64, 8, 3),
        (1, 128, 4, 3), (4, 128, 8, 2),
    ]),
    # a prefill over two query blocks, contexts over two key tiles, ragged head_dim 48
    sweep_shapes=lambda p: ((3, 8, 2, 48, 16, 2 * max(p["block_q"], 4) + 1, 2 * p["tile"] + 5),),
    own_sweep=True,
)


TARGET = Target(
    name="paged_attention",
    layouts=("contiguous", "offset0", "kv_cache_vllm"),  # the cache views autotune's vLLM plugin passes
    tolerances=ROWS_SHARE_ROUNDING,  # a row's probabilities rounded to the storage type before P @ V, as vLLM's are
    scalar_values={"scale": ATTENTION_SCALES, "window": CASE_WINDOWS},  # scale off head_dim ** -0.5 too (Gemma 2)
    summary="vLLM's unified attention: varlen prefill and decode rows over a paged KV cache (block table), "
            "causal, optional sliding window, GQA",
    reference=paged_attention,
    advice=("A program per (block of one sequence's query rows, kv head) serves every query head of its group: find "
            "the sequence from cu_seqlens_q (a decode is a sequence of one row, a prefill chunk many), and walk its "
            "keys tile by tile through block_table (position p is in block block_table[s, p // block_size] at offset "
            "p % block_size; block_size need not be a power of two), only up to the causal limit and from the "
            "window's start when window > 0.",
            "An online softmax (running max and sum) in float32, `tl.dot` on the 16-bit q, k and v tiles, and the "
            "`scale` argument as given (it is not always head_dim ** -0.5); take every stride from the caches, "
            "which may be views."),
    make_inputs=make_inputs,
    bytes_moved=bytes_moved,
    flops=flops,
    # (seqs, heads, kv_heads, head_dim, block_size, max_query_len, max_context): Llama 3 8B, 16 decodes and a
    # 2048-token prefill chunk (vLLM's max_num_batched_tokens below 70 GB of GPU memory) over contexts up to 4096;
    # 1024 decodes (vLLM's default max_num_seqs on an H100/H200: the range cases run every sequence) up to 512 (each
    # preset's longest context, 8192 for all but the tiny ones, comes with model_shapes)
    default_shapes=((17, 32, 8, 128, 16, 2048, 4096), (MAX_SEQS, 32, 8, 128, 16, 1, 512)),
    # one decode of context 1; MHA with block 32 and a ragged context; MQA; head_dim not a power of two; the real
    # vLLM CPU trace's 128-token blocks (Qwen2.5-0.5B's group of 7 and every preset's heads come with model_shapes);
    # a block of 528 tokens, not a power of two, as vLLM sizes attention blocks to a hybrid (attention + Mamba)
    # model's state, its context over three blocks; block size 64 (block sizes are multiples of 16: vLLM's Triton
    # backend, which the export plugs into, takes MultipleOf(16), and so does serve.block_size; SGLang's pages of one
    # token come with its profiles); head_dim 256 (Gemma 2 2B/9B, vLLM's largest); Falcon-7B's 71 query heads on one
    # kv head (a group past 16 and past 64, not a power of two; StarCoder's is 48); head_dim 80 (Phi-2, StableLM:
    # not a multiple of 32, every head_dim rotary_embedding.SERVED_HEADS serves is here)
    edge_shapes=((1, 4, 2, 32, 16, 1, 1), (3, 4, 4, 64, 32, 7, 70), (2, 8, 1, 128, 16, 5, 100),
                 (3, 12, 4, 96, 16, 9, 37), (2, 8, 2, 32, 128, 17, 512), (2, 4, 2, 64, 528, 9, 1100),
                 (2, 4, 2, 64, 64, 9, 150), (2, 8, 4, 256, 16, 5, 70), (2, 71, 1, 64, 16, 5, 100),
                 (2, 4, 4, 80, 16, 5, 100)),
    beyond_domain=("contexts past each preset's max_seq_len (8192): vLLM serves up to max_model_len, 131072 for "
                   "Llama 3.1, and one 8192-key row is about 4 s of the interpreter's time on one kv head",
                   "prefill chunks past 2048 rows: vLLM's max_num_batched_tokens is 8192 (API server) or 16384 "
                   "(offline) on an H100/H200, and a 2048-row chunk's reference is 34M scores a head group",
                   "block ids past the blocks a case's sequences need (and 3 spare): vLLM's cache holds as many blocks "
                   "as the GPU's memory leaves (about 240,000 of 16 tokens for Llama 3.2 1B on an H200: 0.9 of 141 GB, "
                   "less its weights, at 512 KB a block over its 16 layers), so an offset "
                   "block x block stride past 2**31 elements, wrong in int32 unless the block id is cast to int64 "
                   "first, is never computed: that takes a cache of 2**31 elements (4 GB in bf16) in each process"),
    foreign_ops=(
        # vLLM's CPU attention backend (the op under vllm::unified_attention_with_output in its CPU traces);
        # the wrapper itself is not mapped: its arguments hold no cache, and as the outer op it would hide this
        # op's shapes (add it with profile.target_map for a GPU trace of the Triton backend)
        ForeignOp("_C::cpu_attention_with_kv_cache"),
        # SGLang's CPU attention (sgl-kernel); its Triton GPU backend launches kernels from Python, no torch op
        ForeignOp("sgl_kernel::decode_attention_cpu"),
        ForeignOp("sgl_kernel::extend_attention_cpu"),
    ),
    shape_from_dims=_shape_from_dims,
    op_class=OpClass.MIXED,  # decode rows read the cache once (memory); prefill rows reuse each key tile
    search=SEARCH,
    dims=("seqs", "heads", "kv_heads", "head_dim", "block_size", "max_query_len", "max_context"),
    example="paged_attention.py",
    cut_shape=cut_shape,
    range_cuts=range_cuts,
    coherent=coherent,
    rows_problem=rows_problem,
    input_elements=input_elements,
    output_elements=output_elements,
    model_shapes=model_shapes,
    step_shapes=step_shapes,
)
