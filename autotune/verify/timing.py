"""Timing after correctness: is the candidate faster than the strongest cheap baseline?

judge.py calls `measure` on a GPU for a candidate proven correct; the tests and the selfcheck's dry run call it
with the CPU device layer (`accel=autotune.accel.get("cpu")`), through the same processes. The candidate is
timed in one isolated process and the baselines (eager reference, torch.compile of it, Liger-Kernel's op where
installed) in another that never imported the candidate, both by bench.py's protocol (`protocol` returns what
they measured, `conclude` turns it into a status). Then, per shape: speedup = best baseline time / candidate
time; a time below the roofline floor (`Target.floor_us`: the longer of bytes moved / peak bandwidth and FLOPs /
peak FLOP rate of the GPU) is implausible: the kernel cannot have moved its data or done its math that fast, so
the number is not trusted and the candidate is not accepted. The outputs of the last timed calls are checked
against the reference again. Status: `accepted` when the geometric mean of the speedups, weighted by the
profile's call counts, beats 1 + verify.noise_margin; else `slower`.

Figures taken on a stand-in device (the CPU) never reach a verdict as speed: the candidate stays `unmeasured`
with STAND_IN_REASON, `verdict.timings` stays empty, and a note says the protocol ran on the stand-in.
"""

from __future__ import annotations

import dataclasses
import math
import secrets
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune import accel
from autotune.accel.datasheets import PEAK_BANDWIDTH_GBPS, PEAK_TFLOPS, peak_bandwidth_gbps, peak_tflops
from autotune.records import ProfiledShape
from autotune.sandbox import Limits, SandboxResult, run_isolated
from autotune.targets.base import Target, dtype_name, parse_dtype
from autotune.verify.bench import SETS
from autotune.verify.judge.compare import compare_all
from autotune.verify.plan.cases import target_dtypes
from autotune.verify.plan.data import answers, generator
from autotune.verify.verdict import ShapeTiming, Status, Verdict, quoted

__all__ = ["PEAK_BANDWIDTH_GBPS", "PEAK_TFLOPS", "STAND_IN_REASON", "Timed", "conclude", "decide", "measure",
           "peak_bandwidth_gbps", "peak_tflops", "peaks", "protocol", "shape_timing", "timing_shapes",
           "weighted_geomean"]

STAND_IN_REASON = "correct; timing: not measured (CPU stand-in timings only)"


def peaks(gpu_name: str, cfg_verify) -> tuple[float | None, float | None]:
    """(GB/s, TFLOP/s) the roofline floor uses for this GPU: verify.peak_bandwidth_gbps and verify.peak_tflops
    when set, else the GPU's datasheet figures; None where neither is known. The checker's timing and the
    prompt's floors both read it."""
    return (peak_bandwidth_gbps(gpu_name, cfg_verify.get("peak_bandwidth_gbps")),
            peak_tflops(gpu_name, cfg_verify.get("peak_tflops")))


@dataclasses.dataclass(frozen=True)
class Timed:
    """What the timing protocol measured, on which device; `failure` when it could not finish."""

    device: str  # the device's name: "NVIDIA H100 80GB HBM3", or "cpu (stand-in)"
    stand_in: bool  # True: not a GPU's figures; never a speed
    timings: tuple[ShapeTiming, ...] = ()
    candidate: tuple[dict, ...] = ()  # per shape, the candidate's figures (median_us, spread_us, rounds_us ...)
    baselines: tuple[dict[str, dict], ...] = ()  # per shape, each baseline's figures
    absent: dict[str, str] = dataclasses.field(default_factory=dict)  # baseline -> why it was not timed
    compile_backend: str = ""
    peak_bandwidth_gbps: float | None = None
    failure: tuple[Status, str] | None = None

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["failure"] = [self.failure[0].value, self.failure[1]] if self.failure else None
        return d


def timing_shapes(target: Target, shapes, cfg_verify) -> list[ProfiledShape]:
    """The profile's shapes, or the target's defaults in bf16 (the served dtype) with equal weight."""
    if shapes:
        return [ProfiledShape.of(s) for s in shapes]
    dtypes = [dtype_name(d) for d in target_dtypes(target, cfg_verify)]
    dtype = "bfloat16" if "bfloat16" in dtypes else dtypes[0]
    return [ProfiledShape(tuple(s), dtype, 1) for s in target.default_shapes]


def weighted_geomean(speedups: list[float], calls: list[int]) -> float:
    weights = [max(1, c) for c in calls]
    return math.exp(sum(w * math.log(s) for s, w in zip(speedups, weights)) / sum(weights))


