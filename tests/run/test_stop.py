"""A run stops when told (issue 28): Ctrl-C or SIGTERM while a candidate is being judged ends `autotune run` within
seconds, with every sandboxed process gone, the resume line printed and exit 130 (143 for SIGTERM); what was done
stays recorded and `resume=` finishes the run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import git
import pytest

from autotune import ledger
from tests.quick import PIPELINE_CHECK

TRACE = Path(__file__).resolve().parents[1] / "profile" / "fixtures" / "vllm_eager_worker.json.gz"


def _children(pid: int) -> set[int]:
    """Every live descendant of `pid`, from /proc."""
    parent_of = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent_of[int(stat.parent.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, parent in parent_of.items() if parent in frontier} - found
        found |= frontier
    return found


def _uid(pid: int) -> int:
    try:
        return int(next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                        if line.startswith("Uid:")).split()[1])
    except (OSError, StopIteration):
        return -1


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.mark.parametrize("sig, code, name", [(signal.SIGINT, 130, "SIGINT (Ctrl-C)"), (signal.SIGTERM, 143, "SIGTERM")])
def test_a_signal_while_judging_stops_the_run_at_once_and_resume_finishes_it(tmp_path, sig, code, name):
    repo = git.Repo.init(tmp_path / "repo", initial_branch="main")
    actor = git.Actor("test", "test@localhost")
    repo.index.commit("init", author=actor, committer=actor)
    run_dir = tmp_path / "run"
    args = ["run", f"publish.repo={tmp_path / 'repo'}", f"hydra.run.dir={run_dir}", "targets=[rms_norm]",
            f"trace={TRACE}", "agent.candidates=1", "run.check_prompts=1", "run.check_new_tokens=2",
            *PIPELINE_CHECK]  # the signal follows the sandboxed worker's start by 0.2 s: the quickest plan is long enough
    # SIGINT as a terminal leaves it: pytest-xdist's workers ignore SIGINT, and an ignored signal stays ignored
    # across exec (Python then installs no KeyboardInterrupt handler), so the run would rightly not stop on it
    proc = subprocess.Popen([sys.executable, "-m", "autotune.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 300
    workers: set[int] = set()
    while not workers:  # a candidate's sandboxed worker is running (confined: under a private uid)
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0][-3000:]
        workers = {p for p in _children(proc.pid) if _uid(p) >= 200_000}
        time.sleep(0.05)
    time.sleep(0.2)
    workers = _children(proc.pid)  # the worker, its host and whatever else runs now
    sent = time.monotonic()
    os.killpg(proc.pid, sig)  # as a terminal's Ctrl-C (the foreground group) or a scheduler's SIGTERM
    out, _ = proc.communicate(timeout=60)
    took = time.monotonic() - sent
    print(f"{name}: exit {proc.returncode} {took:.1f} s after the signal, {len(workers)} processes running then")
    assert proc.returncode == code, f"exit {proc.returncode}: {out[-3000:]}"
    assert took < 15, took
    assert f"run stopped: stopped by {name}" in out and f"autotune run resume={run_dir}" in out, out[-2000:]
    time.sleep(0.5)
    assert not [p for p in workers if _alive(p)], "a process outlived the run"
    records = ledger.read(run_dir / "ledger.jsonl")
    assert not [r for r in records if r["kind"] == "outcome"]  # nothing half-done passes for done
    assert records[-1]["kind"] == "failed" and records[-1]["error"] == f"stopped by {name}"

    resumed = subprocess.run([sys.executable, "-m", "autotune.cli", "run", f"resume={run_dir}"], capture_output=True,
                             text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-2000:]
    outcomes = [r for r in ledger.read(run_dir / "ledger.jsonl") if r["kind"] == "outcome"]
    assert [o["status"] for o in outcomes] == ["proposed"]
