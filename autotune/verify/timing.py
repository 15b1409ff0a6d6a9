"""Timing on a GPU, after correctness: is the candidate faster than the strongest cheap baseline?

Runs only when a GPU is present (judge.py calls `measure` for a candidate proven correct). The candidate
is timed in one isolated process and the baselines (eager reference, torch.compile of it) in another
that never imported the candidate, both by bench.py's protocol. Then, per shape:
speedup = best baseline time / candidate time; a time below the roofline floor (`Target.floor_us`: the
longer of bytes moved / peak bandwidth and FLOPs / peak FLOP rate of the GPU) is implausible: the kernel
cannot have moved its data or done its math that fast, so the number is not trusted and the candidate is
not accepted. The outputs of the last timed calls are checked against
the reference again. Status: `accepted` when the geometric mean of the speedups, weighted by the
profile's call counts, beats 1 + verify.noise_margin; else `slower`.

Not run during development (no GPU there): the GPU path is written to the protocol and its pure parts
(floors, geomean, the decision) are tested on CPU; the first GPU run is its real test.
"""

from __future__ import annotations

import math
import secrets
import tempfile
from pathlib import Path

from autotune.records import ProfiledShape
from autotune.targets.base import Target, dtype_name, parse_dtype
from autotune.verify.cases import answers, generator, target_dtypes
from autotune.verify.compare import compare_all
from autotune.sandbox import Limits, SandboxResult, run_isolated
from autotune.verify.verdict import ShapeTiming, Status, Verdict

# Peak DRAM bandwidth in GB/s by GPU name fragment (vendor datasheets); the longest match wins.
PEAK_BANDWIDTH_GBPS = {
    "H200": 4800, "H100 SXM": 3350, "H100 NVL": 3900, "H100 PCIe": 2000, "H100": 3350, "GH200": 4000,
    "B200": 8000, "A100-SXM4-80GB": 2039, "A100 80GB PCIe": 1935, "A100-PCIE-80GB": 1935, "A100": 1555,
    "L40S": 864, "L40": 864, "L4": 300, "A10G": 600, "A10": 600, "T4": 320, "V100": 900,
    "RTX 4090": 1008, "RTX 3090": 936, "MI300X": 5300,
}
# Peak dense bf16/fp16 tensor-core rate in TFLOP/s (vendor datasheets, without sparsity), for the FLOP side of
# the roofline floor of compute-bound targets; the same name matching as the bandwidth table.
PEAK_TFLOPS = {
    "H200": 989, "H100 SXM": 989, "H100 NVL": 835, "H100 PCIe": 756, "H100": 989, "GH200": 989,
    "B200": 2250, "A100": 312, "L40S": 362, "L40": 181, "L4": 121, "A10G": 70, "A10": 125, "T4": 65,
    "V100": 125, "RTX 4090": 165, "RTX 3090": 71, "MI300X": 1307,
}
SETS = 3


def _lookup(table: dict, gpu_name: str, override) -> float | None:
    if override is not None:
        return float(override)
    matches = [k for k in table if k.lower() in gpu_name.lower()]
    return float(table[max(matches, key=len)]) if matches else None


def peak_bandwidth_gbps(gpu_name: str, override) -> float | None:
    return _lookup(PEAK_BANDWIDTH_GBPS, gpu_name, override)


def peak_tflops(gpu_name: str, override=None) -> float | None:
    return _lookup(PEAK_TFLOPS, gpu_name, override)


def peaks(gpu_name: str, cfg_verify) -> tuple[float | None, float | None]:
    """(GB/s, TFLOP/s) the roofline floor uses for this GPU: verify.peak_bandwidth_gbps and verify.peak_tflops
    when set, else the GPU's datasheet figures; None where neither is known. The checker's timing and the
    prompt's floors both read it."""
    return (peak_bandwidth_gbps(gpu_name, cfg_verify.get("peak_bandwidth_gbps")),
            peak_tflops(gpu_name, cfg_verify.get("peak_tflops")))


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
    best = min(t for t in (eager, compiled) if t is not None) if (eager or compiled) else None
    us = cand["median_us"]
    floor, bound = target.roofline(tuple(shape), parse_dtype(dtype), peak_gbps, tflops)
    return ShapeTiming(shape=list(shape), dtype=dtype, candidate_us=us, candidate_spread_us=cand["spread_us"],
                       eager_us=eager, compile_us=compiled, speedup=best / us if best and us > 0 else None,
                       floor_us=floor, pct_of_floor=100.0 * floor / us if floor and us > 0 else None, calls=calls,
                       implausible=floor is not None and us < floor, bound=bound)