def shape_timing(target: Target, shape, dtype: str, calls: int, cand: dict, base: dict,
                 peak_gbps: float | None, tflops: float | None = None) -> ShapeTiming:
    eager, compiled = base.get("eager", {}).get("median_us"), base.get("compile", {}).get("median_us")
    times = [b["median_us"] for b in base.values() if b.get("median_us")]  # eager, compile, a library's
    best = min(times) if times else None
    us = cand["median_us"]
    floor, bound = target.roofline(tuple(shape), parse_dtype(dtype), peak_gbps, tflops)
    return ShapeTiming(shape=list(shape), dtype=dtype, candidate_us=us, candidate_spread_us=cand["spread_us"],
                       eager_us=eager, compile_us=compiled, speedup=best / us if best and us > 0 else None,
                       floor_us=floor, pct_of_floor=100.0 * floor / us if floor and us > 0 else None, calls=calls,
                       implausible=floor is not None and us < floor, bound=bound)


def _payload(target: Target, todo, cfg_verify, mode: str, source: str, dev: accel.Accelerator) -> dict:
    shapes = []
    salt = secrets.token_bytes(16)  # timing inputs are rechecked; a candidate must not be able to predict them
    for shape, dtype in ((s.shape, s.dtype) for s in todo):
        sets = [list(target.make_inputs(shape, parse_dtype(dtype), generator(target, shape, parse_dtype(dtype),
                                                                               f"timing{k}", 0, salt), "normal"))
                for k in range(SETS)]
        shapes.append({"shape": list(shape), "dtype": dtype, "sets": sets})
    timing = {k: float(v) for k, v in cfg_verify.timing.items()}
    return {"mode": mode, "source": source, "entry": target.name, "target": target.name, "shapes": shapes,
            "timing": timing, "seed": 0, "baselines": [str(b) for b in cfg_verify.baselines], "accel": dev.name}


def _bench(payload: dict, cfg_verify, dev: accel.Accelerator) -> SandboxResult:
    with tempfile.TemporaryDirectory(prefix="autotune-bench-", ignore_cleanup_errors=True) as tmp:
        return run_isolated("autotune.verify.bench", payload, limits=Limits.from_config(cfg_verify).scaled(time=3),
                            workdir=Path(tmp) / "work", gpu=dev.sandbox_gpu)


def _failure(run: SandboxResult, who: str) -> tuple[Status, str] | None:
    if run.ok and not {"error", "failed"} & set(run.result or {}):
        return None
    if run.timed_out:
        return Status.TIMEOUT, f"timing the {who} took longer than the limit"
    error = (run.result or {}).get("error")
    if error:  # the isolated process could not use the GPU: not the candidate's fault
        return Status.UNMEASURED, f"correct; timing: not measured ({error})"
    lines = str((run.result or {}).get("failed") or run.error).strip().splitlines()
    why = run.signal or (quoted(lines[-1]) if lines else f"exit status {run.returncode}")
    return Status.RUNTIME_ERROR, f"timing the {who} failed: {why}"


def _recheck(target: Target, todo, samples_per_shape: list[list[dict]]) -> str | None:
    """The outputs produced while timing, against the reference for the inputs they came from."""
    for (shape, dtype), samples in zip(((s.shape, s.dtype) for s in todo), samples_per_shape):
        tol = target.tolerances[parse_dtype(dtype)]
        for sample in samples:
            reference, golden = answers(target, tuple(sample["args"]))
            check = compare_all(sample["outputs"], reference, golden, tol)
            if not check.passed:
                return f"an output produced while timing {list(shape)} {dtype} is wrong: {check.note}"
    return None


def measure(target: Target, source: str, shapes, cfg_verify, verdict: Verdict, *,
            accel: accel.Accelerator | None = None,
            on_timed: Callable[[Timed], None] | None = None) -> tuple[Status, str]:
    """Time a candidate already proven correct on `accel` (default: the GPU); fills verdict.timings (not on a
    stand-in device) and returns (status, reason). `on_timed` sees what the protocol measured (the selfcheck
    shows a stand-in's figures, labelled, where a verdict never does)."""
    timed = protocol(target, source, shapes, cfg_verify, accel)
    if on_timed is not None:
        on_timed(timed)
    return conclude(timed, cfg_verify, verdict)


