"""The local backend on real git repositories: publish, approve, reject, and the errors a user meets."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from autotune import cli, publish
from autotune.errors import UserError
from autotune.publish import evidence
from autotune.verify.verdict import Status


def snapshot(repo: Path, git) -> dict:
    """What the user sees of their checkout: HEAD, status, index bytes, the base branch."""
    return {"head": git(repo, "symbolic-ref", "HEAD"), "main": git(repo, "rev-parse", "main"),
            "status": git(repo, "status", "--porcelain"), "index": (repo / ".git" / "index").read_bytes()}


def test_publish_makes_one_commit_on_a_new_branch_and_leaves_the_checkout_alone(project, git, make_request, cfg_of):
    (project / "README.md").write_text("edited, not committed\n")
    (project / "notes.txt").write_text("untracked\n")
    before = snapshot(project, git)

    p = publish.publish(make_request(), cfg_of(project))

    assert snapshot(project, git) == before
    sid = p.id.removeprefix("rms_norm-")
    assert p.status == "open" and p.branch == f"autotune/rms_norm-{sid}" and len(sid) == 6
    assert git(project, "rev-parse", f"{p.branch}^") == before["main"]  # one commit on top of main
    files = git(project, "diff", "--name-only", "main", p.branch).splitlines()
    assert sorted(files) == sorted([f"kernels/rms_norm/{sid}/kernel.py", f"kernels/rms_norm/{sid}/provenance.json",
                                    f"kernels/rms_norm/{sid}/EVIDENCE.md", f"tests/kernels/test_rms_norm_{sid}.py"])
    assert git(project, "log", "-1", "--format=%an <%ae>|%cn <%ce>", p.branch) == \
        "autotune <autotune@localhost>|autotune <autotune@localhost>"
    assert git(project, "show", f"{p.branch}:kernels/rms_norm/{sid}/kernel.py") == make_request().source.strip()
    prov = json.loads(git(project, "show", f"{p.branch}:kernels/rms_norm/{sid}/provenance.json"))
    assert prov["run"]["id"] == "2026-11-30/10-00-00" and prov["candidate"]["cost_usd"] == 0.0123
    assert prov["verdict"]["status"] == "unmeasured" and prov["environment"]["labels"] == {"pool": "ci"}


def test_unset_prices_are_said_not_printed_as_zero_dollars(project, make_request, cfg_of):
    request = make_request()
    request.candidate = {**request.candidate, "cost_usd": 0.0, "spent": {"requests": 3, "tokens": 16540, "cost_usd": 0}}
    text = Path(publish.publish(request, cfg_of(project)).evidence_path).read_text()
    assert "900 completion tokens, dollars not counted (agent.price is not set)" in text and "$0.0000" not in text


def test_evidence_reads_as_a_review_page(project, git, make_request, cfg_of):
    p = publish.publish(make_request(), cfg_of(project))
    text = Path(p.evidence_path).read_text()
    assert text == git(project, "show", f"{p.branch}:{p.kernel_dir}/EVIDENCE.md") + "\n"
    assert "| 7×1000 | bfloat16 | special | profile | 2.4e-07 | 3.1e-07 | 1.6e-02, 1.0e-05 | 1/1 |" in text
    assert "**Not measured (no GPU).**" in text and "8/8 cases pass" in text
    assert "12.0% (40 calls)" in text and "not projected: this kernel's speed is not measured (no GPU)" in text
    assert "6.0%" not in text  # the profile's gain at an assumed 2x: no number from a speed nobody measured
    assert "Greedy tokens identical to the reference model's on 4 prompts × 8 new tokens" in text
    assert ("5,120 prompt tokens (4,096 cached), 900 completion tokens, $0.0123 this turn; the kernel cost $0.0687 in "
            "all (3 requests, 16,540 tokens, failed attempts included)") in text
    assert "torch 2." in text and "| labels | {'pool': 'ci'} |" in text  # Environment.summary() and details
    # the contribution section an AI-assisted upstream PR needs: placeholders to fill, the disclosure, the tests run
    assert "| Linked issue | **To fill before an upstream PR:** the upstream issue this answers" in text
    assert ("| Who wrote it | an AI agent: the `openai` agent (model `qwen-coder`), turn 2 of run `2026-11-30/10-00-00`, "
            "wrote all of the kernel; the tests below ran without a person |") in text
    assert f"`autotune verify rms_norm kernels/rms_norm/{p.id.split('-')[-1]}/kernel.py` (the run's verify settings): " \
           "**unmeasured**, 8/8 cases pass." in text
    assert "Sandbox: network: unshared; uid: 65534" in text
    assert evidence.parse_metadata(text) == {"proposal": p.id, "run": "2026-11-30/10-00-00", "target": "rms_norm",
                                             "sha256": p.sha256, "status": "unmeasured"}


def test_the_same_kernel_found_again_adds_its_evidence_beside_the_first(project, git, make_request, cfg_of):
    """Another run (a replay, a rerun) that finds an open proposal's kernel never rewrites who wrote it or the
    evidence it was proposed on: each run's page is kept, the first writer stays, the record says it was updated."""
    cfg = cfg_of(project)
    first = publish.publish(make_request(run_id="run-1"), cfg)
    replayed = make_request(run_id="run-2")
    replayed.candidate = {**replayed.candidate, "agent": "replay", "model": "qwen-coder"}
    second = publish.publish(replayed, cfg)
    third = publish.publish(make_request(run_id="run-3"), cfg)
    third = publish.publish(make_request(run_id="run-3"), cfg)  # run-3 resumed publishes again: not a 4th run
    assert second.id == third.id == first.id and third.created_at == first.created_at and third.updated_at
    assert [(p.id, p.run_id) for p in publish.list_proposals(cfg)] == [(first.id, "run-1")]
    assert git(project, "branch", "--list", "autotune/*").split() == [first.branch]
    show = lambda path: git(project, "show", f"{first.branch}:{first.kernel_dir}/{path}")  # noqa: E731
    prov = json.loads(show("provenance.json"))
    assert prov["run"]["id"] == "run-1" and prov["candidate"]["agent"] == "openai"  # who wrote it first stays
    assert [(r["id"], r["candidate"]["agent"]) for r in prov["found_again"]] == [("run-2", "replay"),
                                                                                ("run-3", "openai")]
    assert "run `run-1`" in show("evidence/run-1.md") and "run `run-2`" in show("evidence/run-2.md")
    page = show("EVIDENCE.md")  # the newest run's page, naming the earlier ones
    assert "Found before by 2 run(s)" in page and "its page: `evidence/run-1.md` (who wrote it first)" in page
    assert "the `replay` agent (model `qwen-coder`), turn 2; its page: `evidence/run-2.md`" in page
    assert git(project, "rev-parse", f"{first.branch}^") == git(project, "rev-parse", "main")


