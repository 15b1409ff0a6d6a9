"""Publishing: turn the best verdict of a target into a proposal a human reviews, and record the decision.

`publish(request, cfg)` makes a branch `<publish.branch_prefix>/<op>-<id>` from `publish.base` with one
commit (the kernel, its provenance, the evidence page and a generated regression test, under
`kernels/<op>/<id>/` and `tests/kernels/`) without touching the user's checkout, then hands it to the
backend in `publish.backend`:

- `local`: a proposal record; `autotune review approve ID` merges the branch (`--no-ff`) into the base,
  which registers the kernel; `reject ID --reason TEXT` deletes the branch and keeps the reason, which
  `rejection_reasons` gives to the next run's prompts.
- `github`: pushes the branch to `publish.remote` and opens (or updates) a pull request whose body is the
  evidence page.

    proposal = publish(ProposalRequest(target="rms_norm", source=src, verdict=v, ...), cfg)
    approve(cfg, proposal.id)
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from autotune.profile.records import Hotspot
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
    engine_bench: {"dir", "markdown", "gate", "alone"} of the newest bench that served this kernel on a live engine.
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

    def __post_init__(self):
        self.status = ProposalStatus(self.status)  # read back from its JSON record as text


def publish(request: ProposalRequest, cfg) -> Proposal:
    """Propose this kernel through `cfg.publish.backend`; an unchanged kernel that was already decided is
    returned as it stands (status "approved" or "rejected"), an open one is updated in place."""
    from autotune.errors import UserError

    backend = str(cfg.publish.backend)
    if backend == "local":
        from autotune.publish import local

        return local.publish(request, cfg)
    if backend == "github":
        from autotune.publish import github

        return github.publish(request, cfg)
    raise UserError(f"unknown publish backend '{backend}' (use publish=local or publish=github)")


def list_proposals(cfg) -> list[Proposal]:
    from autotune.publish import gitops, records

    return records.all_records(gitops.open_repo(cfg.publish.repo))


def get_proposal(cfg, id: str) -> Proposal:
    from autotune.publish import gitops, records

    return records.get(gitops.open_repo(cfg.publish.repo), id)


def approve(cfg, id: str) -> Proposal:
    from autotune.publish import local

    return local.approve(cfg, id)


def reject(cfg, id: str, reason: str) -> Proposal:
    from autotune.publish import local

    return local.reject(cfg, id, reason)


def rejection_reasons(cfg, target: str) -> list[str]:
    """Reviewers' reasons for rejecting earlier proposals of `target`, oldest first (for the next prompts)."""
    return [p.reason for p in list_proposals(cfg)
            if p.target == target and p.status is ProposalStatus.REJECTED and p.reason]
