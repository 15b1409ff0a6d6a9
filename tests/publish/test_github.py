"""The github backend against a real HTTP server on 127.0.0.1 (the pulls endpoints) and a bare git remote."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune import publish
from autotune.errors import UserError


@pytest.fixture
def gh_cfg(project, github, cfg_of):
    def make(*overrides: str):
        return cfg_of(project, "publish=github", "publish.owner=acme", "publish.name=widgets",
                      f"publish.api_url={github.url}", "publish.token_env=AUTOTUNE_TEST_GH_TOKEN", *overrides)
    return make


def remote_branches(git, remote: Path) -> list[str]:
    return git(remote, "for-each-ref", "--format=%(refname:short)", "refs/heads").split()


def nothing_left(project, bare_remote, github, git, cfg) -> None:
    assert git(project, "branch", "--list", "autotune/*") == ""
    assert remote_branches(git, bare_remote) == ["main"]
    assert github.pulls == [] and publish.list_proposals(cfg) == []


def test_opens_a_pull_request_with_the_evidence_as_body(project, bare_remote, github, gh_cfg, git, make_request, token, tmp_path):
    p = publish.publish(make_request(), gh_cfg())
    assert p.pr_number == 1 and p.pr_url == "https://github.test/acme/widgets/pull/1" and p.backend == "github"
    [pull] = github.pulls
    assert pull["head"]["ref"] == p.branch and pull["base"]["ref"] == "main" and pull["draft"] is False
    assert pull["body"] == Path(p.evidence_path).read_text() and "## Correctness" in pull["body"]
    assert pull["title"].startswith(f"rms_norm: Triton kernel {p.id}")
    assert git(bare_remote, "rev-parse", p.branch) == p.commit
    assert all(auth == f"Bearer {token}" for _, _, auth in github.calls)
    # The token never lands in a file: not in the checkout, its .git, the remote, or anything else written.
    leaked = [f for f in tmp_path.rglob("*") if f.is_file() and token.encode() in f.read_bytes()]
    assert leaked == []


def test_publishing_again_updates_the_pull_request_never_duplicates(project, bare_remote, github, gh_cfg, git, make_request, token):
    cfg = gh_cfg()
    first = publish.publish(make_request(run_id="run-1"), cfg)
    second = publish.publish(make_request(run_id="run-2"), cfg)
    assert len(github.pulls) == 1 and second.pr_number == first.pr_number
    body = github.pulls[0]["body"]  # the newest run's page, the first run's kept beside it on the branch
    assert "in run `run-2`" in body and "run `run-1`" in body and "its page: `evidence/run-1.md`" in body
    assert ("PATCH", "/repos/acme/widgets/pulls/1") in [(m, p) for m, p, _ in github.calls]
    assert git(bare_remote, "rev-parse", second.branch) == second.commit != first.commit


def test_a_refused_token_leaves_nothing_behind(project, bare_remote, github, gh_cfg, git, make_request, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_TEST_GH_TOKEN", "ghp_wrong_token_000000000000")
    cfg = gh_cfg()
    with pytest.raises(UserError, match=r"GitHub token refused \(401 Bad credentials\) for acme/widgets"):
        publish.publish(make_request(), cfg)
    nothing_left(project, bare_remote, github, git, cfg)


def test_a_rejected_push_leaves_nothing_behind(project, bare_remote, github, gh_cfg, git, make_request, token):
    hook = bare_remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'branch protection: pushes need review' >&2\nexit 1\n")
    hook.chmod(0o755)
    cfg = gh_cfg()
    with pytest.raises(UserError, match=r"pushing branch autotune/rms_norm-\w+ to origin failed: refs/heads/autotune/rms_norm-\w+ "
                                        r"\[remote rejected\] \(pre-receive hook declined\); branch protection: pushes need review"):
        publish.publish(make_request(), cfg)
    nothing_left(project, bare_remote, github, git, cfg)


def test_a_422_undoes_the_push(project, bare_remote, github, gh_cfg, git, make_request, token):
    github.fail_create = (422, {"message": "Validation Failed", "errors": [{"message": "base main is protected"}]})
    cfg = gh_cfg()
    with pytest.raises(UserError, match=r"GitHub rejected the pull request for acme/widgets \(422\): "
                                        r"Validation Failed: base main is protected"):
        publish.publish(make_request(), cfg)
    nothing_left(project, bare_remote, github, git, cfg)


@pytest.mark.parametrize("override, env, message", [
    ("publish.remote=upstream", True, r"no git remote 'upstream' .*remotes: origin"),
    ("publish.owner=???", True, r"publish.owner is not set"),
    ("publish.token_env=AUTOTUNE_TEST_NO_SUCH_VAR", True, r"no GitHub token: .*AUTOTUNE_TEST_NO_SUCH_VAR"),
    ("publish.api_url=http://127.0.0.1:9", True, r"cannot reach the GitHub API at http://127.0.0.1:9"),
])
def test_setup_errors(override, env, message, project, bare_remote, github, gh_cfg, git, make_request, token):
    cfg = gh_cfg(override)
    with pytest.raises(UserError, match=message):
        publish.publish(make_request(), cfg)
    nothing_left(project, bare_remote, github, git, cfg)


def test_reject_closes_the_pull_request(project, bare_remote, github, gh_cfg, git, make_request, token):
    cfg = gh_cfg()
    p = publish.publish(make_request(), cfg)
    with pytest.raises(UserError, match="merge it there"):
        publish.approve(cfg, p.id)
    publish.reject(cfg, p.id, "numerics differ from vLLM's kernel")
    assert github.pulls[0]["state"] == "closed" and remote_branches(git, bare_remote) == ["main"]
    assert publish.rejection_reasons(cfg, "rms_norm") == ["numerics differ from vLLM's kernel"]


def test_an_upstream_pull_request_needs_every_contribution_field(project, bare_remote, github, gh_cfg, git,
                                                                 make_request, token):
    """vLLM's AGENTS.md (and transformers') refuse AI-assisted PRs without a linked issue, a reason it is no duplicate
    and a person's check: with publish.upstream=true, nothing is pushed or opened while one is empty."""
    refused = gh_cfg("publish.upstream=true", "publish.contribution.issue=https://github.com/vllm-project/vllm/issues/1")
    with pytest.raises(UserError, match=r"publish.upstream=true: an upstream pull request needs "
                                        r"publish.contribution.not_duplicate, publish.contribution.human_checked"):
        publish.publish(make_request(), refused)
    nothing_left(project, bare_remote, github, git, refused)
    filled = gh_cfg("publish.upstream=true", "publish.contribution.issue=https://github.com/vllm-project/vllm/issues/1",
                    "publish.contribution.not_duplicate=no open PR touches the RMSNorm Triton path",
                    "publish.contribution.human_checked='read the kernel; ran the generated test on an H200'")
    publish.publish(make_request(), filled)
    [pull] = github.pulls
    assert "| Linked issue | https://github.com/vllm-project/vllm/issues/1 |" in pull["body"]
    assert "| What a person checked | read the kernel; ran the generated test on an H200 |" in pull["body"]
    assert "To fill before an upstream PR" not in pull["body"]
