"""The judge's side of a run: each device frame as it arrives (`Session.on_frame`); judge.status concludes."""

from __future__ import annotations

import dataclasses
import logging
import queue
import time

import torch

from autotune.targets.base import Target
from autotune.verify import protocol
from autotune.verify.judge.compare import REDUCED_FP32_DOTS, judge_case
from autotune.verify.plan.cases import Case
from autotune.verify.plan.data import CaseData
from autotune.verify.static import policy
from autotune.verify.verdict import CaseResult

log = logging.getLogger("autotune.verify")
PROGRESS_EVERY_S = 10.0  # a line "judged N of M cases" at most this often while a candidate is judged


class Session:
    """The judge's state while the worker runs; `on_frame` sees each frame as it arrives."""

    def __init__(self, target: Target, cases: list[Case], data: dict[int, CaseData], fp32_dot: str = "tf32"):
        self.target, self.cases, self.data, self.fp32_dot = target, cases, data, fp32_dot
        self.fp32_dots: set[str] = set()  # the reduced precisions its fp32 cases' tl.dot ran at
        self.results: dict[int, CaseResult] = {}
        self.ran_whole: set[int] = set()  # sampled cases whose every program ran in the end (replay.repeat_sampled)
        self.too_slow: dict[int, float] = {}  # sampled cases too slow to run again whole -> the whole call's seconds
        self.smaller: dict[int, int | None] = {}  # ... -> the case run whole at a smaller size in its place
        self.running: int | None = None
        self.compile_error = ""
        self.case_error: protocol.CaseError | None = None
        self.defence_refused: list[str] = []  # what the run-time defence refused, by its own record
        self.runtime_policy: list[str] = []
        self.protocol = ""
        self.setup_error = ""  # the worker could not set up (no GPU inside the sandbox): not the candidate's fault
        self.nondeterministic = False
        self.coverage: protocol.Coverage | None = None  # the device's account of the launches seen at served shapes
        self.started = self.said = self.case_started = time.monotonic()
        self.dry_labels: dict[int, str] = {}  # dry call index -> the served shape it stands for
        # the device's answer to each coverage check (protocol.DryUncovered), None once the run stopped
        self.coverage_answers: queue.Queue[protocol.DryUncovered | None] = queue.Queue()
        self.host_isolation: dict = {}

    def on_frame(self, frame: dict) -> bool:
        """A frame the reader checked against its schema (protocol.device_schemas); True: stop the worker."""
        record = protocol.parse(frame)
        stop = self._on_record(record) if record is not None else False
        if isinstance(record, protocol.DryUncovered):
            self.coverage_answers.put(record)
        if stop:
            self.coverage_answers.put(None)
        return stop

    def _on_record(self, r: protocol.Frame) -> bool:
        if isinstance(r, protocol.CaseStart):
            self.running, self.case_started = r.index, time.monotonic()
        elif isinstance(r, protocol.CaseEvidence):
            return self._on_result(r)
        elif isinstance(r, protocol.CompileError):
            self.compile_error, self.defence_refused = r.error, list(r.defence_refused)
            return True
        elif isinstance(r, protocol.CaseError):
            self.case_error, self.defence_refused = r, list(r.defence_refused)
            return True
        elif isinstance(r, protocol.ImportOps):  # recorded while the candidate's module was imported
            return self._on_import(r)
        elif isinstance(r, protocol.SetupError):
            self.setup_error = r.error
            return True
        elif isinstance(r, protocol.PolicyError):  # the device refused to build a kernel (the allow-list)
            self.runtime_policy.append(f"{r.error} (a kernel may use only the allow-listed triton.language names)")
            return True
        elif isinstance(r, protocol.HostProtocol):
            self.protocol = r.error or "the candidate's process ended before it finished its cases"
            return True
        elif isinstance(r, protocol.HostGone):
            self.protocol = "the candidate's process ended before it finished its cases"
            return True
        elif isinstance(r, protocol.Coverage):
            self.coverage = r
        elif isinstance(r, protocol.HostIsolation):
            self.host_isolation = r.report
        return False

    def _on_import(self, r: protocol.ImportOps) -> bool:
        torch_math = policy.runtime_violations(r.torch_ops)
        if torch_math:
            self.runtime_policy.append(f"torch math while the candidate was imported: {', '.join(torch_math)} "
                                       "(a module may define kernels and constants, not compute answers)")
        return bool(torch_math)

    def _on_result(self, ev: protocol.CaseEvidence) -> bool:
        i = ev.index
        if i != self.running or i in self.results or not 0 <= i < len(self.cases):
            self.protocol = f"an unexpected or malformed result for case {i!r}"
            return True
        case = self.cases[i]
        result, nondeterministic = judge_case(self.target, case, self.data.pop(i), ev,  # its data is needed no more
                                              self.target.tolerances[case.dtype], self.fp32_dot)
        if case.dtype == torch.float32 and set(ev.fp32_dots) <= set(REDUCED_FP32_DOTS):
            self.fp32_dots.update(ev.fp32_dots)  # judged through TF32
        result.seconds = round(time.monotonic() - self.case_started, 3)
        self.results[i] = result
        if case.sample and ev.output_valid is None:
            self.ran_whole.add(i)
        if case.sample and ev.whole_estimate_s is not None:
            self.too_slow[i] = ev.whole_estimate_s
        self._say_progress()
        self.nondeterministic |= nondeterministic
        launches = ev.launches
        if not launches or launches[0] == 0:
            self.runtime_policy.append(f"no Triton kernel ran in case {case.label}: the entry function must "
                                       "launch a @triton.jit kernel that does the math")
        elif result.passed and 0 in launches[1:]:  # a cache that a refill did not expose (content-keyed)
            self.runtime_policy.append(f"a repeated call launched no Triton kernel in case {case.label} "
                                       "(results replayed from a cache?)")
        torch_math = policy.runtime_violations(ev.torch_ops)
        if torch_math:
            self.runtime_policy.append(f"torch math at run time in case {case.label}: {', '.join(torch_math)} "
                                       "(outside kernels only allocation, views and copies may run)")
        return bool(self.runtime_policy) or not result.passed

    def as_run(self) -> list[Case]:
        """The cases, a sampled one whose every program ran in the end counted as whole."""
        return [dataclasses.replace(c, sample=0) if c.index in self.ran_whole else c for c in self.cases]

    def _say_progress(self) -> None:
        """Judging can take minutes: every PROGRESS_EVERY_S a line with the cases done (on stderr for `autotune
        verify`, through Hydra's logging for `autotune run`), and one when the last is."""
        now, done = time.monotonic(), len(self.results)
        if now - self.said >= PROGRESS_EVERY_S or done == len(self.cases):
            self.said = now
            log.info("%s: judged %d of %d cases (%.0f s)", self.target.name, done, len(self.cases), now - self.started)

    def running_label(self) -> str:
        """What the worker was doing when it last said: 'importing the candidate' or 'running case ...'."""
        if self.case_error is not None and self.case_error.dry:  # before any case: a call at a served shape
            at = -1 if self.case_error.index is None else self.case_error.index
            where = self.dry_labels.get(at, "a served shape")
            return f"calling it at {where} (a dry call)"
        if self.running is None or not 0 <= self.running < len(self.cases):
            return "importing the candidate"
        return f"running case {self.cases[self.running].label}"
