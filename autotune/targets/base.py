"""What a target is: everything the checker, the agent and the profiler need to know about one op.

One module per op (`rms_norm.py`, `silu_and_mul.py`, ...) defines `TARGET = Target(...)`. The reference
function in it is the same function the served model's dispatch point calls by default, so "correct"
means "does what the model did".
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import math
import random
from collections.abc import Callable, Mapping
from pathlib import Path

import torch

from autotune.targets.space import SearchSpace

Shape = tuple[int, ...]
EXAMPLES_DIR = Path(__file__).resolve().parent / "examples"


class OpClass(str, enum.Enum):
    """What bounds an ideal kernel's time: the bytes it must move, the FLOPs it must do, or both in turn.
    It picks the prompt's advice (prompts/advice/<class>.md) and names the roofline floor that applies."""

    MEMORY_BOUND = "memory-bound"
    COMPUTE_BOUND = "compute-bound"
    MIXED = "mixed"

    def __str__(self) -> str:  # the value in f-strings and tables, on every Python version
        return self.value


# The magnitudes (powers of two) `activations` spreads rows over: 1/64 keeps outputs above the absolute tolerances,
# 256 puts a row's largest value past a thousand (float16's products past 65504 overflow there as the reference's do)
ROW_SPREAD = (-6.0, 8.0)

# Input kinds the checker asks for (`activations` makes them), in the words the prompt and the feedback use.
INPUT_KINDS = {
    "normal": "realistic activations: N(0, 1), about half of the rows (tokens) scaled by a drawn factor from 1/64 to "
              "256 (activations' magnitudes differ from token to token)",
    "large": "magnitudes in the hundreds, N(0, 1) x 300 (a float16/bfloat16 accumulator overflows or loses the "
             "answer here)",
    "special": "N(0, 1) with one NaN, one +Inf and one -Inf planted at random positions of the first argument; "
               "the output must have NaN and +-Inf exactly where the reference has them",
}


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """Elementwise |actual - expected| <= atol + rtol * |expected| (torch.testing.assert_close semantics) for
    floating-point outputs. Integer outputs (a quantizer's) must be exact, except that a share
    `int_off_by_one` of their values may be off by one (a rounding tie that the order of the sums decides)."""

    rtol: float
    atol: float
    int_off_by_one: float = 0.0
    rows_share_rounding: bool = False  # each output row carries one rounding of an intermediate (judge.accuracy)


# torch.testing.assert_close's per-dtype defaults (torch/testing/_comparison.py, _DTYPE_PRECISIONS).
# Targets start from these; any override in a target module is reviewed code with its reason beside it.
DEFAULT_TOLERANCES: Mapping[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(rtol=1.3e-6, atol=1e-5),
    torch.bfloat16: Tolerance(rtol=1.6e-2, atol=1e-5),
    torch.float16: Tolerance(rtol=1e-3, atol=1e-5),
}

# For an op that rounds an intermediate once per output row to the storage type, as the engines' kernels do (fused
# MoE's activation per token, attention's probabilities before P @ V): the row's outputs all carry that rounding
ROWS_SHARE_ROUNDING: Mapping[torch.dtype, Tolerance] = {
    d: dataclasses.replace(t, rows_share_rounding=True) for d, t in DEFAULT_TOLERANCES.items()}

DTYPES = (torch.float32, torch.bfloat16, torch.float16)

# The softmax scales attention kernels are called with: head_dim ** -0.5 of the presets' head dims (32, 64, 128) and
# Gemma 2's query_pre_attn_scalar ** -0.5 = 144 ** -0.5, which is not its head_dim's (256). They take turns over
# the cases, off the case's own head_dim most of the time: a kernel that ignores `scale` and computes
# head_dim ** -0.5 itself fails.
ATTENTION_SCALES = (144 ** -0.5, 128 ** -0.5, 64 ** -0.5, 32 ** -0.5)