def protocol(target: Target, source: str, shapes, cfg_verify, dev: accel.Accelerator | None = None) -> Timed:
    """The candidate's process, the re-check of the outputs it produced while timed, then (only if both passed)
    the baselines' process; what they measured."""
    dev = dev or accel.get("cuda")
    todo = timing_shapes(target, shapes, cfg_verify)
    cand = _bench(_payload(target, todo, cfg_verify, "candidate", source, dev), cfg_verify, dev)
    failed = _failure(cand, "candidate")
    if failed:
        return Timed(device=(cand.result or {}).get("device", dev.name), stand_in=dev.stand_in, failure=failed)
    got: dict = cand.result or {}
    device, stand_in = got["device"], bool(got["stand_in"])
    wrong = _recheck(target, todo, [s["candidate"]["samples"] for s in got["shapes"]])
    if wrong:
        return Timed(device=device, stand_in=stand_in, failure=(Status.INCORRECT, wrong))
    base = _bench(_payload(target, todo, cfg_verify, "baseline", "", dev), cfg_verify, dev)
    failed = _failure(base, "baselines")
    if failed:  # the candidate is correct; only the comparison is missing
        reason = failed[1] if failed[0] is Status.UNMEASURED else f"correct; {failed[1]}"
        return Timed(device=device, stand_in=stand_in, failure=(Status.UNMEASURED, reason))
    based: dict = base.result or {}
    peak, tflops = peaks(device, cfg_verify)
    figures = [{k: v for k, v in s["candidate"].items() if k != "samples"} for s in got["shapes"]]
    baselines = [{name: {k: v for k, v in b.items() if k != "samples"} for name, b in s.items()}
                 for s in based["shapes"]]
    timings = [shape_timing(target, s.shape, s.dtype, s.calls, c, b, peak, tflops)
               for s, c, b in zip(todo, figures, baselines)]
    return Timed(device=device, stand_in=stand_in, timings=tuple(timings), candidate=tuple(figures),
                 baselines=tuple(baselines), absent=dict(based["absent"]),
                 compile_backend=str(based["compile_backend"]), peak_bandwidth_gbps=peak)


def conclude(timed: Timed, cfg_verify, verdict: Verdict) -> tuple[Status, str]:
    """The status the protocol's figures give. A stand-in's never reach the verdict: `unmeasured`, with a note."""
    if timed.failure:
        return timed.failure
    verdict.notes += [f"baseline {name}: not timed ({why})" for name, why in timed.absent.items()]
    if timed.stand_in:
        verdict.notes.append(f"timing: the protocol ran end to end on {timed.device} ({len(timed.timings)} shapes, "
                             "baselines " + ", ".join(sorted({n for b in timed.baselines for n in b})) +
                             "); its figures are stand-ins, not a GPU's, and are not kept as timings")
        return Status.UNMEASURED, STAND_IN_REASON
    verdict.timings = list(timed.timings)
    verdict.measured = True
    liger = [f"{b['liger']['median_us']:.2f} us at {t.shape} {t.dtype}" for t, b in zip(timed.timings, timed.baselines)
             if "liger" in b]
    if liger:
        verdict.notes.append("Liger-Kernel baseline (counted in the best baseline): " + ", ".join(liger))
    if timed.peak_bandwidth_gbps is None:
        verdict.notes.append(f"no bandwidth floor: unknown peak bandwidth for {timed.device} "
                             "(set verify.peak_bandwidth_gbps)")
    return decide(verdict.timings, float(cfg_verify.noise_margin), verdict)


def decide(timings: list[ShapeTiming], noise_margin: float, verdict: Verdict) -> tuple[Status, str]:
    implausible = next((t for t in timings if t.implausible), None)
    if implausible is not None:
        return Status.INCORRECT, (f"implausible timing: {implausible.candidate_us:.2f} us at {implausible.shape} "
                                  f"{implausible.dtype} is below the roofline floor of {implausible.floor_us:.2f} us "
                                  "(bytes moved / peak bandwidth, FLOPs / peak FLOP rate); the measurement "
                                  "cannot be trusted")
    speedups = [t.speedup for t in timings]
    if not timings or any(s is None for s in speedups):
        return Status.UNMEASURED, "correct; no baseline time to compare with"
    known = [float(s or 0.0) for s in speedups]
    verdict.speedup_geomean = weighted_geomean(known, [t.calls for t in timings])
    lowest = min(range(len(timings)), key=known.__getitem__)
    slowest = timings[lowest]
    summary = (f"{verdict.speedup_geomean:.3f}x the best baseline (geometric mean over {len(timings)} shapes, "
               f"weighted by calls; lowest {known[lowest]:.2f}x at {slowest.shape} {slowest.dtype})")
    if verdict.speedup_geomean > 1.0 + noise_margin:
        return Status.ACCEPTED, f"correct and faster: {summary}"
    return Status.SLOWER, f"correct but not faster by more than {noise_margin:.0%}: {summary}"

