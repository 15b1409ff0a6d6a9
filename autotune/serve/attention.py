"""Attention over vLLM's paged KV cache, for engine steps mixing prefill chunks and decodes.

An engine step is a list of `Segment`s: each is a run of consecutive tokens of one sequence (a whole prompt, a
chunk of one, or the single token of a decode step), the sequence named by the slot it holds while it runs.
Their tokens are concatenated into one [T, hidden] activation, as in vLLM, so norms, MLPs and projections see
[T, H] shapes; attention takes the whole step in one call, as vLLM's unified attention does:
- the cache is vLLM's: k and v [num_blocks, block_size, kv_heads, head_dim] per layer, a sequence's position p
  in block block_table[s, p // block_size] at offset p % block_size; blocks come from a shuffled pool as a
  sequence grows and go back to it when its slot starts a new sequence, so a sequence's blocks are never in
  order (a kernel that ignores the block table is wrong in the model check, not only in the checker);
- this step's keys and values are written at each token's slot (`slot_mapping`, vLLM's reshape_and_cache), then
  `dispatch.paged_attention` attends every row: query rows packed by `cu_seqlens_q`, each sequence's length in
  `seq_lens`, causal, a sliding window where the layer has one (Mistral, some Qwen layers: keys more than
  `window - 1` positions behind the query are masked, as transformers' sliding_window_overlay does).
"""

from __future__ import annotations

import dataclasses
import itertools

import torch

from autotune.errors import UserError
from autotune.serve import dispatch

BLOCK_SIZE = 16  # vLLM's default on GPUs (serve.block_size; its CPU backend uses 128)
BLOCK_MULTIPLE = 16  # block sizes vLLM's Triton attention backend takes (MultipleOf(16)): the paged_attention domain


def check_block_size(block_size: int) -> None:
    """serve.block_size: positions per block, a multiple of BLOCK_MULTIPLE (UserError otherwise)."""
    if block_size < 1 or block_size % BLOCK_MULTIPLE:
        raise UserError(f"serve.block_size={block_size} (the KV cache's positions per block: a multiple of "
                        f"{BLOCK_MULTIPLE}, as vLLM's Triton attention backend takes them; vLLM's default 16)")


@dataclasses.dataclass(frozen=True)
class Segment:
    """Tokens `tokens` of the sequence in cache slot `slot`, at positions start, start + 1, ...; a segment at
    position 0 starts a new sequence in the slot."""

    slot: int
    start: int
    tokens: tuple[int, ...]

    @property
    def end(self) -> int:
        return self.start + len(self.tokens)


class KVCache:
    """Keys and values of every layer, [layers, num_blocks, block_size, kv_heads, head_dim], zero-filled, and the
    blocks each slot's sequence holds. Enough blocks for `max_slots` sequences of `max_len` positions each.

    Zero-filled rather than empty: a kernel that reads a block's unused tail must not meet NaN garbage."""

    def __init__(self, num_layers: int, num_kv_heads: int, head_dim: int, *, max_slots: int, max_len: int,
                 dtype: torch.dtype, device: str | torch.device, block_size: int = BLOCK_SIZE):
        check_block_size(block_size)
        per_sequence = -(-max_len // block_size)
        shape = (num_layers, max_slots * per_sequence, block_size, num_kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.max_slots, self.max_len, self.block_size = max_slots, max_len, block_size
        self.free = torch.randperm(shape[1], generator=torch.Generator().manual_seed(0)).tolist()
        self.blocks: dict[int, list[int]] = {}  # slot -> its sequence's blocks, in position order

    def layer(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.k[i], self.v[i]

    def reserve(self, segment: Segment) -> list[int]:
        """The blocks of the segment's sequence, grown to hold its positions (a segment at 0 frees the slot's
        earlier sequence's blocks first)."""
        if segment.start == 0:
            self.free.extend(reversed(self.blocks.pop(segment.slot, [])))
        held = self.blocks.setdefault(segment.slot, [])
        while len(held) * self.block_size < segment.end:
            held.append(self.free.pop())
        return held

    @property
    def bytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()


@dataclasses.dataclass(frozen=True)
class Batch:
    """The index tensors of one engine step, built once and shared by every layer (vLLM's attention metadata)."""

    tokens: torch.Tensor  # [T] token ids
    positions: torch.Tensor  # [T]
    last_rows: torch.Tensor  # [S] row of each segment's last token (where logits are taken)
    slot_mapping: torch.Tensor  # [T] each token's place in the cache: block * block_size + offset
    cu_seqlens_q: torch.Tensor  # [S + 1] int32: segment s is rows cu_seqlens_q[s] .. cu_seqlens_q[s + 1]
    seq_lens: torch.Tensor  # [S] int32: positions of each sequence in the cache after this step
    block_table: torch.Tensor  # [S, max blocks] int32: each sequence's blocks, unused entries 0
    max_query_len: int
    max_seq_len: int

    @classmethod
    def build(cls, segments: list[Segment], cache: KVCache, vocab_size: int, device) -> Batch:
        check_segments(segments, cache, vocab_size)
        tokens: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        tables: list[list[int]] = []
        for seg in segments:
            blocks = cache.reserve(seg)
            tables.append(list(blocks))
            tokens.extend(seg.tokens)
            positions.extend(range(seg.start, seg.end))
            slots.extend(blocks[p // cache.block_size] * cache.block_size + p % cache.block_size
                         for p in range(seg.start, seg.end))
        lengths = [len(seg.tokens) for seg in segments]
        cu = [0, *itertools.accumulate(lengths)]
        width = max(len(t) for t in tables)

        def tensor(values, dtype=torch.long):
            return torch.tensor(values, dtype=dtype).to(device)

        return cls(tensor(tokens), tensor(positions), tensor([c - 1 for c in cu[1:]]), tensor(slots),
                   tensor(cu, torch.int32), tensor([seg.end for seg in segments], torch.int32),
                   tensor([t + [0] * (width - len(t)) for t in tables], torch.int32), max(lengths),
                   max(seg.end for seg in segments))


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
        if seg.start and seg.start > len(cache.blocks.get(seg.slot, ())) * cache.block_size:
            raise ValueError(f"slot {seg.slot} continues at position {seg.start}, past what its sequence holds")
        if min(seg.tokens) < 0 or max(seg.tokens) >= vocab_size:
            raise ValueError(f"token id outside the vocabulary [0, {vocab_size}) in slot {seg.slot}")


def write_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, batch: Batch, k: torch.Tensor, v: torch.Tensor) -> None:
    """Store this step's k, v [T, kv_heads, D] at each token's slot (vLLM's reshape_and_cache)."""
    k_cache.view(-1, *k_cache.shape[2:])[batch.slot_mapping] = k
    v_cache.view(-1, *v_cache.shape[2:])[batch.slot_mapping] = v


def attend(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, batch: Batch, scale: float,
           window: int = 0) -> torch.Tensor:
    """q [T, heads, D] (rotated) against the cache, which already holds this step's keys -> [T, heads * D].
    window > 0: each query sees only the last `window` positions (itself included)."""
    t, heads, d = q.shape
    return dispatch.paged_attention(q, k_cache, v_cache, batch.cu_seqlens_q, batch.seq_lens, batch.block_table,
                                    scale, window, batch.max_query_len, batch.max_seq_len).reshape(t, heads * d)