# For ops whose kernels sum with atomic adds by idiom (split-K GEMMs, the MoE combine over top-k experts): two
# calls on the same inputs land their partial sums in another order, so they may differ, within the op's own
# tolerance (which the call must meet against the reference anyway). `verify.bitwise_repeats=true` demands bitwise
# repeats all the same (batch-invariant serving).
ATOMIC_REDUCTIONS: Mapping[torch.dtype, Tolerance] = DEFAULT_TOLERANCES

# How the checker may lay out a case's inputs in memory (autotune/verify/plan/cases.py makes them); a target
# lists in `layouts` the ones its dispatch point can receive, so its kernels must accept every one.
LAYOUTS = {
    "contiguous": "dense tensors at a storage offset > 0 (inside the checker's guard band)",
    "offset0": "dense tensors at storage offset 0 (no guard band in front)",
    "padded": "the first argument's rows padded: a slice of a wider buffer, stride(-2) > width",
    "qkv": "query [T, H, D] and key [T, KVH, D] (arguments 1 and 2) as the model's q and k: views of one fused qkv "
           "projection [T, (H + 2 KVH) D], row stride (H + 2 KVH) D, query at storage offset 0, key at H D",
    "kv_cache_vllm": "k_cache and v_cache [NB, BS, KVH, D] as autotune's vLLM plugin hands them: the two halves of "
                     "one [NB, KVH, BS, 2*D] cache tensor, transposed (strides (KVH*BS*2D, 2D, BS*2D, 1))",
}
# The most tokens vLLM puts in one step on an H100/H200: its API server's default max_num_batched_tokens there (16384
# offline; 2048 on smaller GPUs; vllm/engine/arg_utils.py). A plan served at fewer rows says so in the verdict.
ENGINE_STEP_TOKENS = 8192
DENSE_LAYOUTS = ("contiguous", "offset0")  # a dense tensor's strides: the others are views with strides of their own


@dataclasses.dataclass(frozen=True)
class ForeignOp:
    """An op of another engine (vLLM, SGLang) that computes a target, and where its case lies in the call.

    A torch-profiler trace records per call, one entry per argument: "Input Dims" (a tensor's shape, [] for a
    scalar), "Input type" and "Concrete Inputs" (a scalar's value as text). `case_arg` is the argument holding
    the tensor whose shape and dtype make the target's case; `dims_rule` reads the case from the dims from there on
    where the op's argument layout differs from the target's `shape_from_dims`; `call_rule` reads it from the whole
    call's dims and concrete inputs, where a scalar is part of the case: vLLM's `_C::rotary_embedding(positions,
    query [T, H*D], key, head_size, cos_sin_cache, is_neox)` splits query's width by head_size and names its style.
    """

    name: str  # as the trace names it, e.g. "_C::rotary_embedding"
    case_arg: int = 0
    # this op's own rule from dims[case_arg:] to the case shape (aten::mm's weight is [K, N], not linear's [N, K])
    dims_rule: Callable[[list], Shape] | None = dataclasses.field(default=None, compare=False)
    # this op's own rule from (every argument's dims, every argument's concrete value) to the case shape
    call_rule: Callable[[list, list], Shape] | None = dataclasses.field(default=None, compare=False)

    def __post_init__(self):
        if not self.name or self.case_arg < 0:
            raise ValueError(f"bad foreign op {self}: a name, and an argument position >= 0")

    def case_shape(self, dims: list, concrete: list, shape_from_dims: Callable[[list], Shape]) -> Shape:
        """The target's case shape from one call's recorded dims and concrete inputs; ValueError if they do
        not fit (no shapes recorded, a tensor of another rank, a head size that does not divide the width)."""
        if len(dims) <= self.case_arg or not dims[self.case_arg]:
            raise ValueError(f"{self.name}: no shape recorded for argument {self.case_arg}")
        if self.call_rule is not None:
            return tuple(int(d) for d in self.call_rule(dims, concrete))
        return tuple(int(d) for d in (self.dims_rule or shape_from_dims)(dims[self.case_arg:]))


