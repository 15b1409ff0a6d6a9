"""The Verdict: what the checker concluded about one candidate, and all the evidence for it.

It is a plain record (dataclasses + a string enum) so that the ledger, the agent's feedback prompt,
the PR evidence and `autotune verify --json` all read the same thing. Anything not proven correct is
never ACCEPTED or UNMEASURED.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any


class Status(str, enum.Enum):
    ACCEPTED = "accepted"  # correct and measurably faster than the best baseline
    UNMEASURED = "unmeasured"  # correct; no GPU to time it
    SLOWER = "slower"  # correct but not faster than the best baseline beyond the noise margin
    INCORRECT = "incorrect"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    POLICY_VIOLATION = "policy_violation"

    @property
    def passed(self) -> bool:
        """The exit-0 statuses: correct, and either faster or not measurable here."""
        return self in (Status.ACCEPTED, Status.UNMEASURED)

    @property
    def correct(self) -> bool:
        return self in (Status.ACCEPTED, Status.UNMEASURED, Status.SLOWER)


@dataclasses.dataclass
class CaseResult:
    """One correctness case: a shape x dtype x input kind x seed."""

    shape: list[int]
    dtype: str
    kind: str  # normal | large | special
    seed: int
    passed: bool
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    rtol: float | None = None
    atol: float | None = None
    evidence: bool = True  # False when the reference output is degenerate (constant, all zero)
    source: str = "edge"  # profile | default | edge | model | random
    layout: str = "contiguous"  # how the inputs sat in memory (targets.base.LAYOUTS)
    scalars: dict[str, float] = dataclasses.field(default_factory=dict)  # scalar arguments set by the case (eps)
    note: str = ""  # why it failed, or why it does not count


@dataclasses.dataclass
class ShapeTiming:
    """GPU timing of one shape and dtype; times are medians over repetitions, in microseconds."""

    shape: list[int]
    dtype: str
    candidate_us: float
    candidate_spread_us: float  # p80 - p20
    eager_us: float | None
    compile_us: float | None
    speedup: float | None  # best baseline / candidate
    floor_us: float | None  # bytes moved / peak bandwidth
    pct_of_floor: float | None  # floor / candidate * 100: how close to the memory roofline
    calls: int = 0  # how often the served model made this call in the profile (the geomean weight)
    implausible: bool = False  # faster than the bandwidth floor allows


@dataclasses.dataclass
class Verdict:
    status: Status
    reason: str
    target: str
    candidate: str  # path of the file that was judged
    candidate_sha256: str = ""
    cases: list[CaseResult] = dataclasses.field(default_factory=list)
    timings: list[ShapeTiming] = dataclasses.field(default_factory=list)
    speedup_geomean: float | None = None  # weighted by the profile's call counts
    measured: bool = False  # timings come from a GPU
    nondeterministic: bool = False
    policy: list[str] = dataclasses.field(default_factory=list)  # static-scan findings
    sandbox: dict[str, Any] = dataclasses.field(default_factory=dict)  # isolation that was applied
    stderr_tail: str = ""  # the candidate process's stderr, trimmed (compile errors, tracebacks)
    duration_s: float = 0.0
    environment: dict[str, Any] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)  # what the report must say (rows cut, ...)
    # the secret the case inputs and random sizes were drawn with; written after the candidate's process is gone
    inputs_salt: str = ""

    @property
    def passed(self) -> bool:
        return self.status.passed

    def failing_case(self) -> CaseResult | None:
        return next((c for c in self.cases if not c.passed), None)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["status"] = self.status.value
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Verdict":
        d = dict(d)
        d["status"] = Status(d["status"])
        d["cases"] = [CaseResult(**c) for c in d.get("cases", [])]
        d["timings"] = [ShapeTiming(**t) for t in d.get("timings", [])]
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})
