"""`python -m autotune.selfcheck`: every GPU path of autotune run end to end, in one short session.

Made for a GPU that is lent for minutes, not days: one command, prepared and tested on the CPU, that runs
each GPU path once and writes what it saw to `benchmarks/<date>-<gpu>.md` (the page) and `.json` (the
raw figures), plus `selfcheck.log` (every command it ran and its output). Sections, in order:

1. roofline   device-to-device copy and read-reduce of >= 1 GiB: the bandwidth every kernel is held to
2. profile    `autotune profile` of the llama3_8b preset (random bf16 weights) under a short chat
              workload: TTFT/TPOT, tokens/s, hot spots with CUDA kernel times, nsight metrics
3. verify     `autotune verify` of every target's correct example kernel (timed: per-shape speedups
              against eager and torch.compile, speed as a fraction of the measured roofline) and of every
              cheating candidate in tests/verify/candidates/ (each must get the status it gets on the
              CPU); the example kernels against Liger-Kernel where Liger has the op and is installed
4. run        `autotune run` with the search agent for two targets, and the model check's latency
              before/after
5. protocol   the timing protocol itself: a deliberately slowed correct kernel must come back `slower`,
              a correct kernel held to an impossible bandwidth must be flagged implausible

`--dry-run` runs the same code on the CPU with small sizes (tiny model, interpreter): every section,
every command, the page and the JSON. Through the CPU device layer (autotune.accel) it also runs what needs no
CUDA of the GPU-only parts: the bandwidth figures, the timing protocol of the examples and of the slowed kernel
(autotune.verify.timing.measure on the stand-in: both bench processes, the baselines, the statistics), the
library table; every such figure is labelled a CPU stand-in, and the verdicts still say not measured. What
truly needs CUDA (nsight metrics, CUDA kernel times, the model check's latency) is reported as not measured.
The test suite runs it.
A section that fails is reported as failed with its error, and the others still run; the page and the
JSON are rewritten after every section, so a session cut short keeps what it measured.

    python -m autotune.selfcheck [--dry-run] [--out DIR] [--only roofline,verify] [--budget-s S]
                                 [--max-candidates N]
    scripts/gpu_check.sh              # the same on a GPU machine, with the README's install done
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.accel import Accelerator

SECTIONS = ("roofline", "profile", "verify", "run", "protocol")


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one selfcheck does: where it writes, on which device, with which sizes."""

    out: Path  # benchmarks folder
    root: Path  # the project checkout (tests/verify/candidates, a scratch repo for publishing)
    dry_run: bool
    budget_s: float  # wall-clock budget for the whole check; each command gets what is left
    sections: tuple[str, ...] = SECTIONS
    max_candidates: int = 0  # per kind (correct, cheating) in section 3; 0 = every listed candidate

    @property
    def device(self) -> str:
        return "cpu" if self.dry_run else "cuda"

    @property
    def accel(self) -> Accelerator:
        """The device layer: the GPU, or on a dry run the CPU stand-in (its figures are labelled as such)."""
        from autotune import accel

        return accel.get(self.device)

    @property
    def work(self) -> Path:
        return self.out / "work"

    @property
    def log(self) -> Path:
        return self.out / "selfcheck.log"


@dataclasses.dataclass
class SectionResult:
    name: str
    ok: bool | None  # None: ran, nothing to judge (figures only)
    seconds: float
    data: dict[str, Any]
    error: str = ""


class Clock:
    """The budget: what is left of it, for each command's timeout."""

    def __init__(self, budget_s: float):
        self.start, self.budget_s = time.monotonic(), budget_s

    def left(self, floor_s: float = 30.0) -> float:
        return max(floor_s, self.budget_s - (time.monotonic() - self.start))


