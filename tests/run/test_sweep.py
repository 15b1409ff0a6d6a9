"""Sweeps through real Hydra launchers on the CPU, and a report over what they left.

Each job is a real `autotune run` kept to seconds of CPU: a recorded vLLM trace instead of serving
(trace=...), one rms_norm candidate, one seed in one dtype, shapes cut small for the interpreter, and a
1-prompt model check. The local (joblib) sweep is 2x2 with one job killed by SIGKILL mid-run (the
other three must finish, the fourth resume); the submitit_local one has one job whose
publish.repo does not exist yet, so it dies after its search: the sweep must finish the other, print the
resume command, and that command must finish the dead job once the repository exists.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import git
import pandas as pd
import pytest

from autotune import ledger
from autotune.verify.verdict import Status

TRACE = Path(__file__).resolve().parents[1] / "profile" / "fixtures" / "vllm_eager_worker.json.gz"
TINY = ["targets=[rms_norm]", f"trace={TRACE}", "agent.candidates=1", "verify=quick", "verify.models=[tiny]",
        "verify.max_profile_shapes=1", "verify.max_interpreter_rows=16", "verify.max_interpreter_elements=8192",
        "verify.max_interpreter_rows_extra=8", "run.check_prompts=1", "run.check_new_tokens=2"]


def autotune(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autotune.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def new_repo(path: Path) -> Path:
    repo = git.Repo.init(path, initial_branch="main")
    actor = git.Actor("test", "test@localhost")
    repo.index.commit("init", author=actor, committer=actor)
    return path


def job_process(job_dir: Path) -> int | None:
    """The pid of the child process that runs one sweep job (see autotune.run.supervise), from /proc."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if f"resume={job_dir}".encode() in args and b"autotune.cli" in args:
            return int(cmdline.parent.name)
    return None


@pytest.mark.slow  # five runs: ~30 s of CPU on an idle 2-core machine, minutes when it is shared
@pytest.mark.timeout(1500)
def test_a_2x2_local_sweep_survives_a_killed_job_and_ends_in_one_report_that_matches_the_ledgers(tmp_path):
    repo, sweep = new_repo(tmp_path / "repo"), tmp_path / "sweep"
    args = [sys.executable, "-m", "autotune.cli", "run", "-m", "hydra/launcher=local", f"hydra.sweep.dir={sweep}",
            f"publish.repo={repo}", *TINY, "verify.dtypes=[float32],[float16]", "run.check_new_tokens=1,2"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 600
    while not any(r["kind"] == "profile" for r in ledger.read(sweep / "1" / "ledger.jsonl")):
        assert proc.poll() is None and time.monotonic() < deadline, "job 1 never got going"
        time.sleep(0.2)
    pid = job_process(sweep / "1")
    assert pid is not None
    os.kill(pid, signal.SIGKILL)  # as the OOM killer or a scheduler would
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 1, out[-3000:]
    assert [p.name for p in sorted(sweep.iterdir()) if (p / "summary.json").is_file()] == ["0", "2", "3"], out
    assert f"resume the failed job: autotune run resume={sweep / '1'}" in out
    assert [r for r in ledger.read(sweep / "1" / "ledger.jsonl") if r["kind"] == "failed"][-1]["error"] == \
        "killed by SIGKILL"
    assert "run: FAILED: killed by SIGKILL" in (sweep / "1" / "cli.log").read_text()
    resumed = autotune("run", f"resume={sweep / '1'}")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]

    runs = sorted(p for p in sweep.iterdir() if (p / "summary.json").is_file())
    assert [p.name for p in runs] == ["0", "1", "2", "3"]
    for run in runs:
        assert (run / "cli.log").read_text().count("rms_norm: rms_norm-c0-t1 unmeasured") == 1
    made = autotune("report", str(sweep), "--out", str(tmp_path / "report"))
    assert made.returncode == 0, made.stderr[-2000:]
    settings = pd.read_csv(tmp_path / "report" / "settings.csv")
    assert len(settings) == 4
    assert sorted(settings["set:run.check_new_tokens"]) == [1, 1, 2, 2]
    for run in runs:  # the report's counts are the ledgers' counts
        judged = [r for r in ledger.read(run / "ledger.jsonl") if r["kind"] == "candidate"]
        row = settings[settings["run_id"] == json.loads((run / "summary.json").read_text())["run_id"]].iloc[0]
        assert row["judged"] == len(judged) == 1  # the killed job's candidate was not judged twice
        assert row["correct"] == sum(Status.parse(r["status"]) in Status.correct_set() for r in judged)
    assert "No speedup was measured (no GPU)" in (tmp_path / "report" / "report.html").read_text()


@pytest.mark.slow  # three runs (one dies early)
@pytest.mark.timeout(1200)
def test_a_submitit_sweep_with_a_dying_job_finishes_the_other_and_says_how_to_resume(tmp_path):
    good, missing, sweep = new_repo(tmp_path / "good"), tmp_path / "not-yet", tmp_path / "sweep"
    done = autotune("run", "-m", "hydra/launcher=slurm_local", f"hydra.sweep.dir={sweep}",
                    f"publish.repo={good},{missing}", *TINY, "verify.dtypes=[float32]")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert (sweep / "0" / "summary.json").is_file()  # the other job finished
    assert not (sweep / "1" / "summary.json").is_file()
    resume = re.search(r"resume the failed job: (autotune run resume=\S+)", done.stdout)
    assert resume and resume.group(1) == f"autotune run resume={sweep / '1'}", done.stdout[-3000:]
    dead = ledger.read(sweep / "1" / "ledger.jsonl")
    assert [r for r in dead if r["kind"] == "failed"][-1]["error"].startswith("rms_norm: UserError: publish.repo")
    assert "FAILED" in (sweep / "1" / "cli.log").read_text()

    new_repo(missing)  # what the operator fixes, then the command the sweep printed
    resumed = autotune(*resume.group(1).split()[1:])
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    outcomes = [r for r in ledger.read(sweep / "1" / "ledger.jsonl") if r["kind"] == "outcome"]
    assert [o["status"] for o in outcomes] == ["proposed"]
