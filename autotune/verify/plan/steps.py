"""The token counts of a step the default plan draws per run beside the presets' and the cuts' (plan.cases.drawn_steps):
where engines serve every count, a kernel may switch on one, and no launch signature shows it."""

from __future__ import annotations

import random


def step_counts(rng: random.Random, served_rows: int) -> list[int]:
    """Token counts of a step: every count up to 8 (a decode batch: vLLM's smallest CUDA graphs are 1, 2, 4 and 8,
    an eager step any count between) and its graphs of 16, 32 and 64 (no case of rotary's, SiLU-and-mul's or the
    fused MoE's had run 16 tokens), then, drawn, in each octave from 8 to the most rows served (9-16, 17-32, ...,
    1025-2048) an odd count (a ragged last block, as an eager step of any count has), a padded one (`padded_counts`)
    and an even one that is not a multiple of 8 (an eager step's); from 256 to 512, where vLLM's graphs step by 16,
    also a multiple of 8 that is not of 16 (a chunked prefill's step). Odd draws alone never met an even count past
    64 (round-15 attackers' RMSNorms went wrong at every multiple of 8, and every even count, past 64 that is not a
    power of two), and no case ran a decode batch of 4, 5 or 6 rows, or 264 tokens (a round-16 attacker's)."""
    counts = [n for n in (*range(1, 9), 16, 32, 64) if n <= served_rows]
    low = 8
    while low < served_rows:
        high = min(2 * low, served_rows)
        classes = [range(low + 1, high, 2), padded_counts(low, high), [n for n in range(low + 2, high, 2) if n % 8]]
        if low < 512 and high > 256:
            classes.append([n for n in range(max(low, 256) + 1, min(high, 512)) if n % 16 == 8])
        counts += [rng.choice(drawn) for drawn in classes if drawn]
        low = high
    return counts


def padded_counts(low: int, high: int) -> list[int]:
    """The counts in (low, high) that are not powers of two (the presets' and cuts' counts are) and that engines pad
    a step's batch to: vLLM's default CUDA-graph sizes (multiples of 8 below 256, of 16 up to 512; SGLang's are
    multiples of 8 too) and, past them, multiples of 8."""
    return [n for n in range(low + 1, high) if n % (16 if 256 <= n <= 512 else 8) == 0 and n & (n - 1)]
