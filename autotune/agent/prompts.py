"""Rendering the agent's messages from the Jinja2 templates in `prompts/` (found by `autotune.config.PROMPTS_DIR`).

A conversation is `[system, task, reply_1, feedback_1, reply_2, ...]`. The system message is the same
for every target and turn, the task message is rendered once per candidate, and each turn only appends,
so turn n+1's request starts with turn n's messages byte for byte and a serving engine's prefix cache
can hit. Nothing that differs between runs (timestamps, ids, run paths) is rendered: absolute paths in
checker output are cut to file names. The feedback still quotes what the checker drew with its per-run
salt (case values) and measured (timings), so replay matches a feedback message by its turn's outcome
(`Conversation.outcomes`, see `clients.replay_key`), not by its text.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
from omegaconf import OmegaConf

from autotune.config import PROMPTS_DIR
from autotune.targets.base import DENSE_LAYOUTS, FIRST_DIRECTION, INPUT_KINDS, LAYOUTS, Target, dtype_name, parse_dtype
from autotune.text import fence, pct, size, us
from autotune.verify.verdict import Verdict, is_passed

if TYPE_CHECKING:
    from autotune.kernels import MergedKernel
    from autotune.records import Hotspot

EXAMPLE_TARGET = "rms_norm"  # whose correct example kernel (Target.example) the system message shows
ASSUMED_GPU = "H100 SXM"  # whose bandwidth the floors assume when there is no GPU to look up
STDERR_LINES = 30  # the end of a traceback that the model sees; more is noise at ~10 tokens a line

_env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(PROMPTS_DIR)), undefined=jinja2.StrictUndefined,
                          trim_blocks=True, lstrip_blocks=True, autoescape=False)
_env.filters["fence"] = fence  # the candidate's output stays inside its block


@dataclasses.dataclass(frozen=True)
class Roofline:
    bandwidth_gbps: float
    source: str  # where the figures come from, said in the prompt
    tflops: float | None = None  # peak dense bf16/fp16 rate; None: the floors are the bandwidth's alone


@dataclasses.dataclass(frozen=True)
class Incumbent:
    """The best kernel known before a search starts (a merged kernel, the baseline search's best)."""

    name: str
    source: str
    summary: str


class Conversation:
    """The messages of one candidate's conversation; only ever appended to."""

    def __init__(self, system: str, task: str):
        self._messages = [{"role": "system", "content": system}, {"role": "user", "content": task}]
        self._outcomes: list[str] = []

    @property
    def messages(self) -> list[dict[str, str]]:
        return [dict(m) for m in self._messages]

    @property
    def outcomes(self) -> tuple[str, ...]:
        """The checker's status on each turn so far: what replay matches the feedback messages on."""
        return tuple(self._outcomes)

    def add_turn(self, reply: str, feedback: str, outcome: str) -> None:
        self._messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": feedback}]
        self._outcomes.append(outcome)


def roofline(cfg) -> Roofline:
    """The figures behind the prompt's time floors: the checker's (`timing.peaks`: configured, else the GPU's),
    else, with no GPU to look up, an assumed one, said so."""
    from autotune.verify.timing import peaks  # the checker's

    gpu = _gpu_name(str(OmegaConf.select(cfg, "device", default="auto")))
    bandwidth, tflops = peaks(gpu or "", cfg.verify)
    if bandwidth:
        given = OmegaConf.select(cfg, "verify.peak_bandwidth_gbps", default=None)
        return Roofline(bandwidth, "set by verify.peak_bandwidth_gbps" if given else f"the {gpu}'s peaks", tflops)
    why = f"{gpu} is not in the checker's table" if gpu else "no GPU was seen here"
    bandwidth, tflops = peaks(ASSUMED_GPU, cfg.verify)
    assert bandwidth is not None  # the assumed GPU is in the checker's table
    return Roofline(bandwidth, f"assumed: an {ASSUMED_GPU}'s, since {why}", tflops)


def _gpu_name(device: str) -> str | None:
    from autotune import accel

    gpu = accel.get("cuda")
    return gpu.properties().name if device != "cpu" and gpu.available() else None


def render(template: str, **slots: Any) -> str:
    text = _env.get_template(template).render(**slots)
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


def judged_on(cfg=None) -> str:
    """Where the checker judges the agent's files: the Triton version and the GPU, or the CPU without timing."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        triton = f"Triton {version('triton')}"
    except PackageNotFoundError:
        triton = "Triton (version unknown)"
    gpu = _gpu_name(str(OmegaConf.select(cfg, "device", default="auto")) if cfg is not None else "auto")
    if gpu:
        return f"{triton} on an {gpu}; correctness first, then timed against eager PyTorch and torch.compile"
    return (f"{triton} under its interpreter on a CPU (no GPU: correctness only; nothing is timed, and a correct "
            "file is `unmeasured`); write for a GPU all the same, the kernel is deployed on one")


def system_message(example: Path | None = None, cfg=None) -> str:
    from autotune import targets
    from autotune.verify.static.policy import ALLOWED_IMPORTS  # the contract as the checker enforces it

    example = example or targets.get(EXAMPLE_TARGET).example_path
    source = example.read_text().rstrip() if example is not None and example.is_file() else ""
    return render("system.md.j2", allowed_imports=", ".join(f"`{m}`" for m in ALLOWED_IMPORTS),
                  judged_on=judged_on(cfg), example_name=example.stem if example and source else "",
                  example_source=source)


def task_message(target: Target, hotspot: Hotspot | None, roofline: Roofline, *, index: int, candidates: int,
                 incumbent: Incumbent | None = None, rejections: Iterable[str] = (), missing: str = "") -> str:
    """The task for candidate `index`. `missing`: why the profile has no figures for this target (a trace it is
    absent from), said at the top."""
    profile = None
    if hotspot:
        profile = {"share_pct": pct(hotspot.share), "calls": f"{hotspot.calls:,}", "total_us": us(hotspot.total_us)}
    directions = (FIRST_DIRECTION, *target.candidate_directions)
    return render("task.md.j2", target=target, signature=target.signature,
                  reference_source=target.reference_source(), missing=missing, **contract_slots(target),
                  advice=advice(target, roofline), roofline=_roofline_slots(roofline),
                  incumbent=incumbent, rejections=[scrub_paths(r) for r in rejections if r],
                  profile=profile, shapes=shape_rows(target, hotspot, roofline),
                  direction=directions[index % len(directions)], index=index, candidates=candidates)


def contract_slots(target: Target) -> dict[str, Any]:
    """What the checker will do to the kernel, each fact from its owner: the target's dims, dtypes, layouts,
    scalar values and tolerances, the comparison's fp64-golden multipliers, the case kinds."""
    from autotune.verify.judge.compare import GOLDEN_MULTIPLIER

    tolerances = [f"{dtype_name(d)}: rtol {t.rtol:g}, atol {t.atol:g}" for d, t in target.tolerances.items()
                  if d in target.dtypes]
    k = {dtype_name(d): f"{GOLDEN_MULTIPLIER[d]:g}" for d in target.dtypes if d in GOLDEN_MULTIPLIER}
    golden = ("A case outside that tolerance still passes when your result is no less accurate than the reference's "
              "own, both measured against the reference run in float64: RMSE <= k x the reference's RMSE + atol/10 "
              "and max error <= k x the reference's max error + atol, with k = "
              + ", ".join(f"{v} for {n}" for n, v in k.items()) + ". Summing in another order passes; 16-bit "
              "accumulation does not.")
    shares = {t.int_off_by_one for t in target.tolerances.values()}
    integer_rule = "" if not _integer_outputs(target.name) else "Integer outputs must be exact" + (
        f", except that up to {pct(max(shares), 2)} of their values may be off by one (rounding ties)."
        if max(shares) else ".")
    scalars = "; ".join(f"`{name}` in {', '.join(f'{v:g}' for v in values)} and each model preset's"
                        if name in target.scalar_from_model else f"`{name}` in {', '.join(f'{v:g}' for v in values)}"
                        for name, values in target.scalar_values.items())
    leading = ("...rows",) if len(target.dims) == 1 else ()  # a row op takes any leading dims
    atomics = ("Sums may use `tl.atomic_add` (split-K, combining top-k or partial results): two calls on the same "
               "inputs may then differ within the checker's bound for reordered sums"
               if target.atomic_tolerance is not None else
               "Two calls on the same inputs must give bitwise equal outputs: no `tl.atomic_add` sums (their "
               "order changes from call to call)")
    return {"dims": f"[{', '.join(leading + target.dims)}]", "arguments": argument_lines(target.name),
            "atomics": atomics, "dtypes": ", ".join(dtype_name(d) for d in target.dtypes), "scalars": scalars,
            "layouts": [(name, LAYOUTS[name]) for name in target.layouts],
            "edge_shapes": "; ".join(f"[{target.label_shape(s)}]" for s in target.edge_shapes),
            "tolerances": tolerances, "golden": golden, "integer_rule": integer_rule,
            "kinds": list(INPUT_KINDS.items())}


@functools.cache
def _example_calls(name: str) -> tuple[Any, tuple[tuple[dict[str, int], tuple], ...]]:
    """(the dtype, then for each of the target's edge shapes of the first one's rank: its dims by name, and the
    arguments make_inputs gives followed by what the reference returns): the facts the prompt states about the
    arguments, found by running them rather than said by hand."""
    import torch

    from autotune import targets

    target = targets.get(name)
    dtype = torch.bfloat16 if torch.bfloat16 in target.dtypes else target.dtypes[0]
    calls = []
    for shape in (s for s in target.edge_shapes if len(s) == len(target.edge_shapes[0])):
        args = target.make_inputs(shape, dtype, torch.Generator().manual_seed(0), "normal")
        out = target.reference(*args)
        calls.append((_dim_values(target, shape), (*args, *(out if isinstance(out, tuple) else (out,)))))
    return dtype, tuple(calls)


def argument_lines(name: str) -> tuple[str, ...]:
    """Each argument of the entry point and each result, as the checker passes and reads them: a tensor's shape
    in the target's dims (each size named by the dims' expression that gives it at every edge shape; "?" a size
    that follows the inputs), its dtype and layout; a scalar's type."""
    import torch

    from autotune import targets

    target = targets.get(name)
    dtype, calls = _example_calls(name)
    labels = [f"`{n}`" + (" (written in place)" if n in target.mutates else "") for n in target.arg_names]
    n_results = len(calls[0][1]) - len(labels)
    labels += ["returns" + (f" [{i}]" if n_results > 1 else "") for i in range(n_results)]
    lines = []
    for i, label in enumerate(labels):
        value = calls[0][1][i]
        if not isinstance(value, torch.Tensor):
            lines.append(f"{label}: {type(value).__name__} (a scalar)")
            continue
        sizes = [_size_name([(dims, values[i].shape[d]) for dims, values in calls]) for d in range(value.dim())]
        kind = "the case's dtype" if value.dtype == dtype else dtype_name(value.dtype)
        layout = "contiguous" if value.is_contiguous() else f"strided (strides {tuple(value.stride())} at the first)"
        lines.append(f"{label}: [{', '.join(sizes)}] {kind}, {layout}")
    return tuple(lines)


def _dim_values(target: Target, shape: tuple[int, ...]) -> dict[str, int]:
    lead = len(shape) - len(target.dims)
    named = [("rows" if lead == 1 else f"rows{i}") for i in range(lead)] + list(target.dims)
    return dict(zip(named, shape))


def _size_name(seen: list[tuple[dict[str, int], int]]) -> str:
    """The simplest expression in the dims (one dim, a multiple, a half, a dim plus one, two dims' product, 1) that
    gives the size in every call seen, or "?"."""
    dims, _ = seen[0]
    candidates: list[tuple[str, Any]] = [(n, lambda d, n=n: d[n]) for n in dims]
    candidates += [(f"{k}*{n}", lambda d, n=n, k=k: k * d[n]) for k in (2, 3) for n in dims]
    candidates += [(f"{n}/2", lambda d, n=n: d[n] / 2) for n in dims]
    candidates += [(f"{n} + 1", lambda d, n=n: d[n] + 1) for n in dims]
    candidates += [(f"{a}*{b}", lambda d, a=a, b=b: d[a] * d[b]) for a in dims for b in dims if a < b]
    candidates.append(("1", lambda d: 1))
    return next((text for text, size in candidates if all(size(d) == n for d, n in seen)), "?")


def _integer_outputs(name: str) -> bool:
    """Whether the reference returns an integer tensor (a quantizer's)."""
    import torch

    from autotune import targets

    _, calls = _example_calls(name)
    results = calls[0][1][len(targets.get(name).arg_names):]
    return any(isinstance(o, torch.Tensor) and not (o.is_floating_point() or o.is_complex()) for o in results)


def advice(target: Target, roofline: Roofline) -> str:
    """What makes a kernel for this target fast: its class's advice (prompts/advice/<class>.md.j2), then
    the op's own (Target.advice)."""
    text = render(f"advice/{target.op_class.value}.md.j2", target=target, roofline=_roofline_slots(roofline))
    return text + "".join(f"- {line.strip()}\n" for line in target.advice)


def shape_rows(target: Target, hotspot: Hotspot | None, roofline: Roofline) -> list[dict[str, str]]:
    """One row per profiled (shape, dtype): calls, share, bytes moved and the time floor."""
    profiled = bool(hotspot and hotspot.shapes)
    entries: list[tuple[tuple[int, ...], str, int | None, float | None]]
    if hotspot is not None and profiled:
        entries = [(s.shape, s.dtype, s.calls, s.total_us) for s in hotspot.shapes]
    else:
        entries = [(tuple(s), dtype_name(d), None, None) for s in target.default_shapes for d in target.dtypes]
    total_us = sum(e[3] or 0.0 for e in entries) if profiled else 0.0
    rows = []
    for shape, dtype, calls, op_us in entries:
        moved = _bytes_moved(target, shape, dtype)
        floor, bound = _roofline(target, shape, dtype, roofline)
        rows.append({"shape": target.label_shape(shape), "dtype": dtype,
                     "calls": f"{calls:,}" if calls is not None else "-",
                     "share": pct(op_us / total_us) if total_us and op_us else "-",
                     "bytes": size(moved) if moved is not None else "?", "floor": us(floor) if floor else "?",
                     "bound": bound or "?"})
    return rows


def feedback_message(verdict: Verdict | None, *, file: str, no_code: str = "", target: Target | None = None) -> str:
    """What the model reads about its last reply: the verdict (with the failing case's layout and strides in words,
    and which kinds of case failed and which passed), or why the reply held no file."""
    if verdict is None:
        return render("feedback.md.j2", no_code=no_code or "no usable code", file=file, status="no_code",
                      reason="", case=None, tally=[], policy=[], stderr="", timings=[], speedup="", measured=False)
    case = verdict.failing_case()
    reason = scrub_paths(verdict.reason)
    return render("feedback.md.j2", no_code="", file=file, status=verdict.status.value, reason=reason,
                  case=_case_slots(case, reason, target) if case else None, tally=case_tally(verdict),
                  policy=[scrub_paths(p) for p in verdict.policy],
                  stderr=trim_stderr(verdict.stderr_tail) if verdict.status.crashed else "",  # else warnings, noise
                  timings=[_timing_slots(t, target) for t in verdict.timings] if verdict.measured else [],
                  speedup=_ratio(verdict.speedup_geomean), measured=verdict.measured)


def case_tally(verdict: Verdict) -> list[str]:
    """Per kind of case (input kind, layout, dtype): how many passed and failed, the failing kinds first; [] when
    every case passed."""
    if all(c.passed for c in verdict.cases):
        return []
    lines = []
    for what, key in (("input kind", "kind"), ("layout", "layout"), ("dtype", "dtype")):
        counts: dict[str, list[int]] = {}
        for c in verdict.cases:
            counts.setdefault(getattr(c, key), [0, 0])[0 if c.passed else 1] += 1
        failed = [f"{k} ({n_bad} of {n_ok + n_bad})" for k, (n_ok, n_bad) in counts.items() if n_bad]
        passed = [f"{k} ({n_ok})" for k, (n_ok, n_bad) in counts.items() if not n_bad]
        lines.append(f"by {what}: failed {', '.join(failed) or 'none'}; all passed: {', '.join(passed) or 'none'}")
    return lines


def layout_in_words(target: Target | None, case) -> str:
    """The case's layout as the checker made it (its LAYOUTS description), with the first argument's strides and
    storage offset, measured on the checker's own `lay_out` of that shape."""
    words = LAYOUTS.get(case.layout, case.layout)
    try:
        import torch

        from autotune.verify.plan.data import lay_out

        x = lay_out((torch.empty(tuple(case.shape), dtype=parse_dtype(case.dtype)),), case.layout)[0]
        where = (f"; the first argument had strides {tuple(x.stride())} (elements) at storage offset "
                 f"{x.storage_offset()} of its buffer" if case.layout not in DENSE_LAYOUTS else "")
    except (ValueError, TypeError, RuntimeError):  # a shape the layout does not apply to
        where = ""
    return f"`{case.layout}`: {words}{where}"


def incumbent_from(kernel: MergedKernel, base: str) -> Incumbent:
    """The kernel a reviewer merged for this target (autotune.kernels), summarised by its recorded verdict."""
    summary = f"`{kernel.target}-{kernel.id}`, merged into `{base}` after review: {kernel.status}"
    if kernel.speedup:
        summary += f", {_ratio(kernel.speedup)} over the best baseline (weighted by calls)"
    elif is_passed(kernel.status):
        summary += " (correct; not timed, no GPU)"
    return Incumbent(name=f"{kernel.target}-{kernel.id}", source=kernel.source_path.read_text(), summary=summary + ".")


_ABS_PATH = re.compile(r"(?<![\w.~])(?:/[\w.+@-]+)+/([\w.+@-]+)")


def scrub_paths(text: str) -> str:
    """Absolute paths cut to their last part: run and sandbox directories differ in every run."""
    return _ABS_PATH.sub(r"\1", text or "")


_FRAME = re.compile(r'^\s*File "([^"]+)", line \d+')


def trim_stderr(text: str, lines: int = STDERR_LINES) -> str:
    """A traceback cut to what the model can act on: frames outside the library code, and the error."""
    kept: list[str] = []
    skipping = False
    for line in (text or "").strip("\n").splitlines():
        frame = _FRAME.match(line)
        if frame:
            where = frame.group(1)
            skipping = "site-packages" in where or "/autotune/" in where or where.startswith("<")
            if skipping and (not kept or kept[-1] != "  ..."):
                kept.append("  ...")
            if skipping:
                continue
        elif skipping and line.startswith("    "):
            continue  # the source line under a skipped frame
        else:
            skipping = False
        kept.append(line)
    return scrub_paths("\n".join(kept[-lines:]))


def _roofline_slots(roofline: Roofline) -> dict[str, str]:
    flop_rate = f"{roofline.tflops:,.0f} TFLOP/s" if roofline.tflops else "an unknown FLOP rate (not counted)"
    return {"bandwidth": f"{roofline.bandwidth_gbps:,.0f} GB/s", "flop_rate": flop_rate, "source": roofline.source}


def _case_slots(case, reason: str, target: Target | None) -> dict[str, Any]:
    note = scrub_paths(case.note)
    shape = target.label_shape(case.shape) if target else "x".join(str(d) for d in case.shape)
    scalars = ", ".join(f"{k}={v:g}" for k, v in (case.scalars or {}).items())
    return {"shape": shape, "dtype": case.dtype, "kind": case.kind, "seed": case.seed,
            "kind_words": INPUT_KINDS.get(case.kind, ""), "layout": layout_in_words(target, case), "scalars": scalars,
            "max_abs_err": _num(case.max_abs_err), "max_rel_err": _num(case.max_rel_err),
            "atol": _num(case.atol), "rtol": _num(case.rtol), "note": "" if note in reason else note}


def _timing_slots(t, target: Target | None = None) -> dict[str, str]:
    return {"shape": target.label_shape(t.shape) if target else "x".join(str(d) for d in t.shape), "dtype": t.dtype,
            "candidate": _num(t.candidate_us), "eager": _num(t.eager_us), "compile": _num(t.compile_us),
            "speedup": _ratio(t.speedup), "floor": pct(t.pct_of_floor / 100) if t.pct_of_floor is not None else "-"}


def _roofline(target: Target, shape: tuple[int, ...], dtype: str, roofline: Roofline
              ) -> tuple[float | None, str | None]:
    try:
        return target.roofline(tuple(int(d) for d in shape), parse_dtype(dtype), roofline.bandwidth_gbps,
                               roofline.tflops)
    except (ValueError, TypeError, IndexError):
        return None, None


def _bytes_moved(target: Target, shape: tuple[int, ...], dtype: str) -> int | None:
    try:
        return int(target.bytes_moved(tuple(int(d) for d in shape), parse_dtype(dtype)))
    except (ValueError, TypeError, IndexError):
        return None  # a shape this target cannot read: the row says "?" rather than a wrong figure


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _ratio(x: float | None) -> str:
    return "" if x is None else f"{x:.2f}x"
