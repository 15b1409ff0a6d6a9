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

from autotune.publish.types import Proposal, ProposalRequest, ProposalStatus

__all__ = ["Proposal", "ProposalRequest", "ProposalStatus", "approve", "get_proposal", "list_proposals", "publish",
           "merged_kernel", "reject", "rejection_reasons"]


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


def merged_kernel(cfg, target: str):
    """The best kernel of `target` a reviewer merged into the publish repository's checkout (its kernels/<op>/<id>/,
    as `review approve` left it), an `autotune.kernels.MergedKernel`; None when there is none."""
    from pathlib import Path

    from autotune import kernels

    return kernels.best(Path(str(cfg.publish.repo)).expanduser() / "kernels", target)
