"""`autotune run` end to end on the CPU: tiny model, search agent, local proposals, review, resume.

These run the real command in subprocesses against real git repositories in tmp_path. One run (module
fixture) feeds the approve and reject tests through two copies of its repository.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import git
import pytest

from autotune import ledger
from tests.quick import PIPELINE_CHECK
from tests.shared import once

# Small but real: 4 requests, one candidate, one seed in fp32 keeps a run near 30 s on 2 cores.
FAST = ["workload.num_requests=4", "agent.candidates=1", *PIPELINE_CHECK,
        "run.check_prompts=2", "run.check_new_tokens=4"]


def autotune(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autotune.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def new_repo(path: Path) -> Path:
    repo = git.Repo.init(path, initial_branch="main")
    (path / "README.md").write_text("a project that receives kernels\n")
    repo.index.add(["README.md"])
    actor = git.Actor("test", "test@localhost")
    repo.index.commit("init", author=actor, committer=actor)
    return path


@pytest.fixture
def proposed(tmp_path_factory, worker_id) -> dict:
    """One finished run that proposed an rms_norm kernel into a fresh repository (once for the session: the tests
    that change the repository work on copies)."""
    def make(root: Path) -> dict:
        repo, run_dir = new_repo(root / "repo"), root / "run"
        done = autotune("run", f"publish.repo={repo}", f"hydra.run.dir={run_dir}", "targets=[rms_norm]", *FAST)
        assert done.returncode == 0, done.stderr[-3000:]
        summary = json.loads((run_dir / "summary.json").read_text())
        return {"root": str(root), "repo": str(repo), "run_dir": str(run_dir), "stdout": done.stdout,
                "summary": summary}

    run = once(tmp_path_factory, worker_id, "proposed_run", make)
    return {**run, **{k: Path(run[k]) for k in ("root", "repo", "run_dir")}}


def test_run_ends_with_a_proposal_the_checker_passes(proposed, tmp_path):
    (outcome,) = proposed["summary"]["outcomes"]
    assert outcome["target"] == "rms_norm" and outcome["status"] == "proposed", outcome
    pid = outcome["proposal"]
    assert f"autotune review approve {pid} --unmeasured" in proposed["stdout"]  # the run says how to review
    assert "share of serving time " in proposed["stdout"] and "speedup not measured (no GPU), state open; " \
           "evidence " in proposed["stdout"] and outcome["speedup"] is None and outcome["projected_gain"] is None
    repo = git.Repo(proposed["repo"])
    branch = next(h for h in repo.heads if h.name.endswith(pid))
    assert repo.heads.main.commit.message.strip() == "init"  # nothing was committed to the base branch
    kernel = branch.commit.tree / f"kernels/rms_norm/{pid.split('-')[-1]}/kernel.py"
    path = tmp_path / "kernel.py"
    path.write_bytes(kernel.data_stream.read())
    judged = autotune("verify", "rms_norm", str(path), "--json", *PIPELINE_CHECK,
                      "verify.shapes=default")
    assert judged.returncode == 0, judged.stdout[-2000:] + judged.stderr[-2000:]
    assert json.loads(judged.stdout)["status"] == "unmeasured"
    records = ledger.read(proposed["run_dir"] / "ledger.jsonl")
    kinds = [r["kind"] for r in records]
    for kind in ("profile", "candidate", "agent_search", "model_check", "proposal", "outcome"):
        assert kind in kinds, kind
    check = next(r for r in records if r["kind"] == "model_check")
    assert check["passed"] and check["tokens_identical"] and check["max_logit_diff"] <= check["logit_tolerance"]
    for name in ("config.yaml", "env.json", "summary.json"):
        assert (proposed["run_dir"] / name).is_file(), name
    assert "─" * 100 not in proposed["stdout"] and "-- run " in proposed["stdout"]  # piped: short rules
    log = (proposed["run_dir"] / "cli.log").read_text()  # who wrote the candidates, by name
    assert "rms_norm: the search baseline (templates, no LLM) started writing candidates" in log, log[-2000:]


def copy_repo(proposed, name: str, tmp_path: Path) -> Path:
    dest = tmp_path / name
    shutil.copytree(proposed["repo"], dest)
    return dest


def test_approve_merges_and_the_served_model_dispatches_to_the_kernel(proposed, tmp_path):
    repo_dir = copy_repo(proposed, "approve", tmp_path)
    pid = proposed["summary"]["outcomes"][0]["proposal"]
    refused = autotune("review", "approve", pid, f"publish.repo={repo_dir}")  # unmeasured: only when asked
    assert refused.returncode == 2 and "--unmeasured" in refused.stderr, refused.stderr
    done = autotune("review", "approve", pid, "--unmeasured", f"publish.repo={repo_dir}")
    assert done.returncode == 0, done.stderr
    repo = git.Repo(repo_dir)
    assert len(repo.heads.main.commit.parents) == 2  # a merge commit
    assert (repo_dir / "kernels" / "rms_norm" / pid.split("-")[-1] / "kernel.py").is_file()
    out = tmp_path / "traces"
    profiled = autotune("profile", "kernels.enable=true", f"kernels.dir={repo_dir / 'kernels'}",
                        f"profile.out_dir={out}", "workload.num_requests=2", "profile.warmup_requests=0")
    assert profiled.returncode == 0, profiled.stderr[-3000:]
    (run,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    environment = json.loads((run / "env.json").read_text())
    assert environment["kernels_enabled"] == {"rms_norm": pid.split("-")[-1]}
    # the screen says the merged kernel served, and that on this machine it ran under the interpreter
    assert f"merged kernels served (rms_norm {pid.split('-')[-1]}), under the Triton interpreter" in profiled.stdout
    # the merged kernel is the next search's one to beat, shown in its task ...
    from autotune import targets
    from autotune.agent import prompts
    from autotune.config import compose
    from autotune.publish import merged_kernel

    merged = merged_kernel(compose([f"publish.repo={repo_dir}"]), "rms_norm")
    assert merged is not None and f"rms_norm-{merged.id}" == pid
    task = prompts.task_message(targets.get("rms_norm"), None, prompts.roofline(compose([])), index=0, candidates=1,
                                incumbent=prompts.incumbent_from(merged, "main"))
    assert f"`{pid}`, merged into `main` after review: unmeasured (correct; not timed, no GPU)." in task
    assert all(line in task for line in merged.source_path.read_text().splitlines())  # (blank runs collapse)
    # ... and a run that finds the same kernel says it is merged already, with no review commands that would fail
    again = autotune("run", f"publish.repo={repo_dir}", f"hydra.run.dir={tmp_path / 'again'}", "targets=[rms_norm]",
                     *FAST)
    assert again.returncode == 0, again.stderr[-3000:]
    (outcome,) = json.loads((tmp_path / "again" / "summary.json").read_text())["outcomes"]
    assert outcome["status"] == "already_merged" and outcome["proposal"] == pid, outcome
    assert f"already merged as {pid}" in again.stdout and "autotune review approve" not in again.stdout


def test_reject_deletes_the_branch_and_keeps_the_reason(proposed, tmp_path):
    repo_dir = copy_repo(proposed, "reject", tmp_path)
    pid = proposed["summary"]["outcomes"][0]["proposal"]
    reason = "slower than torch.compile at 8192 rows"
    done = autotune("review", "reject", pid, "--reason", reason, f"publish.repo={repo_dir}")
    assert done.returncode == 0, done.stderr
    assert not any(h.name.endswith(pid) for h in git.Repo(repo_dir).heads)
    from autotune.config import compose
    from autotune.publish import rejection_reasons

    assert rejection_reasons(compose([f"publish.repo={repo_dir}"]), "rms_norm") == [reason]
    listed = autotune("review", "list", f"publish.repo={repo_dir}")
    assert "rejected" in listed.stdout and pid in listed.stdout


def test_a_killed_run_resumes_without_repeating_finished_work(tmp_path):
    repo, run_dir = new_repo(tmp_path / "repo"), tmp_path / "run"
    args = [sys.executable, "-m", "autotune.cli", "run", f"publish.repo={repo}", f"hydra.run.dir={run_dir}",
            "targets=[rms_norm,silu_and_mul]", *FAST]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not any(r["kind"] == "candidate" for r in ledger.read(run_dir / "ledger.jsonl")):
            assert proc.poll() is None and time.monotonic() < deadline, "the run ended before any candidate"
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # as a reboot would: no clean-up of any kind
        proc.wait()
    before = ledger.read(run_dir / "ledger.jsonl")
    with open(run_dir / "ledger.jsonl", "a") as f:
        f.write('{"kind": "candidate", "id": "torn')  # a record cut off mid-write by the crash
    done = autotune("run", f"resume={run_dir}")
    assert done.returncode == 0, done.stderr[-3000:]
    after = ledger.read(run_dir / "ledger.jsonl")
    judged = [r["id"] for r in after if r["kind"] == "candidate"]
    assert len(judged) == len(set(judged)), judged  # no candidate judged twice
    assert [r for r in after if r["kind"] == "profile"] == [r for r in before if r["kind"] == "profile"]
    outcomes = {r["target"]: r["status"] for r in after if r["kind"] == "outcome"}
    assert outcomes == {"rms_norm": "proposed", "silu_and_mul": "proposed"}
    first = next(r["id"] for r in before if r["kind"] == "candidate")
    assert first in judged


@pytest.mark.parametrize("args, message", [
    (["model=huge"], "unknown model preset 'huge'"),
    (["agent.turnz=3"], "unknown setting 'agent.turnz'"),
    (["targets=[no_such_op]"], "unknown target 'no_such_op'"),
])
def test_bad_input_is_one_clear_line(args, message, tmp_path):
    done = autotune("run", f"hydra.run.dir={tmp_path / 'run'}", f"publish.repo={tmp_path}", "trace=/nonexistent", *args)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1].startswith("error: ") and message in done.stderr


def test_resume_of_a_folder_that_is_no_run_says_so(tmp_path):
    done = autotune("run", f"resume={tmp_path}")
    assert done.returncode == 2 and "is not an autotune run directory" in done.stderr
    assert not (tmp_path / ".hydra").exists()  # nothing was started there


def test_missing_settings_are_refused_before_any_work_and_leave_no_run_dir(tmp_path):
    """`agent=openai` without its endpoint, into a folder that is no git checkout: one line that names every
    problem, before the profile is taken, and no run directory that a `resume=` could never finish."""
    run_dir = tmp_path / "run"
    done = autotune("run", f"hydra.run.dir={run_dir}", "agent=openai", f"publish.repo={tmp_path}")
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1
    for problem in ("agent.base_url is not set", "agent.model is not set", "is not a git repository"):
        assert problem in line, line
    assert not run_dir.exists() and "profiler" not in done.stdout


def test_an_llm_endpoint_that_cannot_serve_the_run_is_refused_before_the_profile(tmp_path):
    """The preflight asks the endpoint for its model list: one that refuses connections, and one that does not serve
    agent.model, each stop the run in one line before any work, with no run directory left behind."""
    from tests.llm_stub import listing_endpoint

    repo = new_repo(tmp_path / "repo")
    with listing_endpoint(["qwen-coder"]) as url:
        for base_url, model, message in (
                ("http://127.0.0.1:9/v1", "m", "cannot reach the LLM endpoint http://127.0.0.1:9/v1: ConnectError"),
                (url, "gpt-x", f"the LLM endpoint {url} does not serve agent.model=gpt-x (it serves qwen-coder)")):
            run_dir = tmp_path / model
            done = autotune("run", f"hydra.run.dir={run_dir}", "agent=openai", f"agent.base_url={base_url}",
                            f"agent.model={model}", f"publish.repo={repo}")
            assert done.returncode == 2 and message in done.stderr, done.stderr[-2000:]
            assert not run_dir.exists() and "profiler" not in done.stdout
