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

from pathlib import Path

from autotune.publish.types import Proposal, ProposalRequest, ProposalStatus

__all__ = ["Proposal", "ProposalRequest", "ProposalStatus", "approve", "attach_bench", "get_proposal",
           "list_proposals", "merged_kernel", "publish", "reject", "rejection_reasons"]


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
    from autotune import kernels

    return kernels.best(Path(str(cfg.publish.repo)).expanduser() / "kernels", target)


def attach_bench(cfg, record: dict) -> list[str]:
    """After `autotune bench`: the proposals (open or already decided) whose kernel a setup other than A served, by
    the sha256 its plugin's manifest records, get the bench's table added to their evidence page (the copy `review
    show` reads); their ids. A publish.repo that is no repository takes nothing (the bench stands on its own)."""
    from autotune.engine.bench import markdown
    from autotune.errors import UserError
    from autotune.publish import gitops, records

    served = {k.get("sha256"): s["label"] for s in record.get("setups", [])[1:]
              for k in (s.get("kernels") or {}).values() if k.get("sha256")}
    try:
        repo = gitops.open_repo(cfg.publish.repo)
    except UserError:
        return []
    attached = []
    for p in records.all_records(repo):
        label = served.get(p.sha256)
        page = Path(p.evidence_path) if p.evidence_path else None
        if label is None or page is None or not page.is_file() or record["dir"] in page.read_text():
            continue
        section = (f"\n\n## Served on a live engine after it was proposed (`autotune bench`, {record['dir']})\n\n"
                   f"Setup {label} served this kernel ({p.status} when the bench ran).\n\n{markdown(record)}\n")
        records.save_evidence(repo, p.id, page.read_text().rstrip("\n") + section)
        attached.append(p.id)
    return attached
