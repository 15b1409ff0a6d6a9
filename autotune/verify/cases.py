"""The case plan: which shapes, dtypes, input kinds and seeds a candidate is checked on, and their data.

Shapes come from the profile (with their call counts) or the target's defaults, plus the target's edge
shapes (one row, widths that are not powers of two, widths above 4096, many rows). Every shape is run
in every dtype with realistic inputs; each shape also gets a repeat on the same inputs (bitwise
agreement: races show here) and a refill of the same buffers with new values (caching by pointer shows
here), rotating over the dtypes. Large-magnitude inputs run in the half dtypes (fp32 accumulation is what
they test), NaN/Inf inputs and further seeds in every dtype.

Cost on CPU: the Triton interpreter runs one program instance after another in Python, about 0.8 ms
each in fp32 and 1.5x that in bf16 (measured, one row per program: [64, 4096] 54 ms, [1024, 64] 0.76 s),
so shapes are cut to `verify.max_interpreter_rows` rows and `verify.max_interpreter_elements` elements
for the realistic cases, and to `verify.max_interpreter_rows_extra` rows and a quarter of the elements
for the extra kinds and seeds; shapes that become equal run once, and the report lists every cut. With
the defaults a one-row-per-program RMSNorm runs 77 cases in 7.5 s wall on 2 cores (`autotune verify`,
start-up included). On a GPU nothing is cut.

All inputs, references and the fp64 golden are made here, in the judging process.
"""

from __future__ import annotations

import dataclasses
import hashlib

import torch

from autotune.errors import UserError
from autotune.profile.records import ProfiledShape
from autotune.targets.base import Shape, Target, cut_rows, dtype_name, parse_dtype

__all__ = ["Case", "CaseData", "cut_rows", "make_data", "plan"]  # cut_rows: the default cut, from base

HALF_DTYPES = (torch.float16, torch.bfloat16)


@dataclasses.dataclass(frozen=True)
class Case:
    index: int
    shape: Shape  # as run (rows cut on CPU)
    dtype: torch.dtype
    kind: str  # normal | large | special
    seed: int
    source: str  # profile | default | edge
    requested_shape: Shape  # before the cut
    calls: int = 0
    repeat: bool = False  # call twice on the same inputs: outputs must agree bitwise
    refill: bool = False  # refill the same buffers with new values and call again

    @property
    def shape_numel(self) -> int:
        return _numel(self.shape)

    @property
    def label(self) -> str:
        cut = f" (cut from {list(self.requested_shape)})" if self.shape != self.requested_shape else ""
        return f"{list(self.shape)}{cut} {dtype_name(self.dtype)} {self.kind} seed {self.seed}"


@dataclasses.dataclass
class CaseData:
    """The case's inputs and the judge's own answers for them (never sent to the candidate's process)."""

    args: tuple
    reference: tuple[torch.Tensor, ...]
    golden: tuple[torch.Tensor, ...]  # the reference on fp64 inputs, in fp64
    refill_args: tuple | None = None
    refill_reference: tuple[torch.Tensor, ...] | None = None
    refill_golden: tuple[torch.Tensor, ...] | None = None


def select_profile_shapes(shapes, limit: int) -> list:
    """At most `limit` of the profile's shapes (ProfiledShape): the smallest and the largest, then the most
    called. A served model's profile holds a shape per batch size and prefill length (16 for rms_norm in the
    default tiny run), which checks the same code paths again and again at a cost per shape."""
    shapes = [ProfiledShape.of(s) for s in shapes]  # (shape, dtype, calls) tuples are read too
    if limit <= 0 or len(shapes) <= limit:
        return shapes
    by_size = sorted(shapes, key=lambda s: _numel(s.shape))
    chosen = [by_size[0], by_size[-1]]
    for s in sorted(shapes, key=lambda s: -s.calls):
        if len(chosen) >= limit:
            break
        if s not in chosen:
            chosen.append(s)
    return [s for s in shapes if s in chosen]


def selection_note(shapes, limit: int) -> str:
    """One line saying which profile shapes were checked, when not all of them were."""
    shapes = [ProfiledShape.of(s) for s in shapes or []]
    chosen = select_profile_shapes(shapes, limit)
    if len(chosen) == len(shapes):
        return ""
    total = sum(s.calls for s in shapes) or 1
    covered = sum(s.calls for s in chosen) / total
    return (f"profile shapes: {len(chosen)} of {len(shapes)} checked (the smallest, the largest and the most "
            f"called; {covered:.0%} of the profiled calls; verify.max_profile_shapes={limit})")


def primary_shapes(target: Target, shapes, limit: int = 0) -> list[tuple[Shape, str, int, torch.dtype | None]]:
    """(shape, source, calls, profile dtype) for the profile's shapes (at most `limit`, 0 = all) or the
    defaults, then the edges."""
    found = []
    if shapes:
        for s in select_profile_shapes(shapes, limit):
            try:
                found.append((s.shape, "profile", s.calls, parse_dtype(s.dtype)))
            except ValueError:
                raise UserError(f"profile shape {list(s.shape)} has dtype '{s.dtype}', which the checker does not know "
                                "(re-profile, or run with verify.shapes=default)") from None
    else:
        found += [(tuple(s), "default", 0, None) for s in target.default_shapes]
    found += [(tuple(s), "edge", 0, None) for s in target.edge_shapes]
    return found


