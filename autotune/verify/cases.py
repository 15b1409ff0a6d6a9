"""The case plan: which shapes, dtypes, input kinds, layouts, scalar values and seeds a candidate is checked
on, and their data.

Shapes come from the profile (with their call counts) or the target's defaults, plus the target's edge
shapes (one row, widths that are not powers of two, widths above 4096, many rows), the shapes every model
preset in autotune/conf/model/ passes the op (its widths: hidden, 2 x intermediate, heads x head_dim, context) and
shapes drawn for this run (prime and odd widths, 2^k + small, row counts above 32 that are not a multiple
of 32; 1-D, 2-D and 3-D). Every shape is run in every dtype with realistic inputs; each shape also gets a
repeat on the same inputs (bitwise agreement: races show here) and a refill of the same buffers with new
values (caching by pointer shows here), rotating over the dtypes. Large-magnitude inputs run in the half
dtypes (fp32 accumulation is what they test), NaN/Inf inputs and further seeds in every dtype. The
layouts the target declares (dense at storage offset 0 and > 0, padded rows, q/k as views of the fused qkv
projection) and its scalar argument values (RMSNorm's eps) take turns over the cases.

Nothing about a case's inputs is public: they and the drawn sizes come from generators keyed by a salt
the judge draws per run (`secrets`) and never sends to the candidate's process, which gets tensors only.

Cost on CPU: the Triton interpreter runs one program instance after another in Python, about 0.8 ms
each in fp32 and 1.5x that in bf16 (measured, one row per program: [64, 4096] 54 ms, [1024, 64] 0.76 s),
so shapes are cut to `verify.max_interpreter_rows` rows and `verify.max_interpreter_elements` elements
for the realistic cases, and to `verify.max_interpreter_rows_extra` rows and a quarter of the elements
for the extra kinds and seeds and for the preset and drawn shapes (which run normal inputs in every dtype
and NaN/Inf in one); rows are cut, never a width; shapes that become equal run once, and the report lists
every cut. Beside them, on a CPU only, range cases (`range_shapes`, `Target.range_cuts`): served shapes with
every dim a kernel indexes or dispatches on whole, run whole where that is cheap (`range_sample`) and on a drawn
sample of each launch's programs otherwise (autotune.verify.sampling); and, after the dry calls, cases for the
served shapes whose launches no case ran (`coverage_cases`). With the defaults the example RMSNorm runs 146 cases
for 21 s (`autotune verify`, start-up included). On a GPU nothing is cut.

All inputs, references and the fp64 golden are made here, in the judging process.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import random

import torch
from omegaconf import OmegaConf

from autotune.config import conf_dir
from autotune.errors import UserError
from autotune.records import ProfiledShape
from torch.utils._python_dispatch import TorchDispatchMode

from autotune.targets.base import Shape, Target, cut_rows, dtype_name, numel, parse_dtype, random_rows

__all__ = ["Case", "CaseData", "cut_rows", "make_data", "plan"]  # cut_rows: the default cut, from base

HALF_DTYPES = (torch.float16, torch.bfloat16)
AT_OFFSET_ZERO = ("offset0", "qkv_q")  # layouts whose inputs start at storage offset 0
# Shapes the model presets and the run's draw add: on CPU they run normal inputs in every dtype and NaN/Inf
# in one, all cut as the extra cases are (what they test is widths, row tails and masks; the other kinds run
# on the default and edge shapes), which keeps a one-row-per-program RMSNorm at 126 cases instead of 168.
CONTRACT_SOURCES = ("model", "random")
PAD_ELEMENTS = 16  # "padded" rows: stride(-2) = width + 16 (32 bytes in fp16/bf16, 64 in fp32: aligned)


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


@dataclasses.dataclass
class CaseData:
    """The case's inputs and the judge's own answers for them (never sent to the candidate's process)."""

    args: tuple
    reference: tuple[torch.Tensor, ...]
    golden: tuple[torch.Tensor, ...]  # the reference on fp64 inputs, in fp64
    # per argument: the value the reference left in it when the target declares it `mutates`, else None
    written: tuple = ()
    written_golden: tuple = ()
    refill_args: tuple | None = None
    refill_reference: tuple[torch.Tensor, ...] | None = None
    refill_golden: tuple[torch.Tensor, ...] | None = None
    refill_written: tuple = ()
    refill_written_golden: tuple = ()


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


@functools.lru_cache(maxsize=1)
def model_presets() -> tuple[dict, ...]:
    """Every model preset in autotune/conf/model/ as a plain dict: the sizes and scalars the model is served with."""
    return tuple(OmegaConf.to_container(OmegaConf.load(p)) for p in sorted((conf_dir() / "model").glob("*.yaml")))


def run_rng(target: Target, salt: bytes) -> random.Random:
    """The run's own draw of sizes: secret (keyed by the salt), the same for the whole run."""
    return random.Random(hashlib.blake2b(f"shapes|{target.name}".encode(), key=salt).digest())


def contract_shapes(target: Target, salt: bytes) -> list[tuple[Shape, str]]:
    """The shapes every model preset passes this op (at a drawn row count) and the run's random shapes."""
    rng = run_rng(target, salt)
    found = []
    if target.model_shapes is not None:
        rows = random_rows(rng)
        found += [(s, "model") for preset in model_presets() for s in target.model_shapes(preset, rows)]
    if target.random_shapes is not None:
        found += [(s, "random") for s in target.random_shapes(rng)]
    return found


def scalar_variants(target: Target) -> list[tuple[tuple[str, float], ...]]:
    """Every combination of the target's scalar argument values (its own and the presets')."""
    values = {name: list(v) for name, v in target.scalar_values.items()}
    for name, key in target.scalar_from_model.items():
        values.setdefault(name, []).extend(float(p[key]) for p in model_presets() if key in p)
    combos: list[tuple[tuple[str, float], ...]] = [()]
    for name, options in values.items():
        combos = [c + ((name, float(v)),) for c in combos for v in sorted(set(options))]
    return combos


def primary_shapes(target: Target, shapes, limit: int = 0,
                   salt: bytes = b"") -> list[tuple[Shape, str, int, torch.dtype | None]]:
    """(shape, source, calls, profile dtype) for the profile's shapes (at most `limit`, 0 = all) or the
    defaults, then the edges, the model presets' shapes and the run's random ones."""
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
    found += [(tuple(s), source, 0, None) for s, source in contract_shapes(target, salt)]
    seen: set = set()
    return [f for f in found if not (f[0] in seen or seen.add(f[0]))]


def plan(target: Target, shapes, cfg_verify, on_gpu: bool, salt: bytes = b"") -> list[Case]:
    """Every case to run, cheapest shapes first (a candidate that crashes, crashes early). The layouts and
    scalar values the target declares take turns over the cases, so each is met many times."""
    dtypes = target_dtypes(target, cfg_verify)
    cut_rows = target.cut_shape  # the target's own CPU cut; the default cuts leading dims (base.cut_rows)
    elements = int(cfg_verify.max_interpreter_elements)
    main = (None, None) if on_gpu else (int(cfg_verify.max_interpreter_rows), elements)
    extra = (None, None) if on_gpu else (int(cfg_verify.max_interpreter_rows_extra), elements // 4)
    specs, seen = [], set()
    limit = int(cfg_verify.get("max_profile_shapes") or 0)
    for n, (requested, source, calls, profile_dtype) in enumerate(primary_shapes(target, shapes, limit, salt)):
        for d, dtype in enumerate(t for t in dict.fromkeys([profile_dtype, *dtypes]) if t is not None):
            checks = on_gpu or d == n % len(dtypes)
            contract = source in CONTRACT_SOURCES and not on_gpu
            specs.append((requested, cut_rows(requested, *(extra if contract else main)), dtype, "normal", 0, source,
                          calls, checks))
            if contract:  # sizes and layouts: normal inputs (and NaN/Inf in one dtype)
                if checks:
                    specs.append((requested, cut_rows(requested, *extra), dtype, "special", 0, source, calls, False))
                continue
            if dtype in HALF_DTYPES:
                specs.append((requested, cut_rows(requested, *extra), dtype, "large", 0, source, calls, False))
            specs.append((requested, cut_rows(requested, *extra), dtype, "special", 0, source, calls, False))
            for seed in range(1, int(cfg_verify.seeds)):
                specs.append((requested, cut_rows(requested, *extra), dtype, "normal", seed, source, calls, False))
    specs = [(*spec, 0) for spec in specs]
    if not on_gpu:
        specs += [(requested, shape, dtype, "normal", 0, "range", 0, False, range_sample(target, shape, cfg_verify))
                  for requested, shape in range_shapes(target, shapes, int(cfg_verify.get("max_range_shapes") or 0))
                  for dtype in dtypes]
    cases = []
    layouts, scalars = target.layouts, scalar_variants(target)
    for requested, shape, dtype, kind, seed, source, calls, checks, sample in sorted(specs,
                                                                                     key=lambda s: numel(s[1])):
        key = (shape, dtype, kind, seed, sample)
        if key in seen:
            continue
        seen.add(key)
        i = len(cases)
        ranged = source == "range"
        layout = "contiguous" if ranged else layouts[i % len(layouts)]
        if layout == "padded" and len(shape) < 2:  # a 1-D input has no rows to pad
            layout = "contiguous"
        cases.append(Case(index=i, shape=shape, dtype=dtype, kind=kind, seed=seed, source=source,
                          requested_shape=requested, calls=calls, repeat=checks, refill=checks, layout=layout,
                          scalars=() if ranged else scalars[(i // len(layouts)) % len(scalars)], sample=sample))
    if cases:  # the cheapest case ends with a long run of calls: a count kept between calls shows there
        cases[0] = dataclasses.replace(cases[0], long=long_calls(target, cfg_verify, salt))
    return cases


def served_shapes(target: Target, shapes) -> list[Shape]:
    """Every shape the op is served at: the profile's (all of them), or the defaults without one, and every
    preset's at the most rows the engine serves in a step."""
    served = [tuple(ProfiledShape.of(s).shape) for s in shapes] if shapes else [tuple(s) for s in
                                                                                 target.default_shapes]
    if target.model_shapes is not None:
        served += [tuple(s) for p in model_presets() for s in target.model_shapes(p, served_rows())]
    return list(dict.fromkeys(served))


class _NoLargeValues(TorchDispatchMode):
    """make_inputs at a served shape for its layout alone: an op that makes or reads a large tensor gives an unfilled
    tensor of the shape, dtype and strides the op would give (worked out on the meta device); views run as usual,
    and so do ops on small tensors, which may decide shapes (prefill's chunk lengths)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = [a for a in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        size = next((a for a in args if isinstance(a, (list, tuple))), ()) if not tensors else ()
        large = any(t.numel() > 1 << 16 for t in tensors) or (size and numel(size) > 1 << 16)
        if not large or torch.Tag.view_copy in func.tags or func.is_view:
            return func(*args, **kwargs)
        meta = torch.utils._pytree.tree_map(
            lambda a: a.to("meta") if isinstance(a, torch.Tensor) else a, (args, kwargs))
        out = func(*meta[0], **{**meta[1], **({"device": "meta"} if "device" in kwargs or not tensors else {})})
        return torch.utils._pytree.tree_map(
            lambda o: torch.empty_strided(o.shape, o.stride(), dtype=o.dtype) if isinstance(o, torch.Tensor) else o,
            out)


def layout_of(target: Target, shape: Shape, dtype: torch.dtype) -> tuple:
    """The arguments a call at this shape gets, their values aside (large random tensors are left unfilled)."""
    gen = torch.Generator().manual_seed(0)
    with _NoLargeValues():
        return tuple(target.make_inputs(shape, dtype, gen, "normal"))


def served_calls(target: Target, shapes, cfg_verify) -> list[tuple[Shape, torch.dtype]]:
    """(shape, dtype): each served shape in each of the target's dtypes."""
    return [(shape, dtype) for shape in served_shapes(target, shapes) for dtype in target_dtypes(target, cfg_verify)]


def dry_calls(target: Target, shapes, cfg_verify):
    """(shape, dtype, arguments without values) for each served call, made as they are needed."""
    for shape, dtype in served_calls(target, shapes, cfg_verify):
        yield shape, dtype, layout_of(target, shape, dtype)


@functools.lru_cache(maxsize=1)
def served_rows() -> int:
    """The most tokens the engine serves in one step (serve.max_batched_tokens in conf/config.yaml): the rows a
    range case gives the presets' shapes."""
    return int(OmegaConf.load(conf_dir() / "config.yaml").serve.max_batched_tokens)


def range_shapes(target: Target, shapes, limit: int) -> list[tuple[Shape, Shape]]:
    """(served shape, a shape its range cases run) for the target's served shapes (every profile shape, or the
    defaults; every preset's at the most rows served). For each of the target's range cuts (`Target.range_cuts`:
    the i-th shape of each served shape's cuts), at most `limit` of them (0: all), chosen so that every value each
    dim takes in any of them is in at least one (a greedy cover, largest first on ties); then each of the target's
    `range_relax` dims takes its smallest value in every case but one per value."""
    families: list[dict[Shape, Shape]] = []
    for s in served_shapes(target, shapes):
        for i, run in enumerate(target.range_cuts(tuple(s))):
            if i == len(families):
                families.append({})
            families[i].setdefault(tuple(run), tuple(s))
    chosen: dict[Shape, Shape] = {}  # each shape once
    for i, runs in enumerate(families):
        for served, run in _cover(target, runs, limit, relax=i == 0):
            chosen.setdefault(run, served)
    return [(served, run) for run, served in chosen.items()]


def _cover(target: Target, runs: dict[Shape, Shape], limit: int, relax: bool) -> list[tuple[Shape, Shape]]:
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
    cases = [(runs[r], r) for r in chosen]
    for d in target.range_relax if relax else ():  # a value another case keeps need not make this one dear
        low = min(r[d] for r in runs)
        for i, (served, r) in enumerate(cases):
            if any(other[d] == r[d] for j, (_, other) in enumerate(cases) if j != i):
                cases[i] = (served, tuple(target.range_cuts((*r[:d], low, *r[d + 1:]))[0]))  # kept valid by the cut
    return cases


def range_sample(target: Target, shape: Shape, cfg_verify) -> int:
    """How many indices of each launch's longest grid axis a range case at `shape` runs: 0, every program, where
    its inputs and outputs hold at most `verify.range_whole_work` values and it takes at most as many FLOPs in
    fp32 (every output is then compared, so a grid that leaves some rows unwritten shows, as a persistent kernel's
    rounded-down share of rows does); else `verify.range_programs` (a sample compares only what its programs
    wrote)."""
    work = max(sum(target.io_elements(shape)), target.flops(shape, torch.float32))
    if work <= int(cfg_verify.get("range_whole_work") or 0):
        return 0
    return int(cfg_verify.get("range_programs") or 2)


def coverage_cases(target: Target, served, cfg_verify, start: int) -> list[Case]:
    """Cases for served shapes whose launches no planned case ran (`served`: (shape, dtype) of the dry calls that
    made them; a kernel that specialises on a combination of sizes, as vLLM's decode kernel does on the query
    group and head_dim, makes one signature per preset), numbered from `start`: the range cases of each and its
    ordinary cut, one per distinct shape."""
    rows, elements = int(cfg_verify.max_interpreter_rows), int(cfg_verify.max_interpreter_elements)
    cases, seen = [], set()
    for shape, dtype in served:
        shape = tuple(shape)
        runs = [(tuple(r), range_sample(target, tuple(r), cfg_verify), "range") for r in target.range_cuts(shape)]
        for run, sample, source in [*runs, (tuple(target.cut_shape(shape, rows, elements)), 0, "coverage")]:
            if (run, dtype) not in seen:
                seen.add((run, dtype))
                cases.append(Case(index=start + len(cases), shape=run, dtype=dtype, kind="normal", seed=0,
                                  source=source, requested_shape=shape, sample=sample))
    return cases


def long_calls(target: Target, cfg_verify, salt: bytes) -> int:
    """How many calls end the cheapest case: `verify.long_calls`, and up to half as many again, drawn per run (a
    counter that waits for a known number of calls would wait one more)."""
    n = int(cfg_verify.get("long_calls") or 0)
    return n + run_rng(target, salt + b"long").randrange(n // 2 + 1) if n > 0 else 0


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


def generator(target: Target, shape: Shape, dtype: torch.dtype, kind: str, seed: int, salt: bytes) -> torch.Generator:
    """A generator for one case's inputs, keyed by the run's secret salt: the same case of the same run always
    gets the same inputs, and nobody without the salt (the candidate's process never gets it) can make them."""
    text = f"{target.name}|{list(shape)}|{dtype_name(dtype)}|{kind}|{seed}".encode()
    digest = hashlib.blake2b(text, key=salt, digest_size=8).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little"))


def as_tuple(out) -> tuple[torch.Tensor, ...]:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


@dataclasses.dataclass(frozen=True)
class Answers:
    reference: tuple[torch.Tensor, ...]
    golden: tuple[torch.Tensor, ...]  # the reference on fp64 inputs, in fp64
    written: tuple  # per argument: what the reference wrote into it (declared `mutates`), else None
    written_golden: tuple


def expected(target: Target, args: tuple) -> Answers:
    """The reference's outputs and in-place writes for these inputs, and the same in fp64. The reference
    runs on copies: the inputs the candidate gets stay as they were made."""
    names = target.arg_names

    def run(inputs: tuple) -> tuple[tuple, tuple]:
        out = as_tuple(target.reference(*inputs))
        return out, tuple(a if names[i] in target.mutates else None for i, a in enumerate(inputs))

    own = tuple(a.clone() if isinstance(a, torch.Tensor) and names[i] in target.mutates else a
                for i, a in enumerate(args))
    wide = tuple(a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)
    with _aten_gemms():
        (reference, written), (golden, written_golden) = run(own), run(wide)
    return Answers(reference, golden, written, written_golden)


def _aten_gemms():
    """The reference's GEMMs on the CPU by ATen's own code, not oneDNN's: oneDNN's bf16 GEMM (torch 2.13 on an
    AVX-512 CPU, K not a multiple of its block) puts NaN in every output of the row before one whose input holds
    an Inf or NaN, where a GPU's GEMM and ATen's keep them to their own row. About 50 ms for a 2048 x 583 x 583
    range case, a few ms for the others; CUDA tensors do not use these flags."""
    return torch.backends.mkldnn.flags(enabled=False, deterministic=False, allow_tf32=None, fp32_precision=None)


def answers(target: Target, args: tuple) -> tuple[tuple, tuple]:
    """(reference outputs, fp64 golden outputs) for these inputs."""
    a = expected(target, args)
    return a.reference, a.golden


def with_scalars(target: Target, args: tuple, scalars) -> tuple:
    """make_inputs' arguments with the case's scalar values put in by name."""
    args, names = list(args), target.arg_names
    for name, value in scalars:
        args[names.index(name)] = value
    return tuple(args)


def lay_out(args: tuple, layout: str) -> tuple:
    """The arguments in the case's memory layout (targets.base.LAYOUTS). Gaps are NaN: a kernel that reads a
    padding element or the other heads of the qkv row gets NaN in its output. "offset0" and "contiguous"
    differ only in where the worker puts them (Case.front_guard)."""
    x = args[0]
    if layout == "padded" and x.dim() >= 2:
        wide = torch.full((*x.shape[:-1], x.shape[-1] + PAD_ELEMENTS), float("nan"), dtype=x.dtype)
        view = wide[..., :x.shape[-1]]
    elif layout in ("qkv_q", "qkv_k"):
        tokens, heads, head_dim = x.shape
        fused = torch.full((tokens, 3 * heads * head_dim), float("nan"), dtype=x.dtype)
        start = 0 if layout == "qkv_q" else heads * head_dim  # as_strided: the token stride even for 1 token
        view = fused.as_strided((tokens, heads, head_dim), (3 * heads * head_dim, head_dim, 1), start)
    else:
        return args
    view.copy_(x)
    return (view, *args[1:])


def make_data(target: Target, case: Case, salt: bytes = b"") -> CaseData:
    def inputs(kind: str, seed_kind: str) -> tuple:
        gen = generator(target, case.shape, case.dtype, seed_kind, case.seed, salt)
        return with_scalars(target, tuple(target.make_inputs(case.shape, case.dtype, gen, kind)), case.scalars)

    args = inputs(case.kind, case.kind)
    a = expected(target, args)
    data = CaseData(args=lay_out(args, case.layout), reference=a.reference, golden=a.golden, written=a.written,
                    written_golden=a.written_golden)
    if case.refill:
        data.refill_args = inputs("normal", "refill")
        r = expected(target, data.refill_args)
        data.refill_reference, data.refill_golden = r.reference, r.golden
        data.refill_written, data.refill_written_golden = r.written, r.written_golden
    return data


def cut_note(target: Target, shapes, cfg_verify, on_gpu: bool, salt: bytes = b"") -> str:
    """What was left out of the plan: profile shapes not checked, shapes cut for the interpreter; or ''."""
    limit = int(cfg_verify.get("max_profile_shapes") or 0)
    notes = [selection_note(shapes, limit)]
    limits = (int(cfg_verify.max_interpreter_rows), int(cfg_verify.max_interpreter_elements))
    cut = [(s, target.cut_shape(s, *limits)) for s, *_ in primary_shapes(target, shapes, limit, salt)]
    cut = list(dict.fromkeys((a, b) for a, b in cut if a != b))
    if cut and not on_gpu:
        pairs = ", ".join(f"{list(a)} -> {list(b)}" for a, b in cut)
        notes.append(f"shapes cut for the CPU interpreter (at most {limits[0]} rows, {limits[1]} elements; extra "
                     f"cases {int(cfg_verify.max_interpreter_rows_extra)} rows and a quarter of the elements): {pairs}")
    return "; ".join(n for n in notes if n)