@dataclasses.dataclass(frozen=True)
class Target:
    name: str
    summary: str  # what the op computes, one line
    reference: Callable  # the PyTorch reference; its signature is the candidate's entry point
    make_inputs: Callable[[Shape, torch.dtype, torch.Generator, str], tuple]  # (shape, dtype, gen, kind) -> args
    bytes_moved: Callable[[Shape, torch.dtype], int]  # HBM bytes an ideal kernel reads + writes
    flops: Callable[[Shape, torch.dtype], int]
    default_shapes: tuple[Shape, ...]  # used when no profile has been taken
    edge_shapes: tuple[Shape, ...]  # one row, widths not a power of two, widths > 4096, many rows
    dtypes: tuple[torch.dtype, ...] = DTYPES
    tolerances: Mapping[torch.dtype, Tolerance] = dataclasses.field(default_factory=lambda: dict(DEFAULT_TOLERANCES))
    # A kernel for this op may sum with atomic adds (split-K), so two calls on the same inputs may differ in the
    # order of their sums: per dtype, the bound on that difference. None: two calls must agree bit for bit.
    atomic_tolerance: Mapping[torch.dtype, Tolerance] | None = None
    # The reference's other valid placements of its roundings (functions of the reference's arguments): where an
    # intermediate rounding is shared by an output row, the judge takes the reference's error at each value as the
    # worst of them (plan.data.other_references)
    reference_variants: tuple[Callable, ...] = ()
    foreign_ops: tuple[ForeignOp, ...] = ()  # the same op in other engines' traces (vLLM, SGLang)
    # a profiler "Input Dims" list -> this target's case shape; every target so far: its first input's shape
    shape_from_dims: Callable[[list], Shape] = lambda dims: tuple(dims[0])
    op_class: OpClass = OpClass.MEMORY_BOUND
    # what makes a kernel for this op fast, beyond its class's advice (prompts/advice/<class>.md.j2):
    # one line per bullet of the prompt (the row reductions share ROW_REDUCTION_ADVICE)
    advice: tuple[str, ...] = ()
    # designs candidate 2, 3, ... of a search explore (candidate 1 writes the kernel it expects to be fastest);
    # empty: its class's (CLASS_DIRECTIONS)
    directions: tuple[str, ...] = ()
    # names of the case shape's dims, last dim last; leading dims beyond them are rows ("rows=2x3, hidden=1000")
    dims: tuple[str, ...] = ("width",)
    search: SearchSpace | None = None  # the `search` agent's template and configurations
    example: str = ""  # a correct kernel for it, a file in autotune/targets/examples/ (the tests check it passes)
    # (shape, max rows, max elements) -> the shape run under the CPU interpreter; None limits mean no cut
    cut_shape: Callable[[Shape, int | None, int | None], Shape] = lambda shape, rows, elements: cut_rows(
        shape, rows, elements)
    # A served shape -> the shapes its range cases run on the CPU: the dims the ordinary cut shrinks kept whole or
    # far beyond it (kv heads, the query group, head_dim, the longest context, M over many row blocks, the rows a
    # persistent grid loops over, a row-wise op's rows times its width), what the ordinary cases keep whole may be
    # cut (a row-wise op's width, in one of its two); a case too dear to run whole runs a drawn sample of each
    # launch's programs (autotune.verify.plan.cases.range_sample, autotune.verify.interp.sampling).
    # The default: range_rows.
    range_cuts: Callable[[Shape], tuple[Shape, ...]] = lambda shape: range_rows(shape)
    # A served shape -> range cases past the GPU's concurrency (an output of more tiles than SMs: a persistent
    # grid's rounded-down share shows only there), run in one dtype (the first served: bf16 where the target has it;
    # the tiles a kernel walks do not change with it, and each is millions of values). None: no such case.
    concurrency_cuts: Callable[[Shape], tuple[Shape, ...]] | None = None
    # A served shape -> range cases that keep whole a dim a launch's grid spans, the other dims at a tile: every
    # served value of it runs (in the concurrency cuts' dtype, every program on the default plan), so a grid capped
    # along it with a rounded-down share shows at each size it is served at (a GEMM's N: a cap of 128 column
    # programs is exact at N = 4096 and leaves 64 tiles of Llama 3 8B's qkv N = 6144 unwritten). None: no such case.
    span_cuts: Callable[[Shape], tuple[Shape, ...]] | None = None
    # A shape whose dims were set one by one (plan.cases.together_shapes) -> one the op can be called with (paged
    # attention: no more query rows than the context)
    coherent: Callable[[Shape], Shape] = lambda shape: tuple(shape)
    # shape -> an upper bound on the elements of all inputs / all outputs of one call (the judge sizes the
    # largest result frame it accepts from these); None: each input, and at most two outputs, no larger than
    # the case shape, which holds for the row-wise ops
    # (arguments, rows) -> (arguments, rows they answer): a smaller call whose reference gives those rows of every
    # output (first dim, the first argument's), at least the rows asked for. The judge then makes a sampled range
    # case's reference after its run, at the rows its programs wrote (plan.data.answer_rows); None: the whole
    # reference, made with the inputs. Only for ops that write nothing in place.
    rows_problem: Callable[[tuple, list[int]], tuple[tuple, list[int]]] | None = None
    input_elements: Callable[[Shape], int] | None = None
    output_elements: Callable[[Shape], int] | None = None
    # The contract the kernel is deployed under; every case of the checker is drawn from it.
    layouts: tuple[str, ...] = ("contiguous", "offset0")  # names from LAYOUTS this op's callers pass
    mutates: tuple[str, ...] = ()  # arguments the op writes in place (vLLM style); every other input is read-only
    # argument name -> values the cases take in turn (instead of what make_inputs chose), e.g. eps
    scalar_values: Mapping[str, tuple[float, ...]] = dataclasses.field(default_factory=dict)
    # served values the domain knows of and no plan runs, CPU or GPU (each a phrase naming the value and who serves
    # it): every verdict and `verify --plan` say them, so that a pass is never read as covering them
    beyond_domain: tuple[str, ...] = ()
    # argument name -> conf/model/*.yaml key whose value in every preset joins scalar_values
    scalar_from_model: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # a model preset's dims (conf/model/*.yaml as a dict) and a row count -> the shapes its layers pass here
    model_shapes: Callable[[Mapping, int], tuple[Shape, ...]] | None = None
    # the same for a served step of that many tokens, where its shapes follow the count and model_shapes' do not
    # (paged attention: a decode step's sequences); None: model_shapes
    step_shapes: Callable[[Mapping, int], tuple[Shape, ...]] | None = None
    # shapes drawn per run (odd and prime widths, just above a power of two, row counts not a multiple of 32)
    random_shapes: Callable[[random.Random], tuple[Shape, ...]] | None = None

    def __post_init__(self):
        names = self.arg_names
        if isinstance(self.advice, str) or isinstance(self.directions, str):
            raise ValueError(f"target {self.name}: advice and directions are tuples of lines, not one string")
        unknown = [x for x in self.layouts if x not in LAYOUTS]
        if unknown or not self.layouts:
            raise ValueError(f"target {self.name}: layouts {unknown or '()'} (known: {', '.join(LAYOUTS)})")
        if self.rows_problem is not None and self.mutates:
            raise ValueError(f"target {self.name}: rows_problem answers outputs only, and it mutates {self.mutates}")
        for field in ("mutates", "scalar_values", "scalar_from_model"):
            bad = [a for a in getattr(self, field) if a not in names]
            if bad:
                raise ValueError(f"target {self.name}: {field} names {bad}, not arguments of {self.signature}")

    def _split_shape(self, shape: Shape) -> tuple[tuple[int, ...], list[tuple[str, int]]]:
        """(leading row dims, (name, value) of the named dims)."""
        shape = tuple(shape)
        if 1 < len(self.dims) and len(shape) <= len(self.dims):  # a fixed-rank case (prefill's context is optional)
            return (), list(zip(self.dims, shape))
        named = min(len(self.dims), len(shape))
        return shape[:len(shape) - named], list(zip(self.dims[len(self.dims) - named:], shape[len(shape) - named:]))

    def label_shape(self, shape: Shape) -> str:
        """A case shape with its dims named: "seqs=8, heads=32, kv_heads=8, head_dim=128, max_context=1024", or
        for a row op "rows=64, hidden=4096" (several leading dims: "rows=2x3")."""
        lead, named = self._split_shape(shape)
        return ", ".join(([f"rows={'x'.join(map(str, lead))}"] if lead else []) + [f"{n}={v}" for n, v in named])

    def named_dims(self, shape: Shape) -> dict[str, int]:
        """Each dim's value by name, a row op's leading dims as one "rows" (their product)."""
        lead, named = self._split_shape(shape)
        return ({"rows": math.prod(lead)} if lead else {}) | dict(named)

    @property
    def candidate_directions(self) -> tuple[str, ...]:
        return self.directions or CLASS_DIRECTIONS[self.op_class]

    @property
    def signature(self) -> str:
        """The entry-point line a candidate must define, e.g. `def rms_norm(x, weight, eps)`."""
        return f"def {self.name}{inspect.signature(self.reference)}"

    @property
    def arg_names(self) -> tuple[str, ...]:
        return tuple(inspect.signature(self.reference).parameters)

    def reference_source(self) -> str:
        """The reference's source, then that of every helper of this package it calls (`upcast`, the ops a fused
        target's reference runs in turn), each once: what the prompt shows as the op's whole definition."""
        return "\n\n".join(inspect.getsource(fn) for fn in _own_functions(self.reference))

    @property
    def schema(self) -> str:
        """The dispatch point's torch schema, inferred from the reference's annotations:
        `rms_norm(Tensor x, Tensor weight, float eps) -> Tensor`; the arguments it `mutates` marked written."""
        return self.name + torch.library.infer_schema(self.reference, mutates_args=self.mutates)

    @property
    def example_path(self) -> Path | None:
        return EXAMPLES_DIR / self.example if self.example else None

    def io_elements(self, shape: Shape) -> tuple[int, int]:
        """(bound on all inputs' elements, bound on all outputs' elements) of one call on this case shape."""
        n = numel(shape)
        inputs = self.input_elements(shape) if self.input_elements else len(self.arg_names) * n
        return int(inputs), int(self.output_elements(shape) if self.output_elements else 2 * n)

    def floor_us(self, shape: Shape, dtype: torch.dtype, bandwidth_gbps: float | None,
                 tflops: float | None = None) -> float | None:
        """The roofline floor in microseconds: the longer of moving `bytes_moved` at the bandwidth and doing
        `flops` at the peak rate; None when neither rate is known. A kernel measured below it did not do the work."""
        return self.roofline(shape, dtype, bandwidth_gbps, tflops)[0]

    def roofline(self, shape: Shape, dtype: torch.dtype, bandwidth_gbps: float | None,
                 tflops: float | None = None) -> tuple[float | None, str | None]:
        """(the floor in microseconds, what sets it: "memory" or "compute"); (None, None) with neither rate."""
        sides = []
        if bandwidth_gbps:
            sides.append((self.bytes_moved(shape, dtype) / (bandwidth_gbps * 1e3), "memory"))
        if tflops:
            sides.append((self.flops(shape, dtype) / (tflops * 1e6), "compute"))
        return max(sides) if sides else (None, None)


