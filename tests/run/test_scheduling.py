"""Judge slots: at most verify.workers judges at once, each pinned to its own GPU in its children's
environment; the default worker count; and a run's live progress lines in cli.log."""

from __future__ import annotations

import threading
import time

from autotune.agent import slots
from autotune.config import compose
from autotune.run.progress import Progress, ProgressLedger
from autotune.sandbox import runner as sandbox


def test_each_judge_gets_its_own_gpu_and_no_more_run_at_once(tmp_path):
    pool = slots.JudgeSlots(2, gpus=("3", "5"))
    seen, running, peak, lock = [], [0], [0], threading.Lock()

    def judge():
        with pool.hold():
            env = sandbox.child_env(tmp_path, gpu=True)  # what a candidate's process would get
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
                seen.append(env["CUDA_VISIBLE_DEVICES"])
            time.sleep(0.05)
            with lock:
                running[0] -= 1

    threads = [threading.Thread(target=judge) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak[0] == 2 and sorted(set(seen)) == ["3", "5"] and len(seen) == 6
    assert sandbox.child_env(tmp_path, gpu=False)["CUDA_VISIBLE_DEVICES"] == ""  # unpinned outside a slot


def test_default_workers_leave_a_cpu_free_and_follow_the_setting():
    assert slots.default_workers(("0", "1", "2")) == 3  # one judge per GPU
    assert slots.default_workers(()) == max(slots.usable_cpus(), 1)
    assert slots.judge_slots(compose(["verify.workers=3", "device=cpu"])).workers == 3


def test_progress_counts_records_and_logs_one_line_each(tmp_path):
    from rich.console import Console

    console = Console(file=open(tmp_path / "screen.txt", "w"), force_terminal=False)
    with Progress(["rms_norm"], 60.0, tmp_path, console) as progress:
        ledger = ProgressLedger(tmp_path / "ledger.jsonl", progress)
        progress.started("rms_norm")
        ledger.append("llm", target="rms_norm", index=0, turn=1, prompt_tokens=100, completion_tokens=20,
                      cached_tokens=0, cost_usd=0.5)
        ledger.append("candidate", target="rms_norm", id="rms_norm-c0-t1", status="accepted",
                      verdict={"measured": True, "speedup_geomean": 1.4})
        ledger.append("candidate", target="rms_norm", id="rms_norm-c1-t1", status="incorrect", verdict={})
        t = progress.targets["rms_norm"]
        assert (t.judged, t.correct, t.best_speedup, t.tokens, t.dollars) == (2, 1, 1.4, 120, 0.5)
        assert progress.live is None  # not a terminal: no live display
    lines = (tmp_path / "cli.log").read_text().splitlines()
    assert len(lines) == 4 and lines[2].endswith("rms_norm: rms_norm-c0-t1 accepted 1.40x")
