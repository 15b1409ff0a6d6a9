"""The case plan: which shapes, dtypes, input kinds, layouts, scalar values and seeds a candidate is checked on.

A pure function of the target, the served shapes and a `PlanConfig` (the `verify` settings, the model presets'
sizes, the served rows): the profile's shapes (or the target's defaults), its edge shapes, every preset's shapes
and shapes drawn for this run (keyed by the judge's secret salt), each in every dtype with realistic inputs,
with a repeat (races show) and a refill (caching by pointer shows) rotating over the dtypes; large inputs in the
half dtypes, NaN/Inf and further seeds in every dtype; the target's layouts and scalar values take turns.

On the interpreter (not `PlanConfig.whole`) rows are cut, never a width (a preset's or drawn call small enough runs
uncut in one dtype). Range cases keep every dim a kernel indexes whole at served shapes (`Target.range_cuts`),
run whole where cheap and on a sample of each launch's programs otherwise (autotune.verify.interp.sampling);
`together_shapes` sets each dim and each pair of dims the cut shrinks at their served sizes together (a sample,
within a budget), `drawn_steps` runs a step of a drawn token count in each octave. The cases added while a
candidate runs are plan.followup's.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import itertools
import math
import random

import torch

from autotune.errors import UserError
from autotune.records import ProfiledShape
from autotune.targets.base import DENSE_LAYOUTS, Shape, Target, cut_rows, dtype_name, numel, parse_dtype, random_rows
from autotune.verify.plan.config import PlanConfig
from autotune.verify.plan.steps import step_counts

__all__ = ["Case", "PlanConfig", "cut_rows", "plan"]  # cut_rows: the default cut, from base

HALF_DTYPES = (torch.float16, torch.bfloat16)
AT_OFFSET_ZERO = ("offset0", "qkv")  # layouts whose inputs start at storage offset 0
# Shapes the model presets and the run's draw add: on CPU normal inputs in every dtype and NaN/Inf in one, cut as
# the extra cases are (they test widths, row tails and masks; the other kinds run on the default and edge shapes).
CONTRACT_SOURCES = ("model", "random")


@dataclasses.dataclass(frozen=True)
class Case:
    index: int
    shape: Shape  # as run (rows cut on CPU)
    dtype: torch.dtype
    kind: str  # normal | large | special
    seed: int
    source: str  # profile | default | edge | model | random | range | together | coverage | probe
    requested_shape: Shape  # before the cut
    calls: int = 0
    repeat: bool = False  # call twice on the same inputs: outputs must agree bitwise
    refill: bool = False  # refill the same buffers with new values and call again
    layout: str = "contiguous"  # a name from targets.base.LAYOUTS
    scalars: tuple[tuple[str, float], ...] = ()  # (argument, value) set instead of make_inputs' choice
    long: int = 0  # further calls on the same inputs after the others: each must launch as the first did
    sample: int = 0  # a range case: run this many indices of each launch's longest grid axis (0: every program)

    @property
    def shape_numel(self) -> int:
        return numel(self.shape)

    @property
    def label(self) -> str:
        cut = f" (cut from {list(self.requested_shape)})" if self.shape != self.requested_shape else ""
        extra = "".join(f" {name}={value:g}" for name, value in self.scalars)
        extra += f" {self.layout}" if self.layout != "contiguous" else ""
        return f"{list(self.shape)}{cut} {dtype_name(self.dtype)} {self.kind} seed {self.seed}{extra}"

    @property
    def front_guard(self) -> bool:
        """Whether the worker puts a guard band in front of the inputs (a storage offset > 0)."""
        return self.layout not in AT_OFFSET_ZERO


def select_profile_shapes(shapes, limit: int) -> list:
    """At most `limit` of the profile's shapes (ProfiledShape): the smallest and the largest, then the most
    called. A served model's profile holds a shape per batch size and prefill length (16 for rms_norm in the
    default tiny run), which checks the same code paths again and again at a cost per shape."""
    shapes = [ProfiledShape.of(s) for s in shapes]  # (shape, dtype, calls) tuples are read too
    if limit <= 0 or len(shapes) <= limit:
        return shapes
    by_size = sorted(shapes, key=lambda s: numel(s.shape))
    chosen = [by_size[0], by_size[-1]]
    for s in sorted(shapes, key=lambda s: -s.calls):
        if len(chosen) >= limit:
            break
        if s not in chosen:
            chosen.append(s)
    return [s for s in shapes if s in chosen]


def run_rng(target: Target, salt: bytes) -> random.Random:
    """The run's own draw of sizes: secret (keyed by the salt), the same for the whole run."""
    return random.Random(hashlib.blake2b(f"shapes|{target.name}".encode(), key=salt).digest())


