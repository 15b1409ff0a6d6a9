"""Attention over a KV cache with one slot per sequence, for engine steps mixing prefill chunks and decodes.

An engine step is a list of `Segment`s: each is a run of consecutive tokens of one sequence (a whole
prompt, a chunk of one, or the single token of a decode step), stored in that sequence's cache slot.
Their tokens are concatenated into one [T, hidden] activation, as in vLLM, so norms, MLPs and
projections see [T, H] shapes; only attention looks at sequences separately:
- single-token segments (decodes) go to `dispatch.decode_attention` together (its reference gathers keys
  [B, kv_heads, L, D] from their slots and masks the padding to -inf);
- longer segments (prefill chunks) go to `dispatch.prefill_attention` together, packed with cu_seqlens
  (its reference attends one chunk at a time: scores [heads, n, ctx] with a causal mask).
Both references group the query heads of each kv head instead of copying k and v per head. (The
attention scores used to go through `dispatch.softmax`; the attention targets now hold that work, as
in real engines, and the softmax target stays for traces that show `aten::_softmax`.)
A sliding window (Mistral, some Qwen layers) masks keys more than `window - 1` positions behind the
query, as transformers' sliding_window_overlay does (key > query - window); the attention targets
have no window yet, so windowed layers keep the explicit QK^T -> `dispatch.softmax` path below.
"""

from __future__ import annotations

import dataclasses

import torch

from autotune.serve import dispatch


@dataclasses.dataclass(frozen=True)
class Segment:
    """Tokens `tokens` of the sequence in cache slot `slot`, at positions start, start + 1, ..."""

    slot: int
    start: int
    tokens: tuple[int, ...]

    @property
    def end(self) -> int:
        return self.start + len(self.tokens)


