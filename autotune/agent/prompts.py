"""Rendering the agent's messages from the Jinja2 templates in `autotune/prompts/`.

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
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import jinja2
from omegaconf import OmegaConf

from autotune.targets.base import Target, dtype_name, parse_dtype
from autotune.verify.verdict import Status, Verdict

if TYPE_CHECKING:
    from autotune.profile.records import Hotspot

PROMPTS_DIR = Path(__file__).resolve().parents[1] / "prompts"  # autotune/prompts/, package data
EXAMPLE_TARGET = "rms_norm"  # whose correct example kernel (Target.example) the system message shows
ASSUMED_GPU = "H100 SXM"  # whose bandwidth the floors assume when there is no GPU to look up
STDERR_LINES = 30  # the end of a traceback that the model sees; more is noise at ~10 tokens a line

_env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(PROMPTS_DIR)), undefined=jinja2.StrictUndefined,
                          trim_blocks=True, lstrip_blocks=True, autoescape=False)


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
    """The bandwidth behind the prompt's time floors: configured, else the GPU's, else an assumption said so."""
    from autotune.verify.timing import PEAK_BANDWIDTH_GBPS, peak_bandwidth_gbps, peak_tflops  # the checker's

    given = OmegaConf.select(cfg, "verify.peak_bandwidth_gbps", default=None)
    given_tflops = OmegaConf.select(cfg, "verify.peak_tflops", default=None)
    if given:
        return Roofline(float(given), "set by verify.peak_bandwidth_gbps",
                        float(given_tflops) if given_tflops else None)
    gpu = _gpu_name(str(OmegaConf.select(cfg, "device", default="auto")))
    found = peak_bandwidth_gbps(gpu, None) if gpu else None
    if found:
        return Roofline(found, f"the {gpu}'s peaks", peak_tflops(gpu, given_tflops))
    assumed = float(PEAK_BANDWIDTH_GBPS[ASSUMED_GPU])
    why = f"{gpu} is not in the checker's table" if gpu else "no GPU was seen here"
    return Roofline(assumed, f"assumed: an {ASSUMED_GPU}'s, since {why}", peak_tflops(ASSUMED_GPU, given_tflops))


def _gpu_name(device: str) -> str | None:
    import torch

    if device == "cpu" or not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_name(0)


def render(template: str, **slots: Any) -> str:
    text = _env.get_template(template).render(**slots)
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


def system_message(example: Path | None = None) -> str:
    from autotune import targets
    from autotune.verify.policy import ALLOWED_IMPORTS  # the contract as the checker enforces it

    example = example or targets.get(EXAMPLE_TARGET).example_path
    source = example.read_text().rstrip() if example.is_file() else ""
    return render("system.md.j2", allowed_imports=", ".join(f"`{m}`" for m in ALLOWED_IMPORTS),
                  example_name=example.stem if source else "", example_source=source)


def task_message(target: Target, hotspot: Hotspot | None, roofline: Roofline, *, index: int, candidates: int,
                 incumbent: Incumbent | None = None, rejections: Iterable[str] = ()) -> str:
    profile = None
    if hotspot:
        profile = {"share_pct": _pct(hotspot.share), "calls": f"{hotspot.calls:,}", "total_us": _us(hotspot.total_us)}
    return render("task.md.j2", target=target, signature=target.signature,
                  reference_source=target.reference_source(), profile=profile,
                  shapes=shape_rows(target, hotspot, roofline), roofline=_roofline_slots(roofline),
                  advice=advice(target, roofline),
                  edge_shapes=", ".join("x".join(map(str, s)) for s in target.edge_shapes),
                  incumbent=incumbent, rejections=[scrub_paths(r) for r in rejections if r],
                  index=index, candidates=candidates)


def advice(target: Target, roofline: Roofline) -> str:
    """What makes a kernel for this target fast: its class's advice (autotune/prompts/advice/<class>.md.j2), then its own."""
    text = render(f"advice/{target.op_class.value}.md.j2", target=target, roofline=_roofline_slots(roofline))
    return text + (f"- {target.advice.strip()}\n" if target.advice else "")


