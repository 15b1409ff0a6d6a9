"""The `github` backend: push the proposal branch to `publish.remote`, then open or update its pull request.

The REST calls use the stdlib (urllib.request): three endpoints do not earn a dependency. The token comes
from the environment variable NAMED in `publish.token_env`; it is registered with `autotune.ledger.redact`,
sent only in the Authorization header, and never logged or written. The push uses git's own credentials
(an SSH key or a credential helper), as any `git push` from that checkout would.

Order matters for "nothing half done": the token is tried first (looking up an open pull request for the
branch), then the branch is made and pushed, then the pull request is created (or the existing one updated,
never duplicated); a failure at any step undoes the earlier ones (the remote branch is deleted or moved
back, the local branch deleted).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import git
from omegaconf import OmegaConf

from autotune.errors import UserError
from autotune.ledger import redact
from autotune.publish import evidence, gitops, proposal
from autotune.publish.types import Proposal, ProposalRequest, ProposalStatus

BODY_LIMIT = 65_536  # characters GitHub accepts in a pull request body (longer ones get a 422)


class GitHub:
    """The pulls endpoints of one repository."""

    def __init__(self, api_url: str, owner: str, name: str, token: str, timeout_s: float = 30.0):
        self.base = f"{api_url.rstrip('/')}/repos/{owner}/{name}"
        self.owner, self.name, self.timeout_s = owner, name, timeout_s
        self._token = token

    def _call(self, method: str, path: str, body: dict | None = None, query: dict | None = None) -> Any:
        url = self.base + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        req = urllib.request.Request(url, method=method, data=None if body is None else json.dumps(body).encode())
        req.add_header("Accept", "application/vnd.github+json")
        req.add_header("X-GitHub-Api-Version", "2022-11-28")
        req.add_header("Authorization", f"Bearer {self._token}")
        if body is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            raise UserError(self._explain(e.code, e.read())) from None
        except (urllib.error.URLError, TimeoutError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise UserError(f"cannot reach the GitHub API at {url}: {reason} "
                            f"(check publish.api_url and the network)") from None

    def _explain(self, code: int, raw: bytes) -> str:
        try:
            data = json.loads(raw)
        except ValueError:
            data = {"message": raw.decode(errors="replace")[:200]}
        message = str(data.get("message", "")).strip()
        errors = [e for e in data.get("errors", []) if isinstance(e, dict)]
        details = "; ".join(str(e.get("message") or e.get("code")) for e in errors)
        full = f"{message}: {details}" if details else message
        repo = f"{self.owner}/{self.name}"
        if code in (401, 403):
            return (f"GitHub token refused ({code} {full}) for {repo} "
                    "(check the token and that it may write pull requests)")
        if code == 404:
            return (f"GitHub found no repository {repo} at {self.base} "
                    f"(404; check publish.owner, publish.name and the token's access)")
        if code == 422:
            return f"GitHub rejected the pull request for {repo} (422): {full}"
        return f"GitHub answered {code} for {repo}: {full} (try again later)"

    def open_pull(self, branch: str) -> dict | None:
        pulls = self._call("GET", "/pulls", query={"head": f"{self.owner}:{branch}", "state": "open"})
        return pulls[0] if pulls else None

    def create_pull(self, *, title: str, head: str, base: str, body: str, draft: bool) -> dict:
        return self._call("POST", "/pulls", {"title": title, "head": head, "base": base, "body": body, "draft": draft})

    def update_pull(self, number: int, **fields: Any) -> dict:
        return self._call("PATCH", f"/pulls/{number}", fields)


def client(cfg) -> GitHub:
    pub = cfg.publish
    for key in ("owner", "name"):
        if OmegaConf.is_missing(pub, key):
            raise UserError(f"publish.{key} is not set "
                            "(pass publish.owner=ORG publish.name=REPO for the github backend)")
    token = os.environ.get(str(pub.token_env), "").strip()  # the one secret; its variable is named in config
    if not token:
        raise UserError(f"no GitHub token: the environment variable {pub.token_env} is empty or unset "
                        f"(export it, or name another with publish.token_env=VAR)")
    redact(token)
    return GitHub(str(pub.api_url), str(pub.owner), str(pub.name), token, float(pub.get("api_timeout_s", 30)))


def _remote(repo: git.Repo, name: str) -> git.Remote:
    if name not in [r.name for r in repo.remotes]:
        known = ", ".join(r.name for r in repo.remotes) or "none"
        raise UserError(f"no git remote '{name}' in {repo.working_dir} (remotes: {known}; "
                        f"add one with `git remote add {name} URL` or set publish.remote=NAME)")
    return repo.remote(name)


def _push(remote: git.Remote, refspec: str, what: str) -> None:
    """`git push`, failing loudly: GitPython does not raise on rejected refs, so the result is checked."""
    progress = git.RemoteProgress()  # keeps the "remote: ..." lines, where hooks and servers say why
    try:
        infos = remote.push(refspec=refspec, progress=progress)
        bad = [i for i in infos if i.flags & (i.ERROR | i.REJECTED | i.REMOTE_REJECTED)]
        if not bad:
            infos.raise_if_error()
    except git.GitCommandError as e:
        bad, infos = [], None
        progress.error_lines.insert(0, gitops.error_line(e))
    if bad or not infos:
        said = [ln.removeprefix("remote:").strip() for ln in progress.other_lines if ln.startswith("remote:")]
        parts = [f"{i.remote_ref_string} {i.summary.strip()}" for i in bad] + said or progress.error_lines[:1]
        raise UserError(f"pushing {what} to {remote.name} failed: {'; '.join(p for p in parts if p)} "
                        f"(check the remote and your git credentials; nothing was published)")


def _remote_sha(repo: git.Repo, remote: git.Remote, branch: str) -> str | None:
    try:
        out = str(repo.git.ls_remote(remote.name, f"refs/heads/{branch}"))  # git's stdout: a str
    except git.GitCommandError as e:
        raise UserError(f"cannot read remote '{remote.name}': {gitops.error_line(e)} "
                        f"(check its URL and your git credentials)") from None
    return out.split()[0] if out.strip() else None


def _undo_push(remote: git.Remote, branch: str, previous: str | None) -> None:
    try:
        remote.push(refspec=f"+{previous}:refs/heads/{branch}" if previous else f":refs/heads/{branch}")
    except git.GitCommandError:
        pass  # best effort: the error being raised already says what failed


def publish(request: ProposalRequest, cfg) -> Proposal:
    refused = upstream_gaps(cfg)
    if refused:
        raise UserError(refused)
    api = client(cfg)
    d = proposal.draft(request, cfg, "github")
    if d.existing is not None and d.existing.status is not ProposalStatus.OPEN:
        return d.existing
    branch = d.proposal.branch
    remote = _remote(d.repo, str(cfg.publish.remote))
    existing_pr = api.open_pull(branch)  # also proves the token before anything is pushed
    remote_before = _remote_sha(d.repo, remote, branch)
    assert d.commit is not None  # draft() builds it for a new or still open proposal
    local_before = gitops.set_branch(d.repo, branch, d.commit)
    try:
        _push(remote, f"+refs/heads/{branch}:refs/heads/{branch}", f"branch {branch}")
        try:
            pr = _open_or_update(api, d, request, existing_pr, cfg)
        except BaseException:
            _undo_push(remote, branch, remote_before)
            raise
        return proposal.save(d, pr_url=pr.get("html_url"), pr_number=pr.get("number"))
    except BaseException:
        gitops.restore_branch(d.repo, branch, local_before)
        raise


def upstream_gaps(cfg) -> str:
    """With publish.upstream=true, why the pull request may not be opened yet: the contribution fields vLLM's and
    transformers' rules for AI-assisted PRs require, still empty; "" when none is (or upstream is off)."""
    gaps = evidence.contribution_gaps(cfg) if cfg.publish.get("upstream") else []
    return (f"publish.upstream=true: an upstream pull request needs {', '.join(gaps)} (vLLM's and transformers' "
            f"rules for AI-assisted contributions); set them, e.g. publish.contribution.issue=URL") if gaps else ""


def _open_or_update(api: GitHub, d: proposal.Draft, request: ProposalRequest, existing_pr: dict | None, cfg) -> dict:
    title, body = evidence.title(request, d.proposal.id), evidence.fit(d.evidence, BODY_LIMIT)
    if existing_pr:
        return api.update_pull(int(existing_pr["number"]), title=title, body=body)
    return api.create_pull(title=title, head=d.proposal.branch, base=d.proposal.base, body=body,
                           draft=bool(cfg.publish.draft))


def close(cfg, p: Proposal) -> None:
    """Close a rejected proposal's pull request and delete its remote branch."""
    api = client(cfg)
    if p.pr_number is not None:
        api.update_pull(int(p.pr_number), state="closed")
    repo = gitops.open_repo(cfg.publish.repo)
    if str(cfg.publish.remote) in [r.name for r in repo.remotes]:
        _undo_push(repo.remote(str(cfg.publish.remote)), p.branch, None)