def _own_functions(fn: Callable) -> list[Callable]:
    """fn, and the functions of autotune.targets it calls by a global name, depth first, each once."""
    found: list[Callable] = []

    def visit(f: Callable) -> None:
        if f in found:
            return
        found.append(f)
        for name in f.__code__.co_names:
            g = f.__globals__.get(name)
            if inspect.isfunction(g) and g.__module__.startswith("autotune.targets"):
                visit(g)

    visit(fn)
    return found


FIRST_DIRECTION = "Write the kernel you expect to be fastest for the shapes that take the most time."
# Designs the later candidates of a search explore, by class; a target's own `directions` replace them.
CLASS_DIRECTIONS = {
    OpClass.MEMORY_BOUND: (
        "Focus on memory traffic: touch every byte exactly once, with wide coalesced loads and stores.",
        "Focus on the launch: block sizes and num_warps chosen per shape, so that the shapes with the most calls "
        "fill the GPU.",
    ),
    OpClass.COMPUTE_BOUND: (
        "Explore the tile shape: larger BLOCK_M x BLOCK_N tiles for the prefill-sized shapes, a small BLOCK_M for "
        "the decode-sized ones.",
        "Explore split-K for the shapes with few rows, where the output tiles alone cannot fill the GPU.",
        "Focus on the pipeline: num_stages, num_warps and a grouped launch order for L2 reuse.",
    ),
    OpClass.MIXED: (
        "Explore splitting the long dimension across programs (split-K / flash-decoding), merged by a second pass.",
        "Focus on the tiles: block sizes, num_warps and num_stages for the shapes that take the most time.",
    ),
}