def shape_rows(target: Target, hotspot: Hotspot | None, roofline: Roofline) -> list[dict[str, str]]:
    """One row per profiled (shape, dtype): calls, share, bytes moved and the time floor."""
    profiled = bool(hotspot and hotspot.shapes)
    if profiled:
        entries = [(s.shape, s.dtype, s.calls, s.total_us) for s in hotspot.shapes]
    else:
        entries = [(tuple(s), dtype_name(d), None, None) for s in target.default_shapes for d in target.dtypes]
    total_us = sum(e[3] for e in entries) if profiled else 0.0
    rows = []
    for shape, dtype, calls, us in entries:
        moved = _bytes_moved(target, shape, dtype)
        floor, bound = _roofline(target, shape, dtype, roofline)
        rows.append({"shape": "x".join(str(d) for d in shape), "dtype": dtype,
                     "calls": f"{calls:,}" if calls is not None else "-",
                     "share": _pct(us / total_us) if total_us and us else "-",
                     "bytes": _size(moved) if moved is not None else "?", "floor": _us(floor) if floor else "?",
                     "bound": bound or "?"})
    return rows


def feedback_message(verdict: Verdict | None, *, file: str, no_code: str = "") -> str:
    """What the model reads about its last reply: the verdict, or why the reply held no file."""
    if verdict is None:
        return render("feedback.md.j2", no_code=no_code or "no usable code", file=file, status="no_code",
                      reason="", case=None, policy=[], stderr="", timings=[], speedup="", measured=False)
    case = verdict.failing_case()
    reason = scrub_paths(verdict.reason)
    crashed = verdict.status in (Status.COMPILE_ERROR, Status.RUNTIME_ERROR, Status.TIMEOUT)
    return render("feedback.md.j2", no_code="", file=file, status=verdict.status.value, reason=reason,
                  case=_case_slots(case, reason) if case else None, policy=[scrub_paths(p) for p in verdict.policy],
                  stderr=trim_stderr(verdict.stderr_tail) if crashed else "",  # else interpreter warnings, noise
                  timings=[_timing_slots(t) for t in verdict.timings] if verdict.measured else [],
                  speedup=_ratio(verdict.speedup_geomean), measured=verdict.measured)


def incumbent_from(name: str, path: Path, verdict: Verdict | None) -> Incumbent:
    """An `Incumbent` from a judged kernel file, summarised by its verdict."""
    summary = f"`{name}`"
    if verdict is not None:
        summary += f": {verdict.status.value}"
        if verdict.speedup_geomean:
            summary += f", {_ratio(verdict.speedup_geomean)} over the best baseline (weighted by calls)"
        elif verdict.status is Status.UNMEASURED:
            summary += " (correct; not timed, no GPU)"
    return Incumbent(name=name, source=Path(path).read_text(), summary=summary + ".")


_ABS_PATH = re.compile(r"(?<![\w.~])(?:/[\w.+@-]+)+/([\w.+@-]+)")


def scrub_paths(text: str) -> str:
    """Absolute paths cut to their last part: run and sandbox directories differ in every run."""
    return _ABS_PATH.sub(r"\1", text or "")


_FRAME = re.compile(r'^\s*File "([^"]+)", line \d+')


def trim_stderr(text: str, lines: int = STDERR_LINES) -> str:
    """A traceback cut to what the model can act on: frames outside the library code, and the error."""
    kept, skipping = [], False
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


def _case_slots(case, reason: str) -> dict[str, Any]:
    note = scrub_paths(case.note)
    return {"shape": "x".join(str(d) for d in case.shape), "dtype": case.dtype, "kind": case.kind, "seed": case.seed,
            "max_abs_err": _num(case.max_abs_err), "max_rel_err": _num(case.max_rel_err),
            "atol": _num(case.atol), "rtol": _num(case.rtol), "note": "" if note in reason else note}


def _timing_slots(t) -> dict[str, str]:
    return {"shape": "x".join(str(d) for d in t.shape), "dtype": t.dtype, "candidate": _num(t.candidate_us),
            "eager": _num(t.eager_us), "compile": _num(t.compile_us), "speedup": _ratio(t.speedup),
            "floor": f"{t.pct_of_floor:.0f}%" if t.pct_of_floor is not None else "-"}


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


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * float(x):.1f}%"


def _us(x: float | None) -> str:
    if x is None:
        return "-"
    if x >= 1e3:
        return f"{x / 1e3:,.2f} ms"
    if x >= 1:
        return f"{x:.2f} us"
    return f"{x * 1e3:.0f} ns" if x >= 0.01 else f"{x * 1e3:.1f} ns"


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"
