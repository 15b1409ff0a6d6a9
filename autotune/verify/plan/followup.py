"""The cases added while a candidate runs, after the plan (autotune.verify.judge runs them as the device answers):
at served shapes whose launches no planned case ran (`coverage_cases`: their cuts, then their range cases for a
launch still not run), at the cheapest probe that makes a launch only served sizes make (`probe_shapes`,
`probe_cases`), and whole at a smaller size in place of a sample too slow to run again whole
(`smaller_whole_case`)."""

from __future__ import annotations

import dataclasses

import torch

from autotune.targets.base import Shape, Target
from autotune.verify.plan.cases import Case, extra_cut, range_sample, work
from autotune.verify.plan.config import PlanConfig


def coverage_cases(target: Target, served, config: PlanConfig, start: int, cut: bool = True) -> list[Case]:
    """Cases for served shapes whose launches no planned case ran (`served`: (shape, dtype) of the dry calls that
    made them; a kernel that specialises on a combination of sizes, as vLLM's decode kernel does on the query
    group and head_dim, makes one signature per preset), numbered from `start`, one per distinct shape: the
    ordinary cut of each (`cut`), else its range cases (for the launches the cuts did not make either)."""
    rows, elements = config.max_interpreter_rows, config.max_interpreter_elements
    cases: list[Case] = []
    seen: set = set()
    for shape, dtype in served:
        shape = tuple(shape)
        runs = [(tuple(target.cut_shape(shape, rows, elements)), 0, "coverage")] if cut else [
            (tuple(r), range_sample(target, tuple(r), config), "range") for r in target.range_cuts(shape)]
        for run, sample, source in runs:
            if (run, dtype) not in seen:
                seen.add((run, dtype))
                cases.append(Case(index=start + len(cases), shape=run, dtype=dtype, kind="normal", seed=0,
                                  source=source, requested_shape=shape, sample=sample))
    return cases


def smaller_whole_case(target: Target, case: Case, seconds: float, config: PlanConfig, index: int) -> Case | None:
    """For a sampled case whose sample compared nothing alone and whose whole call would take the interpreter
    `seconds` (at the sample's pace, over `verify.rerun_within_s`: replay.repeat_sampled), the case run whole at a
    smaller shape, numbered `index`: its dims above the extra cases' cut halved, the one furthest above first,
    until the whole call, scaled by its FLOPs (values where it has none), fits, or one halving more would reach the
    cut (None where that is the case's own shape). A dim served alone or a pair served together still meets every
    program there, only smaller, and the verdict says at what size (plan.notes.rerun_note)."""
    base = extra_cut(target, case.requested_shape, config)
    run = list(case.shape)
    while seconds * _cost(target, run) / _cost(target, case.shape) > config.rerun_within_s:
        over = [d for d in range(len(run)) if run[d] > base[d]]
        if not over:
            break
        d = max(over, key=lambda d: run[d] / max(1, base[d]))
        smaller = [*run[:d], max(base[d], run[d] // 2), *run[d + 1:]]
        if tuple(smaller) == base:  # the cut's cases ran that: one step above it
            break
        run = smaller
    shape = tuple(target.coherent(tuple(run)))
    return dataclasses.replace(case, index=index, shape=shape, sample=0) if shape != case.shape else None


def _cost(target: Target, shape) -> int:
    """The interpreter's work for a call, as smaller_whole_case scales it: its FLOPs, else its values."""
    return max(1, target.flops(tuple(shape), torch.float32) or sum(target.io_elements(tuple(shape))))


def probe_shapes(target: Target, shape: Shape, config: PlanConfig) -> list[Shape]:
    """The probes' shapes for one served shape (see dry.probe_calls)."""
    shape = tuple(shape)
    cut = tuple(target.cut_shape(shape, config.max_interpreter_rows, config.max_interpreter_elements))
    probes = []
    for d, (low, high) in enumerate(zip(cut, shape)):
        bucket = 1 << max(0, (high - 1).bit_length() - 1)  # the largest power of two below the served value
        probes += [(*cut[:d], value, *cut[d + 1:]) for value in sorted({bucket + 1, high}) if low < value <= high]
    return probes


def probe_cases(target: Target, made, config: PlanConfig, start: int) -> list[Case]:
    """For each launch no case ran, a case at the cheapest probe that made it (`made`: for each such launch, the
    (shape, dtype) of the probes that made it; none: it stays unproven), numbered from `start`. It runs every
    program up to verify.probe_whole_work (a grid that leaves outputs unwritten at that size shows), else a sample
    (what its programs compute is checked, not what the grid leaves out: probe_note says so)."""
    chosen = dict.fromkeys(min(probes, key=lambda p: (work(target, p[0]), p[0], str(p[1]))) for probes in made
                           if probes)
    return [Case(index=start + i, shape=shape, dtype=dtype, kind="normal", seed=0, source="probe",
                 requested_shape=shape,
                 sample=0 if work(target, shape) <= config.probe_whole_work else config.range_programs)
            for i, (shape, dtype) in enumerate(chosen)]