def contract_shapes(target: Target, config: PlanConfig, salt: bytes) -> list[tuple[Shape, str]]:
    """The shapes every model preset passes this op (at a drawn row count) and the run's random shapes."""
    rng = run_rng(target, salt)
    found = []
    if target.model_shapes is not None:
        rows = random_rows(rng)
        found += [(s, "model") for preset in config.presets for s in target.model_shapes(preset, rows)]
    if target.random_shapes is not None:
        found += [(s, "random") for s in target.random_shapes(rng)]
    return found


def scalar_values(target: Target, config: PlanConfig) -> dict[str, list[float]]:
    """Each scalar argument's values (the target's own and the presets'), sorted."""
    values = {name: list(v) for name, v in target.scalar_values.items()}
    for name, key in target.scalar_from_model.items():
        values.setdefault(name, []).extend(float(p[key]) for p in config.presets if key in p)
    return {name: sorted(set(map(float, v))) for name, v in values.items()}


def primary_shapes(target: Target, shapes, config: PlanConfig,
                   salt: bytes = b"") -> list[tuple[Shape, str, int, torch.dtype | None]]:
    """(shape, source, calls, profile dtype) for the profile's shapes (at most `verify.max_profile_shapes`) or the
    defaults, then the edges, the model presets' shapes and the run's random ones."""
    found: list[tuple[Shape, str, int, torch.dtype | None]] = []
    if shapes:
        for s in select_profile_shapes(shapes, config.max_profile_shapes):
            try:
                found.append((s.shape, "profile", s.calls, parse_dtype(s.dtype)))
            except ValueError:
                raise UserError(f"profile shape {list(s.shape)} has dtype '{s.dtype}', which the checker does not know "
                                "(re-profile, or run with verify.shapes=default)") from None
    else:
        found += [(tuple(s), "default", 0, None) for s in target.default_shapes]
    found += [(tuple(s), "edge", 0, None) for s in target.edge_shapes]
    found += [(tuple(s), source, 0, None) for s, source in contract_shapes(target, config, salt)]
    first: dict[Shape, tuple[Shape, str, int, torch.dtype | None]] = {}
    for f in found:
        first.setdefault(f[0], f)  # each shape once, at its first place
    return list(first.values())


@dataclasses.dataclass(frozen=True)
class _Planned:
    """A case before its turn in the layouts and scalar values is known."""

    requested: Shape  # before the cut
    shape: Shape  # as run
    dtype: torch.dtype
    kind: str
    seed: int
    source: str
    calls: int = 0
    checks: bool = False  # a repeat and a refill
    sample: int = 0
    layout: str | None = None  # None: its turn in the layouts