def test_approve_merges_with_a_merge_commit_and_the_served_model_uses_the_kernel(project, git, make_request, cfg_of, tmp_path):
    cfg = cfg_of(project)
    p = publish.publish(make_request(), cfg)
    main_before = git(project, "rev-parse", "main")

    approved = publish.approve(cfg, p.id)

    assert approved.status == "approved" and publish.get_proposal(cfg, p.id).status == "approved"
    parents = git(project, "log", "-1", "--format=%P", "main").split()
    assert parents == [main_before, p.commit] and approved.merge_commit == git(project, "rev-parse", "main")
    assert (project / p.kernel_dir / "kernel.py").is_file() and git(project, "status", "--porcelain") == ""
    assert git(project, "branch", "--list", p.branch) == ""  # merged, so tidied away
    # A fresh process, as `autotune profile kernels.enable=true` would be: the dispatch point runs the kernel.
    script = f"""
import json, torch
from autotune import kernels
from autotune.config import compose
from autotune.serve import dispatch
from autotune.targets import get
enabled = kernels.enable(compose(["kernels.enable=true", "kernels.dir={project / 'kernels'}"]))
x, w = torch.randn(3, 5, 1000, dtype=torch.float16), torch.rand(1000, dtype=torch.float16)
out = dispatch.rms_norm(x, w, 1e-5)
torch.testing.assert_close(out, get("rms_norm").reference(x, w, 1e-5))
print(json.dumps({{"enabled": {{t: k.id for t, k in enabled.items()}}, "module": dispatch.current("rms_norm").__module__}}))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"enabled": {"rms_norm": p.id.removeprefix("rms_norm-")},
                      "module": f"_autotune_kernel_rms_norm_{p.id.removeprefix('rms_norm-')}"}


def test_reject_deletes_the_branch_and_keeps_the_reason_for_the_next_run(project, git, make_request, cfg_of):
    cfg = cfg_of(project)
    p = publish.publish(make_request(), cfg)
    rejected = publish.reject(cfg, p.id, "slower than torch.compile at 8192 rows")
    assert rejected.status == "rejected" and git(project, "branch", "--list", p.branch) == ""
    assert publish.rejection_reasons(cfg, "rms_norm") == ["slower than torch.compile at 8192 rows"]
    assert publish.rejection_reasons(cfg, "silu_and_mul") == []
    with pytest.raises(UserError, match="already rejected"):
        publish.approve(cfg, p.id)
    again = publish.publish(make_request(), cfg)  # the same kernel is not proposed twice
    assert again.status == "rejected" and git(project, "branch", "--list", p.branch) == ""


def test_approve_refuses_a_dirty_checkout_and_merges_nothing(project, git, make_request, cfg_of):
    cfg = cfg_of(project)
    p = publish.publish(make_request(), cfg)
    (project / "README.md").write_text("work in progress\n")
    main_before = git(project, "rev-parse", "main")
    with pytest.raises(UserError, match=r"uncommitted changes .*commit or stash"):
        publish.approve(cfg, p.id)
    assert git(project, "rev-parse", "main") == main_before and publish.get_proposal(cfg, p.id).status == "open"
    assert git(project, "branch", "--list", p.branch).strip() == p.branch


def test_approve_stops_when_an_untracked_file_is_in_the_way(project, git, make_request, cfg_of):
    cfg = cfg_of(project)
    p = publish.publish(make_request(), cfg)
    (project / p.kernel_dir).mkdir(parents=True)
    (project / p.kernel_dir / "kernel.py").write_text("# a hand-made copy\n")
    main_before = git(project, "rev-parse", "main")
    with pytest.raises(UserError, match=r"failed: error: The following untracked working tree files would be overwritten"):
        publish.approve(cfg, p.id)
    assert git(project, "rev-parse", "main") == main_before and publish.get_proposal(cfg, p.id).status == "open"
    assert not (project / ".git" / "MERGE_HEAD").exists()


def test_approve_needs_the_base_branch_checked_out(project, git, make_request, cfg_of):
    cfg = cfg_of(project)
    p = publish.publish(make_request(), cfg)
    git(project, "switch", "-q", "-c", "feature")
    with pytest.raises(UserError, match=r"'main', which is not checked out .*git switch main"):
        publish.approve(cfg, p.id)
    git(project, "worktree", "add", "-q", str(project.parent / "main-wt"), "main")
    assert publish.approve(cfg, p.id).status == "approved"  # merged in the worktree that has main
    assert git(project, "symbolic-ref", "--short", "HEAD") == "feature"


@pytest.mark.parametrize("case, message", [
    ("unknown id", r"no proposal 'rms_norm-000000' .*autotune review list"),
    ("missing repo", r"publish.repo .*missing.* does not exist"),
    ("not a repo", r"is not a git repository"),
    ("incorrect verdict", r"refusing to publish a rms_norm kernel judged 'incorrect'"),
    ("empty reason", r"a rejection needs a reason"),
    ("unknown base", r"no branch 'trunk' .*publish.base"),
    ("foreign branch", r"branch autotune/rms_norm-\w+ already exists .* but is no proposal autotune knows"),
])
def test_errors_are_one_clear_line(case, message, project, tmp_path, make_request, make_verdict, cfg_of):
    cfg = cfg_of(project)
    with pytest.raises(UserError, match=message) as err:
        if case == "unknown id":
            publish.approve(cfg, "rms_norm-000000")
        elif case == "missing repo":
            publish.list_proposals(cfg_of(tmp_path / "missing"))
        elif case == "not a repo":
            (tmp_path / "plain").mkdir()
            publish.publish(make_request(), cfg_of(tmp_path / "plain"))
        elif case == "incorrect verdict":
            publish.publish(make_request(v=make_verdict(Status.INCORRECT, "max abs err 0.5 at [7, 1000]")), cfg)
        elif case == "empty reason":
            publish.reject(cfg, publish.publish(make_request(), cfg).id, "  ")
        elif case == "unknown base":
            publish.publish(make_request(), cfg_of(project, "publish.base=trunk"))
        else:  # the user's own branch happens to carry the proposal's name: never overwrite it
            sid = hashlib.sha256(make_request().source.encode()).hexdigest()[:6]
            subprocess.run(["git", "branch", f"autotune/rms_norm-{sid}"], cwd=project, check=True)
            publish.publish(make_request(), cfg)
    assert "\n" not in str(err.value)


def test_review_command(project, make_request, cfg_of, capsys):
    p = publish.publish(make_request(), cfg_of(project))
    repo = f"publish.repo={project}"
    assert cli.main(["review", "list", repo]) == 0
    listed = capsys.readouterr().out
    assert p.id in listed and "unmeasured" in listed and "open" in listed
    # what a reviewer triages by (issue 29): the share of serving time in percent, the speed or that it is unmeasured,
    # and where the evidence is; every column headed, whole rows in a log
    header = next(line for line in listed.splitlines() if "share of serving time" in line)
    row = next(line for line in listed.splitlines() if p.id in line)
    assert "12.0%" in row and "not measured" in row and p.evidence_path in row, row
    assert all(col in header for col in ("speedup", "status", "evidence")), header
    assert cli.main(["review", "approve", p.id, repo]) == 2  # never timed: merged only when asked
    assert f"autotune review approve {p.id} --unmeasured" in capsys.readouterr().err
    assert cli.main(["review", "show", p.id, repo]) == 0
    assert "## Correctness" in capsys.readouterr().out
    assert cli.main(["review", "reject", p.id, "--reason", "wrong eps handling", repo]) == 0
    assert "rejected" in capsys.readouterr().out
    assert cli.main(["review", "approve", p.id, repo]) == 2
    assert "error: proposal rms_norm-" in capsys.readouterr().err
    assert cli.main(["review", "frobnicate", repo]) == 2