def _payload(target: Target, todo, cfg_verify, mode: str, source: str) -> dict:
    shapes = []
    salt = secrets.token_bytes(16)  # timing inputs are rechecked; a candidate must not be able to predict them
    for shape, dtype in ((s.shape, s.dtype) for s in todo):
        sets = [list(target.make_inputs(shape, parse_dtype(dtype), generator(target, shape, parse_dtype(dtype),
                                                                               f"timing{k}", 0, salt), "normal"))
                for k in range(SETS)]
        shapes.append({"shape": list(shape), "dtype": dtype, "sets": sets})
    timing = {k: float(v) for k, v in cfg_verify.timing.items()}
    return {"mode": mode, "source": source, "entry": target.name, "target": target.name, "shapes": shapes,
            "timing": timing, "seed": 0, "baselines": [str(b) for b in cfg_verify.baselines]}


def _bench(payload: dict, cfg_verify) -> SandboxResult:
    with tempfile.TemporaryDirectory(prefix="autotune-bench-", ignore_cleanup_errors=True) as tmp:
        return run_isolated("autotune.verify.bench", payload, limits=Limits.from_config(cfg_verify).scaled(time=3),
                            workdir=Path(tmp) / "work", gpu=True)


def _failure(run: SandboxResult, who: str) -> tuple[Status, str] | None:
    if run.ok and "error" not in (run.result or {}):
        return None
    if run.timed_out:
        return Status.TIMEOUT, f"timing the {who} took longer than the limit"
    error = (run.result or {}).get("error")
    if error:  # the isolated process could not use the GPU: not the candidate's fault
        return Status.UNMEASURED, f"correct; timing: not measured ({error})"
    lines = run.error.strip().splitlines()
    return Status.RUNTIME_ERROR, f"timing the {who} failed: {run.signal or (lines[-1] if lines else run.returncode)}"


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


def measure(target: Target, source: str, shapes, cfg_verify, verdict: Verdict) -> tuple[Status, str]:
    """Time a candidate already proven correct; fills verdict.timings and returns (status, reason)."""
    todo = timing_shapes(target, shapes, cfg_verify)
    cand = _bench(_payload(target, todo, cfg_verify, "candidate", source), cfg_verify)
    failed = _failure(cand, "candidate")
    if failed:
        return failed
    base = _bench(_payload(target, todo, cfg_verify, "baseline", ""), cfg_verify)
    failed = _failure(base, "baselines")
    if failed:  # the candidate is correct; only the comparison is missing
        return Status.UNMEASURED, failed[1] if failed[0] is Status.UNMEASURED else f"correct; {failed[1]}"
    wrong = _recheck(target, todo, [s["candidate"]["samples"] for s in cand.result["shapes"]])
    if wrong:
        return Status.INCORRECT, wrong
    peak, tflops = peaks(cand.result["gpu"], cfg_verify)
    verdict.timings = [shape_timing(target, s.shape, s.dtype, s.calls, c["candidate"], b, peak, tflops)
                       for s, c, b in zip(todo, cand.result["shapes"], base.result["shapes"])]
    verdict.measured = True
    if peak is None:
        verdict.notes.append(f"no bandwidth floor: unknown peak bandwidth for {cand.result['gpu']} "
                             "(set verify.peak_bandwidth_gbps)")
    return decide(verdict.timings, float(cfg_verify.noise_margin), verdict)


def decide(timings: list[ShapeTiming], noise_margin: float, verdict: Verdict) -> tuple[Status, str]:
    implausible = next((t for t in timings if t.implausible), None)
    if implausible is not None:
        return Status.INCORRECT, (f"implausible timing: {implausible.candidate_us:.2f} us at {implausible.shape} "
                                  f"{implausible.dtype} is below the roofline floor of {implausible.floor_us:.2f} us "
                                  "(bytes moved / peak bandwidth, FLOPs / peak FLOP rate); the measurement "
                                  "cannot be trusted")
    if any(t.speedup is None for t in timings):
        return Status.UNMEASURED, "correct; no baseline time to compare with"
    verdict.speedup_geomean = weighted_geomean([t.speedup for t in timings], [t.calls for t in timings])
    slowest = min(timings, key=lambda t: t.speedup)
    summary = (f"{verdict.speedup_geomean:.3f}x the best baseline (geometric mean over {len(timings)} shapes, "
               f"weighted by calls; lowest {slowest.speedup:.2f}x at {slowest.shape} {slowest.dtype})")
    if verdict.speedup_geomean > 1.0 + noise_margin:
        return Status.ACCEPTED, f"correct and faster: {summary}"
    return Status.SLOWER, f"correct but not faster by more than {noise_margin:.0%}: {summary}"