def _planned(target: Target, shapes, config: PlanConfig, salt: bytes) -> list[_Planned]:
    """Every (shape, dtype, kind, seed) of the plan: each primary shape in every dtype (or its turn's alone:
    `every_dtype`) with normal inputs, large inputs in the half dtypes, NaN/Inf, further seeds (the presets' and
    drawn shapes: normal, and NaN/Inf in one dtype); on the interpreter, then the range cases."""
    dtypes, cut = target_dtypes(target, config), target.cut_shape  # the target's CPU cut (default: base.cut_rows)
    main = (None, None) if config.whole else (config.max_interpreter_rows, config.max_interpreter_elements)
    extra = (None, None) if config.whole else (config.max_interpreter_rows_extra, config.max_interpreter_elements // 4)
    found: list[_Planned] = []
    for n, (requested, source, calls, profile_dtype) in enumerate(primary_shapes(target, shapes, config, salt)):
        every = config.every_dtype or config.whole or source in ("profile", "default")  # else its turn's dtype
        turn = n % len(dtypes)  # the dtype whose turn the shape is
        for d, dtype in [(d, t) for d, t in enumerate(filter(None, dict.fromkeys([profile_dtype, *dtypes])))
                         if every or d == turn]:
            contract = source in CONTRACT_SOURCES and not config.whole
            fewer_kinds = contract or source == "edge" and not config.edge_kinds and not config.whole
            small = cut(requested, *extra)

            def add(shape: Shape, kind: str, seed: int = 0, checks: bool = False) -> None:
                found.append(_Planned(requested, shape, dtype, kind, seed, source, calls, checks))  # noqa: B023

            # a repeat and a refill in one dtype of each shape (of one dtype: one round of turns in len(dtypes))
            checks = config.whole or d == turn and (every or n % len(dtypes) ** 2 < len(dtypes))
            # and there a preset's or drawn call of at most `verify.range_whole_work` runs as served (the extra cut's
            # quarter shrank 5 tokens of 128 heads to 3, and a kernel wrong only past the third met that nowhere)
            served = contract and d == turn and work(target, requested) <= config.range_whole_work
            add(requested if served else cut(requested, *(extra if contract else main)), "normal", checks=checks)
            if fewer_kinds:  # sizes and layouts: normal inputs (and NaN/Inf in one dtype)
                if checks:
                    add(small, "special")
                continue
            if dtype in HALF_DTYPES:
                add(small, "large")
            add(small, "special")
            for seed in range(1, config.seeds):
                add(small, "normal", seed)
    if not config.whole:
        served_dtype = next((d for d in dtypes if d == torch.bfloat16), dtypes[0])
        found += [_Planned(requested, shape, dtype, "normal", 0, "range", sample=range_sample(target, shape, config))
                  for requested, shape in range_shapes(target, shapes, config)
                  for dtype in sorted(dtypes, key=lambda d: d != served_dtype)]  # the served call first
        across = {shape: requested for kind in ("span", "concurrency")  # each shape once: a decode's are both
                  for requested, shape in range_shapes(target, shapes, config, kind)}
        found += [_Planned(requested, shape, served_dtype, "normal", 0, "range",
                           sample=0 if config.concurrency_whole else range_sample(target, shape, config))
                  for shape, requested in across.items()]
        found += [_Planned(requested, shape, served_dtype, "normal", 0, "range", sample=range_sample(target, shape,
                                                                                                    config))
                  for requested, shape in drawn_steps(target, config, salt)]
        largest = served_whole(target, shapes, config)  # run whole (together_shapes makes no run of it)
        together = [(requested, shape, "together", range_sample(target, shape, config))
                    for requested, shape in together_shapes(target, shapes, config)]
        for requested, shape, source, sample in [*together, *([(largest, largest, "range", 0)] if largest else [])]:
            # the largest sizes meet every view the target declares (its strided layouts) in the served dtype, after
            # the served call (contiguous, first); the turns alone left bf16 dense there, where a kernel ignored a
            # padded row stride or vLLM's cache view
            views = [v for v in target.layouts if v not in DENSE_LAYOUTS and (v != "padded" or len(shape) > 1)]
            found += [_Planned(requested, shape, served_dtype, "normal", 0, source, sample=sample, layout=layout)
                      for layout in (None, *views)]
    return found


def drawn_steps(target: Target, config: PlanConfig, salt: bytes) -> list[tuple[Shape, Shape]]:
    """(served shape, shape run) for steps of token counts drawn per run (`step_counts`), each of a drawn preset's
    shapes that follow the step's tokens (`Target.step_shapes`, else its model shapes): the cheapest of its range cuts
    and itself that keeps them (the dims that follow the count), within the together budget (`verify.together_values`
    and `together_flops`: none on the quick plan). Engines serve every count up to a step's; the other cases run a few
    counts up to 64, the presets' served counts and the cuts' (powers of two and their remainders), and a kernel that
    switches on a runtime count (a ragged last group of 256 rows past the first, a decode batch of 96, 66 to 255 tokens
    of a MoE step: a round-14 attacker's three; a batch padded to a CUDA graph's size past 64: a round-15 attacker's)
    makes no launch signature of its own. The draw is secret, so a kernel wrong in one octave meets it every run, and
    one wrong at a single count only by chance (the GPU's plan runs the profile's counts)."""
    shapes_of = target.step_shapes or target.model_shapes
    if shapes_of is None:
        return []
    rng = run_rng(target, salt + b"steps")
    found: list[tuple[Shape, Shape]] = []
    for rows in step_counts(rng, config.served_rows):
        steps = [(shape, [d for d, (a, b) in enumerate(zip(shape, other)) if a != b])
                 for p in config.presets for shape, other in zip(shapes_of(p, rows), shapes_of(p, rows + 2))]
        options = []  # (a preset's shape that follows the step's tokens, its cheapest run that keeps them)
        for shape, dims in steps:
            if not dims:
                continue
            runs = [run for run in (_fits(target, r, config) for r in (*target.range_cuts(shape), shape))
                    if run is not None and all(run[d] == shape[d] for d in dims)]
            if runs:
                options.append((tuple(shape), min(runs, key=lambda r: work(target, r))))
        if options:  # a preset none of whose runs fits (Mixtral's 14336 x 4096 experts at 13 tokens) is not drawn
            found.append(rng.choice(options))
    return found


def together_shapes(target: Target, shapes, config: PlanConfig) -> list[tuple[Shape, Shape]]:
    """(served shape, shape run) with dims at their served sizes together: each dim and each pair of dims that the
    extra cases' cut shrinks in a served shape, the others as that cut leaves them (the target's own, kv heads say),
    halved toward the cut (the dim furthest above it first) until the case holds `verify.together_values` values
    and its reference takes `verify.together_flops`; for each dim and each pair the shape that reaches furthest in
    them and the one of most values (a tensor past a size: softmax's rows x width), and for a pair the one at the
    served size of its dim furthest above the cut with the other as large as fits. The range cases keep one
    dim served with the others small: a kernel that goes wrong only where two are large (a weight of more than 1024
    x 1024, a tensor past 4M values, a kv head past the first at a long context) meets them here, in a sample of
    its programs. What had to be halved, the verdict names (together_note)."""
    return list(dict.fromkeys((served, run) for served, run, _ in together_runs(target, shapes, config) if run))


def together_runs(target: Target, shapes, config: PlanConfig) -> list[tuple[Shape, Shape | None, Shape]]:
    """(served, run, largest) for each dim and pair of shrunk dims: its furthest and its largest run, and a pair's
    furthest corner (_corner) (None: none fits), the served shape each was made from, and the largest served shape
    the pair is shrunk in (together_shapes; the note names a run smaller than that)."""
    if config.together_values <= 0:
        return []
    pairs: dict[tuple[int, ...], dict[Shape, Shape]] = {}
    corners: dict[tuple[int, ...], dict[Shape, Shape]] = {}
    largest: dict[tuple[int, ...], Shape] = {}
    whole = served_whole(target, shapes, config)
    for served in served_shapes(target, shapes, config):
        if served == whole:  # it runs uncut with every program
            continue
        base = extra_cut(target, served, config)
        shrunk = [d for d, (b, s) in enumerate(zip(base, served)) if b < s]
        for pair in [*itertools.combinations(shrunk, 1), *itertools.combinations(shrunk, 2)]:
            largest[pair] = max(largest.get(pair, served), served, key=numel)
            run = _together(target, base, served, pair, config)
            if run is not None:
                pairs.setdefault(pair, {}).setdefault(run, served)
            run = _corner(target, base, served, pair, config)
            if run is not None:
                corners.setdefault(pair, {}).setdefault(run, served)
    found: list[tuple[Shape, Shape | None, Shape]] = []
    for pair, served in largest.items():
        runs = pairs.get(pair, {})
        furthest = max(runs, key=lambda r: (math.prod(r[d] for d in pair), numel(r)), default=None)
        biggest = max(runs, key=lambda r: (numel(r), math.prod(r[d] for d in pair)), default=None)
        # and for a pair, the run at the served size of its dim furthest above the cut with the other as large as
        # fits, the furthest such (a kernel wrong past 2048 keys in any sequence but the first two)
        ends = corners.get(pair, {})
        corner = max(ends, key=lambda r: (math.prod(r[d] for d in pair), numel(r)), default=None)
        chosen: list[Shape | None] = [run for run in dict.fromkeys((furthest, biggest, corner)) if run is not None]
        runs = {**runs, **ends}
        found += [(runs[run] if run else served, run, served) for run in chosen or [None]]
    return found


def extra_cut(target: Target, shape: Shape, config: PlanConfig) -> Shape:
    """A served shape as the interpreter's extra cases cut it (`verify.max_interpreter_rows_extra` rows, a quarter of
    the elements): the size the dims a case raises toward their served values start from."""
    return tuple(target.cut_shape(shape, config.max_interpreter_rows_extra, config.max_interpreter_elements // 4))


def _together(target: Target, base: Shape, served: Shape, pair: tuple[int, ...], config: PlanConfig) -> Shape | None:
    """`base` with the dims of `pair` at their served sizes, halved toward the base until the case fits, the last
    halved then as large as fits (not a power of two below the served size: 1820 of 2048 rows); None where not even
    the base's fit."""
    run, last = list(base), None
    for d in pair:
        run[d] = served[d]
    while (shape := _fits(target, run, config)) is None:
        over = [d for d in pair if run[d] > base[d]]
        if not over:
            return None
        d = max(over, key=lambda d: run[d] / max(1, base[d]))
        last, run[d] = (d, run[d] - 1), max(base[d], run[d] // 2)
    if last is not None:
        shape = _grown(target, run, *last, config)
    return shape if shape != base else None


def _corner(target: Target, base: Shape, served: Shape, pair: tuple[int, ...], config: PlanConfig) -> Shape | None:
    """For a pair: `base` with its dim furthest above the cut at its served size and the other at the largest size
    that fits (3 sequences at 4096 keys where 4 do not fit); None for one dim, or where not even the other's base
    size fits."""
    if len(pair) != 2:
        return None
    d, e = sorted(pair, key=lambda d: -served[d] / max(1, base[d]))
    run = list(base)
    run[d], run[e] = served[d], base[e]
    return _grown(target, run, e, served[e], config)


def _fits(target: Target, run, config: PlanConfig) -> Shape | None:
    """`run` made callable (Target.coherent), if it takes at most the together budget; else None."""
    shape = tuple(target.coherent(tuple(run)))
    return shape if (sum(target.io_elements(shape)) <= config.together_values
                     and target.flops(shape, torch.float32) <= config.together_flops) else None


def _grown(target: Target, run, d: int, high: int, config: PlanConfig) -> Shape | None:
    """`run` with dim `d` at the largest size from its own up to `high` that fits (a case's size grows with each
    dim); None where its own does not."""
    def at(v: int) -> Shape | None:
        return _fits(target, [*run[:d], v, *run[d + 1:]], config)

    low = run[d]
    if at(low) is None:
        return None
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if at(mid) is not None else (low, mid - 1)
    return at(low)


def served_whole(target: Target, shapes, config: PlanConfig) -> Shape | None:
    """The largest served call (sizes together) that takes at most `verify.served_whole_work` values and FLOPs,
    uncut: a range case runs it with every program, in the dtype served at that size (bf16 where the target has it:
    every preset serves bf16, and only the presets reach it; 22 s of rotary's default plan in the two others). A
    kernel that switches at a product of sizes (one program too few past a step's size, another path past 2^24
    values) is wrong only there, and a sample cannot show an output no program wrote; the row ops' largest calls
    fit (rms_norm [2048, 4096], silu_and_mul's Llama 3 [2048, 28672], 20 s of the interpreter: a round-12 attacker's
    persistent grid past 2^25 values left 464 rows unwritten there, where [2048, 9728] took the other path), the
    GEMMs', attention's and MoE's only at small sizes (the verdict names the rest)."""
    fits = [s for s in served_shapes(target, shapes, config) if work(target, s) <= config.served_whole_work]
    return max(fits, key=numel, default=None)


def plan(target: Target, shapes, config: PlanConfig, salt: bytes = b"") -> list[Case]:
    """Every case to run, cheapest shapes first (a candidate that crashes, crashes early), then the long run. The
    layouts the target declares take turns over the cases (over the range and together cases on their own, but a
    range shape's first: a kernel that ignores a stride only past the ordinary cases' rows meets each layout there)
    and its scalar values over each shape's cases, so each is met many times, at served sizes too."""
    cases: list[Case] = []
    seen: set = set()
    layouts, scalars = target.layouts, scalar_values(target, config)
    shape_order: dict[Shape, int] = {}
    taken: collections.Counter[Shape] = collections.Counter()
    turns = collections.Counter({True: 0, False: 0})  # layouts' turns: the ordinary cases, the range cases
    ranged_shapes: set[Shape] = set()
    for p in sorted(_planned(target, shapes, config, salt), key=lambda p: numel(p.shape)):
        key = (p.shape, p.dtype, p.kind, p.seed, p.sample, p.layout)
        if key in seen:
            continue
        seen.add(key)
        i = len(cases)
        ranged = p.source in ("range", "together")
        # a range shape's first case runs as the served call is made (contiguous, make_inputs' own scalars: the
        # launches a dry call makes, vLLM's window a constexpr); its others take the turns too (a stride or an eps
        # ignored only past 256 rows)
        first = ranged and (p.shape not in ranged_shapes or not config.served_turns)
        if ranged:
            ranged_shapes.add(p.shape)
        layout = "contiguous" if first else p.layout or layouts[turns[ranged] % len(layouts)]
        turns[ranged] += not first and not p.layout
        if layout == "padded" and len(p.shape) < 2:  # a 1-D input has no rows to pad
            layout = "contiguous"
        # each scalar takes its values in turn over a shape's cases, from a place of the shape's own: a shape of n
        # cases meets n of each scalar's values (paged attention's windows and scales, eps)
        j, start = taken[p.requested], shape_order.setdefault(p.requested, len(shape_order))
        taken[p.requested] += 1
        chosen = () if first else tuple((name, v[(start + j) % len(v)]) for name, v in scalars.items())
        cases.append(Case(index=i, shape=p.shape, dtype=p.dtype, kind=p.kind, seed=p.seed, source=p.source,
                          requested_shape=p.requested, calls=p.calls, repeat=p.checks, refill=p.checks, layout=layout,
                          scalars=chosen, sample=p.sample))
    if cases:  # the cheapest case ends with a long run of calls (a count kept between calls shows there), run last:
        # a wrong kernel fails on the others first, without paying for thousands of calls
        moved = [*cases[1:], dataclasses.replace(cases[0], long=long_calls(target, config, salt))]
        cases = [dataclasses.replace(c, index=i) for i, c in enumerate(moved)]
    return cases


def served_shapes(target: Target, shapes, config: PlanConfig) -> list[Shape]:
    """Every shape the op is served at: the profile's (all of them), or the defaults without one, and every
    preset's at the most rows the engine serves in a step."""
    served = [tuple(ProfiledShape.of(s).shape) for s in shapes] if shapes else [tuple(s) for s in
                                                                                 target.default_shapes]
    if target.model_shapes is not None:
        served += [tuple(s) for p in config.presets for s in target.model_shapes(p, config.served_rows)]
    return list(dict.fromkeys(served))


def served_calls(target: Target, shapes, config: PlanConfig) -> list[tuple[Shape, torch.dtype]]:
    """(shape, dtype): each served shape in each of the target's dtypes."""
    dtypes = target_dtypes(target, config)
    return [(shape, dtype) for shape in served_shapes(target, shapes, config) for dtype in dtypes]


def range_shapes(target: Target, shapes, config: PlanConfig, kind: str = "range") -> list[tuple[Shape, Shape]]:
    """(served shape, a shape its range cases run) for the target's served shapes (every profile shape, or the
    defaults; every preset's at the most rows served). For each of the target's range cuts (`Target.range_cuts`:
    the i-th shape of each served shape's cuts), at most `verify.max_range_shapes` of them (0: all), chosen so that
    every value each dim takes in any of them is in at least one (a greedy cover, largest first on ties).
    `kind` "concurrency": the target's concurrency cuts instead (`Target.concurrency_cuts`), at most 2 of them
    (millions of values each); "span": its span cuts (`Target.span_cuts`), as many as cover every value."""
    cuts = {"range": target.range_cuts, "concurrency": target.concurrency_cuts, "span": target.span_cuts}[kind]
    limit = {"range": config.max_range_shapes, "concurrency": min(config.max_range_shapes or 2, 2), "span": 0}[kind]
    if cuts is None:
        return []
    families: list[dict[Shape, Shape]] = []
    for s in served_shapes(target, shapes, config):
        for i, run in enumerate(cuts(tuple(s))):
            if i == len(families):
                families.append({})
            families[i].setdefault(tuple(run), tuple(s))
    chosen: dict[Shape, Shape] = {}  # each shape once
    for runs in families:
        for served, run in _cover(runs, limit):
            chosen.setdefault(run, served)
    return [(served, run) for run, served in chosen.items()]


def _cover(runs: dict[Shape, Shape], limit: int) -> list[tuple[Shape, Shape]]:
    left = list(runs)
    wanted = {(d, v) for r in left for d, v in enumerate(r)}
    chosen: list[Shape] = []
    while left and wanted and (limit <= 0 or len(chosen) < limit):
        best = max(left, key=lambda r: (len(wanted & set(enumerate(r))), numel(r)))
        if not wanted & set(enumerate(best)):
            break
        chosen.append(best)
        left.remove(best)
        wanted -= set(enumerate(best))
    return [(runs[r], r) for r in chosen]


def range_sample(target: Target, shape: Shape, config: PlanConfig) -> int:
    """How many indices of each launch's longest grid axis a range case at `shape` runs: 0, every program, where
    its inputs and outputs hold at most `verify.range_whole_work` values and it takes at most as many FLOPs in
    fp32 (every output is then compared, so a grid that leaves some rows unwritten shows, as a persistent kernel's
    rounded-down share of rows does); else `verify.range_programs` (a sample compares only what its programs
    wrote)."""
    return 0 if work(target, shape) <= config.range_whole_work else config.range_programs


def work(target: Target, shape: Shape) -> int:
    """A call's size for the plan's budgets: its values held or its reference's FLOPs, whichever is more."""
    return max(sum(target.io_elements(shape)), target.flops(shape, torch.float32))


def long_calls(target: Target, config: PlanConfig, salt: bytes) -> int:
    """How many calls end the cheapest case: `verify.long_calls`, and up to half as many again, drawn per run (a
    counter that waits for a known number of calls would wait one more)."""
    n = config.long_calls
    return n + run_rng(target, salt + b"long").randrange(n // 2 + 1) if n > 0 else 0


def target_dtypes(target: Target, config) -> list[torch.dtype]:
    """The target's own dtypes, narrowed to `verify.dtypes` when that is set (null: all of the target's).
    `config`: a PlanConfig or the `verify` config node."""
    wanted = config.dtypes
    if not wanted:
        return list(target.dtypes)
    narrowed = [d for d in target.dtypes if d in {parse_dtype(str(w)) for w in wanted}]
    if not narrowed:
        raise UserError(f"verify.dtypes={list(wanted)} leaves no dtype of {target.name}, which runs in "
                        f"{', '.join(dtype_name(d) for d in target.dtypes)}: name one of those, or verify.dtypes=null")
    return narrowed