# The row reductions (rms_norm, fused_add_rms_norm, softmax, the fused quantization) share this advice.
ROW_REDUCTION_ADVICE = (
    "One program per row with the whole row in one block (`BLOCK = triton.next_power_of_2(n_cols)`) is best for "
    "rows up to a few thousand elements; for wider rows loop over the row in chunks (a two-pass loop: reduce, "
    "then normalise and store) to keep register use bounded.",
    "With many short rows, process several rows per program (a 2-D block) so that each program has work.",
)
ROW_DIRECTIONS = (
    "Explore several rows per program with a 2-D block, so that the short rows in the profile keep the GPU busy.",
    "Explore a chunked design: loop over the last dimension in fixed-size blocks, so that register use stays "
    "bounded on the widest shapes.",
    "Focus on launch parameters and memory traffic: block sizes, num_warps, and touching every byte exactly once.",
)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def parse_dtype(name: str) -> torch.dtype:
    aliases = {"fp32": "float32", "float": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16",
               "c10::BFloat16": "bfloat16", "c10::Half": "float16", "double": "float64"}
    name = aliases.get(name, name)
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype '{name}'")
    return dtype


def upcast(t: torch.Tensor) -> torch.Tensor:
    """fp32 for fp32/bf16/fp16, fp64 kept: references compute in fp32, and the checker's fp64 golden is
    the same reference run on fp64 inputs, so every reference upcasts with this instead of `.float()`."""
    return t if t.dtype == torch.float64 else t.float()


