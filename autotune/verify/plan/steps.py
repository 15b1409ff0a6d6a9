"""The token counts of a step the default plan draws per run beside the presets' and the cuts' (plan.cases.drawn_steps):
where engines serve every count, a kernel may switch on one, and no launch signature shows it."""

from __future__ import annotations

import random


def step_counts(rng: random.Random, served_rows: int) -> list[int]:
    """Token counts of a step, drawn: one an engine pads a step to between 16 and 64 (`padded_counts`), then in each
    octave from 64 to the most rows served (65-128, 129-256, ... to 2048) an odd one (a ragged last block, as an
    eager step of any count has), a padded one and an even one that is not a multiple of 8 (an eager step's). A batch
    of up to 512 tokens runs in vLLM's CUDA graph of the next size up, so padded counts are most of what the ops of a
    decode-heavy server see; odd draws alone never met an even count past 64 (a round-15 attacker's RMSNorms went
    wrong at every multiple of 8, and every even count, past 64 that is not a power of two)."""
    small = padded_counts(16, min(64, served_rows + 1))  # none past the served rows (serve.max_batched_tokens)
    counts = [rng.choice(small)] if small else []
    low = 64
    while low < served_rows:
        high = min(2 * low, served_rows)
        evens = [n for n in range(low + 2, high, 2) if n % 8]
        counts += [rng.choice(drawn) for drawn in (range(low + 1, high, 2), padded_counts(low, high), evens) if drawn]
        low = high
    return counts


def padded_counts(low: int, high: int) -> list[int]:
    """The counts in (low, high) that are not powers of two (the presets' and cuts' counts are) and that engines pad
    a step's batch to: vLLM's default CUDA-graph sizes (multiples of 8 below 256, of 16 up to 512; SGLang's are
    multiples of 8 too) and, past them, multiples of 8."""
    return [n for n in range(low + 1, high) if n % (16 if 256 <= n <= 512 else 8) == 0 and n & (n - 1)]
