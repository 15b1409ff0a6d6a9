"""The `local` backend and the review decisions: a branch plus a proposal record; approve merges, reject deletes.

Approving runs `git merge --no-ff` of the proposal branch into the base branch in the checkout where the
base is checked out (it must be clean), which puts the kernel in `kernels/<op>/<id>/` on the base: that is
what registers it (autotune.kernels reads that folder). Rejecting deletes the branch and keeps the reason in
the record, from where `rejection_reasons` hands it to the next run's prompts.
"""

from __future__ import annotations

from autotune.errors import UserError
from autotune.publish import gitops, proposal, records
from autotune.publish.types import Proposal, ProposalRequest, ProposalStatus


def publish(request: ProposalRequest, cfg) -> Proposal:
    d = proposal.draft(request, cfg, "local")
    if d.existing is not None and d.existing.status is not ProposalStatus.OPEN:
        return d.existing
    assert d.commit is not None  # draft() builds it for a new or still open proposal
    previous = gitops.set_branch(d.repo, d.proposal.branch, d.commit)
    try:
        return proposal.save(d)
    except BaseException:
        gitops.restore_branch(d.repo, d.proposal.branch, previous)
        raise


def _open_proposal(cfg, proposal_id: str):
    repo = gitops.open_repo(cfg.publish.repo)
    p = records.get(repo, proposal_id)
    if p.status is not ProposalStatus.OPEN:
        when = f" on {p.decided_at}" if p.decided_at else ""
        raise UserError(f"proposal {p.id} was already {p.status}{when} (`autotune review show {p.id}` shows it)")
    return repo, p


def approve(cfg, proposal_id: str) -> Proposal:
    repo, p = _open_proposal(cfg, proposal_id)
    if p.backend == "github":
        raise UserError(f"{p.id} is a GitHub pull request: merge it there ({p.pr_url}); the kernel registers once "
                        f"the merge reaches {p.base}")
    if p.branch not in repo.heads:
        raise UserError(f"branch {p.branch} of {p.id} no longer exists in {repo.working_dir} "
                        f"(publish the kernel again, or reject {p.id})")
    message = (f"Merge {p.branch}: {p.target} kernel {p.id}\n\n"
               f"Approved with `autotune review approve {p.id}`; the kernel is in {p.kernel_dir}/.\n")
    merge = gitops.merge_no_ff(repo, p.base, p.branch, message, cfg.publish.author)
    p.status, p.merge_commit, p.decided_at = ProposalStatus.APPROVED, merge.hexsha, proposal.now()
    records.save(repo, p)
    if gitops.worktree_of(repo, p.branch) is None:
        gitops.delete_branch(repo, p.branch)  # merged: the record keeps its commit
    return p


def reject(cfg, proposal_id: str, reason: str) -> Proposal:
    reason = " ".join((reason or "").split())
    if not reason:
        raise UserError("a rejection needs a reason (--reason TEXT): it goes into the next run's prompts")
    repo, p = _open_proposal(cfg, proposal_id)
    where = gitops.worktree_of(repo, p.branch)
    if where is not None:
        raise UserError(f"branch {p.branch} is checked out in {where} (switch that checkout to another branch, "
                        f"then reject again)")
    if p.backend == "github":
        from autotune.publish import github

        github.close(cfg, p)
    p.status, p.reason, p.decided_at = ProposalStatus.REJECTED, reason, proposal.now()
    records.save(repo, p)
    gitops.delete_branch(repo, p.branch)
    return p