def plan(target: Target, shapes, cfg_verify, on_gpu: bool) -> list[Case]:
    """Every case to run, cheapest shapes first (a candidate that crashes, crashes early)."""
    dtypes = target_dtypes(target, cfg_verify)
    cut_rows = target.cut_shape  # the target's own CPU cut; the default cuts leading dims (base.cut_rows)
    elements = int(cfg_verify.max_interpreter_elements)
    main = (None, None) if on_gpu else (int(cfg_verify.max_interpreter_rows), elements)
    extra = (None, None) if on_gpu else (int(cfg_verify.max_interpreter_rows_extra), elements // 4)
    specs, seen = [], set()
    limit = int(cfg_verify.get("max_profile_shapes") or 0)
    for n, (requested, source, calls, profile_dtype) in enumerate(primary_shapes(target, shapes, limit)):
        for d, dtype in enumerate(t for t in dict.fromkeys([profile_dtype, *dtypes]) if t is not None):
            checks = on_gpu or d == n % len(dtypes)
            specs.append((requested, cut_rows(requested, *main), dtype, "normal", 0, source, calls, checks))
            if dtype in HALF_DTYPES:
                specs.append((requested, cut_rows(requested, *extra), dtype, "large", 0, source, calls, False))
            specs.append((requested, cut_rows(requested, *extra), dtype, "special", 0, source, calls, False))
            for seed in range(1, int(cfg_verify.seeds)):
                specs.append((requested, cut_rows(requested, *extra), dtype, "normal", seed, source, calls, False))
    cases = []
    for requested, shape, dtype, kind, seed, source, calls, checks in sorted(specs, key=lambda s: _numel(s[1])):
        key = (shape, dtype, kind, seed)
        if key in seen:
            continue
        seen.add(key)
        cases.append(Case(index=len(cases), shape=shape, dtype=dtype, kind=kind, seed=seed, source=source,
                          requested_shape=requested, calls=calls, repeat=checks, refill=checks))
    return cases


def target_dtypes(target: Target, cfg_verify) -> list[torch.dtype]:
    """The target's own dtypes, narrowed to `verify.dtypes` when that is set (null: all of the target's)."""
    wanted = cfg_verify.get("dtypes")
    if not wanted:
        return list(target.dtypes)
    narrowed = [d for d in target.dtypes if d in {parse_dtype(str(w)) for w in wanted}]
    if not narrowed:
        raise UserError(f"verify.dtypes={list(wanted)} leaves no dtype of {target.name}, which runs in "
                        f"{', '.join(dtype_name(d) for d in target.dtypes)}: name one of those, or verify.dtypes=null")
    return narrowed


def _numel(shape: Shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def generator(target: Target, shape: Shape, dtype: torch.dtype, kind: str, seed: int) -> torch.Generator:
    """A generator seeded from the case itself: the same case always gets the same inputs."""
    text = f"{target.name}|{list(shape)}|{dtype_name(dtype)}|{kind}|{seed}".encode()
    return torch.Generator().manual_seed(int.from_bytes(hashlib.sha256(text).digest()[:8], "little"))


def as_tuple(out) -> tuple[torch.Tensor, ...]:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def answers(target: Target, args: tuple) -> tuple[tuple, tuple]:
    """(reference outputs, fp64 golden outputs) for these inputs."""
    reference = as_tuple(target.reference(*args))
    wide = tuple(a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)
    golden = as_tuple(target.reference(*wide))
    return reference, golden


def make_data(target: Target, case: Case) -> CaseData:
    args = tuple(target.make_inputs(case.shape, case.dtype, generator(target, case.shape, case.dtype, case.kind,
                                                                       case.seed), case.kind))
    reference, golden = answers(target, args)
    data = CaseData(args=args, reference=reference, golden=golden)
    if case.refill:
        gen = generator(target, case.shape, case.dtype, "refill", case.seed)
        data.refill_args = tuple(target.make_inputs(case.shape, case.dtype, gen, "normal"))
        data.refill_reference, data.refill_golden = answers(target, data.refill_args)
    return data


def cut_note(target: Target, shapes, cfg_verify, on_gpu: bool) -> str:
    """What was left out of the plan: profile shapes not checked, shapes cut for the interpreter; or ''."""
    limit = int(cfg_verify.get("max_profile_shapes") or 0)
    notes = [selection_note(shapes, limit)]
    limits = (int(cfg_verify.max_interpreter_rows), int(cfg_verify.max_interpreter_elements))
    cut = [(s, target.cut_shape(s, *limits)) for s, *_ in primary_shapes(target, shapes, limit)]
    cut = list(dict.fromkeys((a, b) for a, b in cut if a != b))
    if cut and not on_gpu:
        pairs = ", ".join(f"{list(a)} -> {list(b)}" for a, b in cut)
        notes.append(f"shapes cut for the CPU interpreter (at most {limits[0]} rows, {limits[1]} elements; extra "
                     f"cases {int(cfg_verify.max_interpreter_rows_extra)} rows): {pairs}")
    return "; ".join(n for n in notes if n)