class KVCache:
    """Keys and values of every layer: [layers, slots, kv_heads, max_len, head_dim], zero-filled.

    Zero-filled rather than empty: padded decode rows read stale entries, and although their
    probability is exactly 0 after the -inf mask, 0 * NaN garbage would still be NaN.
    """

    def __init__(self, num_layers: int, num_kv_heads: int, head_dim: int, *, max_slots: int, max_len: int,
                 dtype: torch.dtype, device: str | torch.device):
        shape = (num_layers, max_slots, num_kv_heads, max_len, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.max_slots, self.max_len = max_slots, max_len

    def layer(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.k[i], self.v[i]

    @property
    def bytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()


@dataclasses.dataclass(frozen=True)
class Chunk:
    """A multi-token segment: rows [row0, row1) of the step, positions [start, ctx) of cache slot `slot`."""

    row0: int
    row1: int
    slot: int
    start: int
    ctx: int


@dataclasses.dataclass(frozen=True)
class Batch:
    """The index tensors of one engine step, built once and shared by every layer."""

    tokens: torch.Tensor  # [T] token ids
    positions: torch.Tensor  # [T]
    token_slots: torch.Tensor  # [T] cache slot of each token
    last_rows: torch.Tensor  # [S] row of each segment's last token (where logits are taken)
    single_rows: torch.Tensor  # [B] rows of single-token segments (decodes)
    single_slots: torch.Tensor  # [B]
    single_ctx: torch.Tensor  # [B] context length (position + 1) of each
    single_max_ctx: int
    chunks: tuple[Chunk, ...]
    chunk_rows: torch.Tensor  # [N] the rows of every multi-token segment, packed in order
    chunk_slots: torch.Tensor  # [C]
    chunk_starts: torch.Tensor  # [C] position of each chunk's first token
    chunk_cu: torch.Tensor  # [C + 1] offsets of each chunk in the packed rows
    chunk_max_len: int

    @classmethod
    def build(cls, segments: list[Segment], cache: KVCache, vocab_size: int, device) -> Batch:
        check_segments(segments, cache, vocab_size)
        tokens: list[int] = []
        positions: list[int] = []
        slots, last = [], []
        singles, chunks = [], []
        for seg in segments:
            row0 = len(tokens)
            tokens.extend(seg.tokens)
            positions.extend(range(seg.start, seg.end))
            slots.extend([seg.slot] * len(seg.tokens))
            last.append(len(tokens) - 1)
            if len(seg.tokens) == 1:
                singles.append((row0, seg.slot, seg.end))
            else:
                chunks.append(Chunk(row0, len(tokens), seg.slot, seg.start, seg.end))
        rows, sslots, ctx = zip(*singles) if singles else ((), (), ())

        def tensor(values):
            return torch.tensor(values, dtype=torch.long).to(device)

        lengths = [c.row1 - c.row0 for c in chunks]
        cu = [sum(lengths[:i]) for i in range(len(lengths) + 1)]
        return cls(tensor(tokens), tensor(positions), tensor(slots), tensor(last), tensor(rows), tensor(sslots),
                   tensor(ctx), max(ctx, default=0), tuple(chunks),
                   tensor([r for c in chunks for r in range(c.row0, c.row1)]), tensor([c.slot for c in chunks]),
                   tensor([c.start for c in chunks]), tensor(cu), max(lengths, default=0))


def check_segments(segments: list[Segment], cache: KVCache, vocab_size: int) -> None:
    """Out-of-range indices would be a device-side assert on a GPU (fatal to the process): refuse them here."""
    if not segments:
        raise ValueError("an engine step needs at least one segment")
    if len({seg.slot for seg in segments}) < len(segments):
        raise ValueError("an engine step has two segments for one cache slot")
    for seg in segments:
        if not seg.tokens:
            raise ValueError(f"empty segment for slot {seg.slot}")
        if not 0 <= seg.slot < cache.max_slots:
            raise ValueError(f"slot {seg.slot} outside the cache's {cache.max_slots} slots")
        if seg.start < 0 or seg.end > cache.max_len:
            raise ValueError(f"positions [{seg.start}, {seg.end}) outside the cache length {cache.max_len}")
        if min(seg.tokens) < 0 or max(seg.tokens) >= vocab_size:
            raise ValueError(f"token id outside the vocabulary [0, {vocab_size}) in slot {seg.slot}")


def write_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, batch: Batch, k: torch.Tensor, v: torch.Tensor) -> None:
    """Store this step's k, v [T, kv_heads, D] at (slot, position) of each token."""
    k_cache[batch.token_slots, :, batch.positions] = k
    v_cache[batch.token_slots, :, batch.positions] = v


def attend(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, batch: Batch, scale: float,
           window: int = 0) -> torch.Tensor:
    """q [T, heads, D] (rotated) against the cache, which already holds this step's keys -> [T, heads * D].

    window > 0: each query sees only the last `window` positions (itself included)."""
    t, heads, d = q.shape
    out = q.new_empty(t, heads * d)
    if window:  # the attention targets take no window yet: explicit scores through dispatch.softmax
        if batch.single_rows.numel():
            out[batch.single_rows] = attend_singles(q[batch.single_rows], k_cache, v_cache, batch, scale, window)
        for c in batch.chunks:
            out[c.row0:c.row1] = attend_chunk(q[c.row0:c.row1], k_cache[c.slot, :, :c.ctx],
                                              v_cache[c.slot, :, :c.ctx], c.start, scale, window)
        return out
    if batch.single_rows.numel():
        out[batch.single_rows] = dispatch.decode_attention(
            q[batch.single_rows], k_cache, v_cache, batch.single_slots, batch.single_ctx, scale,
            batch.single_max_ctx).reshape(-1, heads * d)
    if batch.chunks:
        out[batch.chunk_rows] = dispatch.prefill_attention(
            q[batch.chunk_rows], k_cache, v_cache, batch.chunk_slots, batch.chunk_starts, batch.chunk_cu, scale,
            batch.chunk_max_len).reshape(-1, heads * d)
    return out


def attend_singles(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, batch: Batch,
                   scale: float, window: int = 0) -> torch.Tensor:
    """One query token per sequence, padded to the longest context: q [B, heads, D] -> [B, heads * D]."""
    b, heads, d = q.shape
    kv_heads, length = k_cache.shape[1], batch.single_max_ctx
    group = heads // kv_heads
    k = k_cache[batch.single_slots, :, :length]  # [B, kv_heads, L, D]
    v = v_cache[batch.single_slots, :, :length]
    scores = torch.matmul(q.reshape(b, kv_heads, group, d), k.transpose(-1, -2)) * scale  # [B, kv_heads, group, L]
    key_pos = torch.arange(length, device=q.device)[None, :]
    padding = key_pos >= batch.single_ctx[:, None]  # [B, L]
    if window:
        padding |= key_pos <= batch.single_ctx[:, None] - 1 - window  # the query sits at position ctx - 1
    scores = scores.masked_fill(padding[:, None, None, :], float("-inf"))
    probs = dispatch.softmax(scores.view(b * heads, 1, length))
    out = torch.matmul(probs.reshape(b, kv_heads, group, length), v)  # [B, kv_heads, group, D]
    return out.reshape(b, heads * d)


def attend_chunk(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int, scale: float,
                 window: int = 0) -> torch.Tensor:
    """n query tokens at positions start.. of one sequence, causal: q [n, heads, D], k/v [kv_heads, ctx, D]."""
    n, heads, d = q.shape
    kv_heads, ctx = k.shape[0], k.shape[1]
    group = heads // kv_heads
    qg = q.reshape(n, kv_heads, group, d).permute(1, 2, 0, 3).reshape(kv_heads, group * n, d)
    scores = (torch.matmul(qg, k.transpose(-1, -2)) * scale).view(heads, n, ctx)
    query_pos = torch.arange(start, start + n, device=q.device)
    key_pos = torch.arange(ctx, device=q.device)[None, :]
    future = key_pos > query_pos[:, None]  # [n, ctx]
    if window:
        future |= key_pos <= query_pos[:, None] - window
    probs = dispatch.softmax(scores.masked_fill(future, float("-inf")))  # [heads, n, ctx]
    out = torch.matmul(probs.reshape(kv_heads, group * n, ctx), v)  # [kv_heads, group * n, D]
    return out.view(kv_heads, group, n, d).permute(2, 0, 1, 3).reshape(n, heads * d)
