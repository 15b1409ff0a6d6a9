"""Drafting a proposal: its id, branch name, files and commit, before any ref or record is written.

Both backends start here. The id comes from the kernel source (`<op>-<first 6 hex of its sha256>`), so the
same kernel published again lands on the same branch and updates its proposal instead of duplicating it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import re
from typing import Any

import git

from autotune import targets
from autotune.errors import UserError
from autotune.publish import evidence, gitops, records
from autotune.publish.types import Proposal, ProposalRequest, ProposalStatus


@dataclasses.dataclass
class Draft:
    repo: git.Repo
    proposal: Proposal  # status "open", evidence_path still empty
    existing: Proposal | None  # the record of an earlier publish of the same kernel
    files: dict[str, str]  # repo path -> text
    evidence: str
    commit: git.Commit | None = None


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _check(request: ProposalRequest) -> None:
    targets.get(request.target)  # a UserError for an unknown target
    if not request.source.strip():
        raise UserError(f"the {request.target} candidate source is empty (nothing to publish)")
    if request.verdict.target != request.target:
        raise UserError(f"the verdict is for '{request.verdict.target}', not '{request.target}' "
                        f"(pass the matching verdict)")
    if not request.verdict.passed:
        raise UserError(f"refusing to publish a {request.target} kernel judged '{request.verdict.status.value}': "
                        f"only accepted or unmeasured kernels are proposed ({request.verdict.reason})")


def draft(request: ProposalRequest, cfg, backend: str) -> Draft:
    """Everything to publish `request`; makes git objects (harmless) but no refs or records."""
    _check(request)
    pub = cfg.publish
    repo = gitops.open_repo(pub.repo)
    base = gitops.base_commit(repo, str(pub.base))
    sha256 = hashlib.sha256(request.source.encode()).hexdigest()
    short_id = sha256[:6]
    pid = f"{request.target}-{short_id}"
    kernel_dir = f"kernels/{request.target}/{short_id}"
    existing = records.load(repo, pid)
    branch = f"{pub.branch_prefix}/{pid}"
    created_at = existing.created_at if existing else now()
    if existing is None and _exists(base, f"{kernel_dir}/kernel.py"):
        raise UserError(f"kernel {pid} is already merged into {pub.base} at {kernel_dir} (nothing to propose)")
    if existing is None and branch in repo.heads:
        raise UserError(f"branch {branch} already exists in {repo.working_dir} but is no proposal autotune knows "
                        f"(delete or rename it, or set publish.branch_prefix=NAME)")
    earlier = (_earlier(repo, existing, kernel_dir, request.run_id) if existing and existing.run_id != request.run_id
               else None)
    text = evidence.render(request, proposal_id=pid, short_id=short_id, branch=branch, base=str(pub.base),
                           backend=backend, sha256=sha256, contribution=pub.get("contribution"),
                           earlier=earlier["runs"] if earlier else ())
    prov = evidence.provenance(request, proposal_id=pid, sha256=sha256, created_at=created_at)
    if earlier:  # who wrote it first stays; this run is added to its history
        prov = {**earlier["provenance"], "found_again": earlier["runs"][1:] + [prov["run"] | {
            "at": now(), "candidate": prov["candidate"], "verdict": prov["verdict"]}]}
    files = {**(earlier["pages"] if earlier else {}),
        f"{kernel_dir}/kernel.py": request.source if request.source.endswith("\n") else request.source + "\n",
        f"{kernel_dir}/provenance.json": json.dumps(prov, indent=2, default=str) + "\n",
        f"{kernel_dir}/EVIDENCE.md": text,
        f"tests/kernels/test_{request.target}_{short_id}.py": evidence.regression_test(
            request, proposal_id=pid, short_id=short_id),
    }
    v = request.verdict
    proposal = Proposal(
        id=pid, target=request.target, branch=branch, base=str(pub.base), commit="", status=ProposalStatus.OPEN,
        created_at=created_at, pr_url=None, pr_number=None, reason=None, evidence_path="",
        verdict_status=v.status.value, speedup=v.speedup_geomean if v.measured else None, backend=backend,
        run_id=existing.run_id if earlier and existing else request.run_id, sha256=sha256, kernel_dir=kernel_dir,
        share=request.hotspot.share if request.hotspot else None, updated_at=now() if earlier else None)
    d = Draft(repo=repo, proposal=proposal, existing=existing, files=files, evidence=text)
    if existing is None or existing.status is ProposalStatus.OPEN:
        d.commit = gitops.build_commit(repo, base, files, commit_message(request, pid, kernel_dir), pub.author)
        proposal.commit = d.commit.hexsha
    return d


def _earlier(repo: git.Repo, existing: Proposal, kernel_dir: str, run_id: str) -> dict[str, Any] | None:
    """What an open proposal's branch holds from the runs that found this kernel before `run_id`: its provenance
    (first writer kept), every run's evidence page (each kept beside the new one under evidence/), and the list of
    runs. This run's own earlier entry (a resumed run publishing again) is replaced, not kept twice. None when the
    branch is gone (the proposal is then written afresh)."""
    try:
        tree = repo.commit(existing.commit).tree / kernel_dir
        prov = json.loads((tree / "provenance.json").data_stream.read())
        newest = (tree / "EVIDENCE.md").data_stream.read().decode()  # the last run's page, until now
    except (ValueError, KeyError, git.BadName):
        return None
    first = {**prov.get("run", {}), "at": prov.get("created_at"), "candidate": prov.get("candidate", {})}
    runs = [first, *prov.get("found_again", [])]
    pages = {}
    for i, r in enumerate(runs):
        if r.get("id") == run_id:
            continue
        try:
            text = newest if i == len(runs) - 1 else (tree / _page(r)).data_stream.read().decode()
        except KeyError:  # a page written before pages were kept
            continue
        pages[f"{kernel_dir}/{_page(r)}"] = text
    kept = [r | {"page": _page(r)} for r in runs if r.get("id") != run_id]
    return {"provenance": prov, "runs": kept, "pages": pages}


def _page(run: dict[str, Any]) -> str:
    """Where a run's evidence page is kept once a later run found the same kernel."""
    return "evidence/" + re.sub(r"[^\w.-]+", "_", str(run.get("id") or "run")) + ".md"


def _exists(commit: git.Commit, path: str) -> bool:
    try:
        commit.tree / path
        return True
    except KeyError:
        return False


def commit_message(request: ProposalRequest, pid: str, kernel_dir: str) -> str:
    v, c = request.verdict, request.candidate
    passed = sum(case.passed for case in v.cases)
    speed = f"{v.speedup_geomean:.2f}x faster" if v.measured and v.speedup_geomean else "speed not measured (no GPU)"
    return (f"{request.target}: Triton kernel {pid} ({v.status.value}, {passed}/{len(v.cases)} cases pass)\n\n"
            f"{speed}. Proposed by autotune run {request.run_id}: agent {c.get('agent', '?')}, "
            f"model {c.get('model') or '-'}, turn {c.get('turn', '?')}.\n\nEvidence: {kernel_dir}/EVIDENCE.md\n")


def save(d: Draft, **changes) -> Proposal:
    """Write the proposal record and its evidence copy; returns the stored proposal."""
    proposal = dataclasses.replace(d.proposal, **changes)
    proposal.evidence_path = str(records.save_evidence(d.repo, proposal.id, d.evidence))
    records.save(d.repo, proposal)
    return proposal