def cli(plan: Plan, clock: Clock, args: list[str], timeout_s: float | None = None) -> subprocess.CompletedProcess:
    """`autotune ARGS` as a child process (the same interpreter), logged; never raises on a non-zero exit."""
    cmd = [sys.executable, "-m", "autotune.cli", *args]
    limit = min(timeout_s or clock.left(), clock.left())
    started = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=plan.root, capture_output=True, text=True, timeout=limit,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
    except subprocess.TimeoutExpired as e:
        proc = subprocess.CompletedProcess(cmd, 124, _text(e.stdout),
                                           _text(e.stderr) + f"\n(killed after {limit:.0f} s)")
    with plan.log.open("a") as log:
        log.write(f"\n$ autotune {' '.join(args)}   # exit {proc.returncode}, {time.monotonic() - started:.1f} s\n")
        log.write(proc.stdout[-20000:] + proc.stderr[-20000:])
    return proc


def _text(b) -> str:
    return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")


def main(argv: list[str] | None = None) -> int:
    plan = _plan(_parser().parse_args(argv))
    if not plan.accel.available():
        print("error: no CUDA GPU visible; use --dry-run on a machine without one", file=sys.stderr)
        return 2
    for key, value in plan.accel.triton_env().items():  # on the CPU: Triton kernels defined in this process
        os.environ.setdefault(key, value)  # (example kernels, Liger) run on the interpreter
    from autotune.selfcheck import page, sections

    plan.work.mkdir(parents=True, exist_ok=True)
    plan.log.write_text(f"autotune selfcheck {'--dry-run ' if plan.dry_run else ''}started {dt.datetime.now():%F %T}\n")
    clock, results = Clock(plan.budget_s), list[SectionResult]()
    header = sections.header(plan)
    stem = plan.out / f"{dt.date.today().isoformat()}-{_slug(header['gpu'])}{'-dry-run' if plan.dry_run else ''}"
    for name in plan.sections:
        results.append(_run_section(name, getattr(sections, name), plan, clock, results))
        page.write(stem, header, results)
        print(f"selfcheck: {name}: {_status(results[-1])} ({results[-1].seconds:.0f} s)", flush=True)
    print(f"selfcheck: wrote {stem}.md and {stem}.json (commands and their output: {plan.log})")
    return 0 if all(r.ok is not False for r in results) else 1


def _run_section(name: str, fn: Callable, plan: Plan, clock: Clock, done: list[SectionResult]) -> SectionResult:
    started = time.monotonic()
    try:
        ok, data = fn(plan, clock, {r.name: r.data for r in done})
        return SectionResult(name, ok, time.monotonic() - started, data)
    except Exception as e:  # noqa: BLE001  (one broken section must not lose the others' figures)
        return SectionResult(name, False, time.monotonic() - started, {}, f"{type(e).__name__}: {e}")


def _status(r: SectionResult) -> str:
    return {True: "ok", False: f"FAILED {r.error}".strip(), None: "done"}[r.ok]


def _slug(gpu: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-") or "cpu"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m autotune.selfcheck", description=__doc__.split("\n")[0])
    p.add_argument("--dry-run", action="store_true", help="the same code on the CPU with small sizes")
    p.add_argument("--out", default="benchmarks", help="folder for the page, the JSON and the log")
    p.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections of {', '.join(SECTIONS)}")
    p.add_argument("--budget-s", type=float, default=None,
                   help="wall-clock budget for the whole check (default 480 s on a GPU, 1800 s for a dry run, "
                        "where the interpreter is slow)")
    p.add_argument("--max-candidates", type=int, default=0,
                   help="section 3: at most this many correct and this many cheating candidates (0 = all)")
    return p


def _plan(ns: argparse.Namespace) -> Plan:
    only = tuple(s.strip() for s in ns.only.split(",") if s.strip())
    unknown = [s for s in only if s not in SECTIONS]
    if unknown:
        raise SystemExit(f"error: unknown section(s) {', '.join(unknown)} (sections: {', '.join(SECTIONS)})")
    root = Path(__file__).resolve().parents[2]
    budget_s = ns.budget_s or (1800.0 if ns.dry_run else 480.0)
    return Plan(out=Path(ns.out).resolve(), root=root, dry_run=ns.dry_run, budget_s=budget_s, sections=only,
                max_candidates=ns.max_candidates)


def load_json(path: Path) -> Any:
    return json.loads(path.read_text())
