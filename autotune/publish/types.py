"""The publish stage's records: what a proposal is made from (`ProposalRequest`), the proposal itself (`Proposal`)
and its state (`ProposalStatus`). The backends (local.py, github.py), the evidence page and the review command read
and write them; `autotune/publish/__init__.py` re-exports them for the run."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from autotune.records import Hotspot
from autotune.verify.verdict import Verdict


@dataclasses.dataclass
class ProposalRequest:
    """Everything the evidence page and provenance need about one kernel; built by `autotune run`.

    candidate: {"id", "agent", "model", "turn", "prompt_tokens", "cached_tokens", "completion_tokens",
        "cost_usd"} (missing keys read as unknown).
    hotspot: the target's `Hotspot` in the profile (a dict of hotspots.json's form is read into one), with its
        profile's run, serving time and assumed speedup; None without a profile.
    model_check: {"prompts": int, "new_tokens": int, "tokens_identical": bool, "max_logit_diff": float,
        "logit_tolerance": float | None, "latency": {"before": {metric: value}, "after": {...}} | None
        (GPU only)}; None when not run.
    environment: an `autotune.env.Environment.to_dict()`.
    """

    target: str
    source: str
    verdict: Verdict
    candidate: dict[str, Any]
    hotspot: Hotspot | None
    model_check: dict[str, Any] | None
    environment: dict[str, Any]
    run_dir: str
    run_id: str
    engine_bench: dict[str, Any] | None = None  # `autotune bench` with this kernel in B (engine.bench.bench_for_kernel)

    def __post_init__(self):
        if isinstance(self.hotspot, dict):
            self.hotspot = Hotspot.from_dict(self.hotspot)


class ProposalStatus(str, enum.Enum):
    """Where a proposal stands (a str enum: the JSON record holds its value)."""

    OPEN = "open"
    APPROVED = "approved"
    REJECTED = "rejected"

    def __str__(self) -> str:  # the value in f-strings and tables, on every Python version
        return self.value


@dataclasses.dataclass
class Proposal:
    """A published kernel and what became of it; stored as JSON beside the repository (see records.py)."""

    id: str  # "<op>-<short id>", e.g. "rms_norm-1a2b3c"
    target: str
    branch: str
    base: str
    commit: str  # the proposal commit on `branch`
    status: ProposalStatus
    created_at: str
    pr_url: str | None
    pr_number: int | None
    reason: str | None  # the reviewer's reason for a rejection
    evidence_path: str
    verdict_status: str
    speedup: float | None  # weighted geometric mean over shapes; None when not measured
    backend: str = "local"
    run_id: str = ""
    sha256: str = ""  # of the kernel source
    kernel_dir: str = ""  # "kernels/<op>/<short id>"
    merge_commit: str | None = None
    decided_at: str | None = None
    share: float | None = None  # the target's share of serving time in the run's profile (None: no profile)
    updated_at: str | None = None  # when a later run found the same kernel and added its evidence beside the first

    def __post_init__(self):
        self.status = ProposalStatus(self.status)  # read back from its JSON record as text