def numel(shape: Shape) -> int:
    """The elements of a shape (1 for ())."""
    return math.prod(shape)


def cut_rows(shape: Shape, max_rows: int | None, max_elements: int | None = None) -> Shape:
    """Shrink leading dims, outermost first, until their product is at most max_rows and the whole
    shape holds at most max_elements (never below one row). The default CPU cut of every target."""
    if max_rows is None:
        return tuple(shape)
    if max_elements is not None:
        max_rows = max(1, min(max_rows, max_elements // max(1, shape[-1])))
    dims = list(shape)
    for i in range(len(dims) - 1):
        rest = 1
        for d in dims[i + 1:-1]:
            rest *= d
        if rest * dims[i] > max_rows:
            dims[i] = max(1, max_rows // rest)
    return tuple(dims)


RANGE_ELEMENTS = 1 << 22  # the most values of a row-wise range case: 16 MB in fp32, 16384 rows of 256


def range_rows(shape: Shape) -> tuple[Shape, Shape]:
    """The range cases of an op over rows (the leading dims) of a width. First the rows whole up to RANGE_ELEMENTS
    values (2048 tokens whole; a softmax's heads x queries to 16384 rows) at a width of 256 plus its remainder
    modulo 64 (the ordinary cases keep the width whole; here the rows count: a kernel that loops over rows with a
    grid of its own size, as persistent kernels do, or switches at a row count, meets the rows a served step has);
    then the width whole with the rows up to RANGE_ELEMENTS values (a flattened kernel's grid and block, chosen by
    rows x width, meet at least 4M of a served step's values: 146 rows of Llama 3's 28,672-wide gate_up)."""
    width = min(shape[-1], 256 + shape[-1] % 64)
    return ((*cut_rows((*shape[:-1], width), RANGE_ELEMENTS // width)[:-1], width),
            cut_rows(shape, max(1, RANGE_ELEMENTS // shape[-1])))


def rows_and_width(shape: Shape) -> tuple[int, int]:
    """[..., W] -> (product of leading dims, W)."""
    return numel(shape[:-1]), shape[-1]


@functools.cache
def primes(lo: int, hi: int) -> list[int]:
    return [n for n in range(max(lo, 2), hi) if all(n % p for p in range(2, int(n ** 0.5) + 1))]


def random_rows(rng: random.Random) -> int:
    """A row count above 32 and below 64 that is prime (no multiple of 32 or of any block of rows)."""
    return rng.choice(primes(33, 64))


def random_widths(rng: random.Random, even: bool = False) -> tuple[int, ...]:
    """Three widths for this run: a prime below 1024, 2^k plus a small odd number for k in 10..13 (just
    above a power of two: the tail of a 1024-wide loop), and a prime in 1024..8192. `even`: each doubled
    (silu_and_mul's width is 2 * I), so that I is the odd, prime or just-above-a-power-of-two number."""
    widths = (rng.choice(primes(65, 1024)), 2 ** rng.randint(10, 13) + rng.choice((1, 3, 5, 7, 17, 33)),
              rng.choice(primes(1025, 8192)))
    return tuple(2 * w for w in widths) if even else widths


def grouped_heads(heads: int, kv_heads: int) -> None:
    """ValueError unless the query heads split evenly over the kv heads: no model makes another attention call
    (the checker's probes raise one size alone, and leave out what this refuses)."""
    if kv_heads < 1 or heads % kv_heads:
        raise ValueError(f"{heads} query heads do not split evenly over {kv_heads} kv heads")


def activations(shape: Shape, dtype: torch.dtype, gen: torch.Generator, kind: str,
                spread: tuple[float, float] | None = ROW_SPREAD, massive: bool = True) -> torch.Tensor:
    """Activation-like values of this kind: N(0, 1) with about half of the rows at a drawn scale (`row_scales`, from
    2^spread[0] to 2^spread[1]; None: none) and, with `massive`, a massive activation in about one row in eight
    (`massive_values`); N(0, 1) * 300; or N(0, 1) with NaN/Inf planted."""
    x = torch.randn(shape, generator=gen, dtype=torch.float32)
    if kind == "normal":
        if spread is not None:
            x = x * row_scales(shape, gen, *spread)
        if massive:
            x = massive_values(x, gen)
    elif kind == "large":
        x = x * 300.0
    elif kind == "special":
        flat = x.view(-1)
        n = flat.numel()
        picks = torch.randint(0, n, (3,), generator=gen)
        flat[picks[0]] = float("nan")
        flat[picks[1]] = float("inf")
        flat[picks[2]] = float("-inf")
    else:
        raise ValueError(f"unknown input kind '{kind}' (one of {', '.join(INPUT_KINDS)})")
    return x.to(dtype)


def row_scales(shape: Shape, gen: torch.Generator, low: float, high: float) -> torch.Tensor:
    """A [..., 1] factor: 1 for about half of the rows, 2^u with u uniform in [low, high] for the others. Served
    activations differ in magnitude from token to token (massive activations of a few hundred, attention sinks),
    and N(0, 1) alone leaves every row's largest value between 2 and 5: an attacker's kernels that went wrong only
    where a row's largest value lay between 8 and 100 (a clamped gate, a residual clamped at 8, probabilities
    dropped below 1e-3, a rotation turned the wrong way) passed silu_and_mul, fused_add_rms_norm, softmax and
    rotary_embedding on N(0, 1) and N(0, 1) x 300. Continuous, not powers of two, so every band of magnitudes is
    met by some rows of a plan."""
    lead = tuple(shape[:-1]) + (1,)
    scaled = torch.rand(lead, generator=gen) < 0.5
    return torch.where(scaled, 2.0 ** (low + (high - low) * torch.rand(lead, generator=gen)), 1.0)


def massive_values(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """x with one value of about one row in eight set to +-2^u, u uniform in [4, 12] (16 to 4096): the massive
    activations of a few channels at a few tokens (a BOS or delimiter token; Llama 2 7B's reach about 2500). Row
    scales move whole rows, and an attacker's RMSNorm that left any value whose square passed half its row's sum
    out of the mean square passed: no row had one value above the others."""
    rows = x.reshape(-1, x.shape[-1]) if x.dim() else x.reshape(1, 1)
    n, width = rows.shape
    hit = torch.rand(n, generator=gen) < 0.125
    cols = torch.randint(0, width, (n,), generator=gen)
    sign = torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0)
    value = sign * 2.0 ** (4 + 8 * torch.rand(n, generator=gen))
    at = (torch.arange(width)[None, :] == cols[:, None]) & hit[:, None]  # elementwise: the dry calls' stand-ins
    return torch.where(at, value[:, None], rows).reshape(x.shape)


def weights(shape: Shape, gen: torch.Generator) -> torch.Tensor:
    """A layer's weights [..., out, in] in fp32: N(0, 1/in), each output's scale kept, with about one weight in 2048
    at +-2^u standard deviations, u uniform in [3, 7] (8 to 128: the "super weights" and outlier weights of trained
    LLMs). A fourth stop 46 attacker's GEMM clamped every weight to 8 standard deviations, which N(0, 1/in) never
    reaches: it passed linear, and was off by 57% on a column of Qwen2.5-0.5B's down projection with outliers.
    Not fused MoE's yet: its example kernel keeps an intermediate that the reference rounds to the dtype as vLLM does,
    and an outlier weight's large intermediate put it past the fp16 fallback's bound (3x the reference's RMSE)."""
    fan_in = shape[-1]
    w = torch.randn(shape, generator=gen)
    outlier = torch.rand(shape, generator=gen) < 1 / 2048
    size = 2.0 ** (3 + 4 * torch.rand(shape, generator=gen))
    return torch.where(outlier, w.sign() * size, w) * fan_in ** -0.5


def layer_scaled(x: torch.Tensor, gen: torch.Generator, smallest: int = 8) -> torch.Tensor:
    """x at a scale drawn per case (a power of two from 2^-smallest to 1, exact: layers' activations differ in scale)
    with one to three outlier channels 64 times larger (LLM.int8's outlier features): a kernel that skips the terms
    below a fixed threshold, or below a share of the largest, is wrong on some case (an attacker's TF32 GEMM dropped
    |x| < 0.01 and was within TF32's error on N(0, 1) inputs). For linear's activations (down to 1/256) and fused
    MoE's, `normal` kind. Fused MoE's output is quadratic in x (silu(gate) * up), so its scale stops at 1/16: at
    1/256 the outputs fell under the absolute tolerance, and a kernel that reads only the first 512 channels passed
    (its reference stores each slot's weighted output in the dtype, as vLLM's intermediate_cache3: summed in fp32
    instead, vLLM's kernel came out at 3.25x the reference's largest error at a drawn scale)."""
    k = x.shape[-1]
    factor = torch.full((k,), 2.0 ** -int(torch.randint(0, smallest + 1, (1,), generator=gen)))
    factor[torch.randint(0, k, (int(torch.randint(1, 4, (1,), generator=gen)),), generator=gen)] *= 64
    return (x.float() * factor).to(x.dtype)


def quiet_rows(shape: Shape, gen: torch.Generator) -> torch.Tensor:
    """A [..., 1] factor that scales about a third of the rows to magnitude 1e-3, where mean(x^2) ~ 1e-6
    is the size of a norm's eps: there a kernel with the wrong eps (or none) is off in every dtype."""
    lead = tuple(shape[:-1])
    quiet = torch.rand(lead + (1,), generator=gen) < 0.35
    return torch.where(quiet, 1e-3, 1.0)


def norm_weight(width: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """A trained norm's weight is far from all ones: values spread over about [-1, 3], a few near zero."""
    return (1.0 + torch.randn(width, generator=gen)).to(dtype)


def rowwise_shapes(widths: tuple[tuple[str, int], ...]) -> Callable[[Mapping, int], tuple[Shape, ...]]:
    """model_shapes for an op over [tokens, width]: `widths` are preset keys (with a factor, e.g. 2 x
    intermediate_size written as ("intermediate_size", 2))."""
    def shapes(dims: Mapping, rows: int) -> tuple[Shape, ...]:
        return tuple((rows, int(dims[key]) * factor) for key, factor in widths)
    return shapes
