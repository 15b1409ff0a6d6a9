"""What became of each job of a sweep (`autotune run -m ...`), and how to resume the ones that died.

A sweep's jobs run wherever the launcher puts them (`hydra/launcher=local|slurm|slurm_local|ray_local`,
conf/hydra/launcher/). A job that dies (an endpoint down, killed by the scheduler, a full disk) leaves
its run directory as it was: the ledger is append-only and fsynced per record. Its folder has a
config.yaml but no summary.json, which is what `jobs` looks for, so the verdict does not depend on the
dead job having said anything. The other jobs go on (`autotune.run.main` returns a failure code instead
of raising, so Hydra's sweeper does not stop at it), and at the end the sweep prints one line per job
and `autotune run resume=<dir>` for each one that did not finish.

`SweepStart` is a Hydra callback (conf/config.yaml, hydra.callbacks) that remembers the sweep directory
in the process that launches the jobs, whichever launcher runs them.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig
from rich.console import Console
from rich.table import Table

SWEEP_DIR: list[Path] = []  # set by SweepStart in the launching process


class JobState(str, enum.Enum):
    FINISHED = "finished"
    FAILED = "failed"  # started (config.yaml saved) and never wrote summary.json
    NOT_STARTED = "not started"  # refused before its run began (a bad setting); its log says why


@dataclasses.dataclass(frozen=True)
class Job:
    dir: Path
    state: JobState
    detail: str  # the recorded error, or the outcomes in a few words

    @property
    def resume(self) -> str | None:
        return f"autotune run resume={self.dir}" if self.state is JobState.FAILED else None


class SweepStart(Callback):
    """Remembers the sweep directory (launchers resolve it once, in the launching process)."""

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        SWEEP_DIR.append(Path(str(config.hydra.sweep.dir)))


def jobs(sweep_dir: Path) -> list[Job]:
    """Every job folder of a sweep (the numbered subfolders Hydra made), in job order."""
    folders = [p for p in Path(sweep_dir).iterdir() if p.is_dir() and (p / ".hydra").is_dir()
               or (p / "config.yaml").is_file()] if Path(sweep_dir).is_dir() else []
    return [job_of(p) for p in sorted(folders, key=lambda p: (len(p.name), p.name))]


def job_of(folder: Path) -> Job:
    if (folder / "summary.json").is_file():
        outcomes = json.loads((folder / "summary.json").read_text()).get("outcomes", [])
        detail = ", ".join(f"{o['target']}: {o['status']}" for o in outcomes) or "nothing to do"
        return Job(folder, JobState.FINISHED, detail)
    if not (folder / "config.yaml").is_file():
        return Job(folder, JobState.NOT_STARTED, f"see {folder / 'cli.log'}")
    from autotune import ledger

    failed = ledger.read(folder / "ledger.jsonl")
    errors = [r.get("error", "") for r in failed if r.get("kind") == "failed"]
    return Job(folder, JobState.FAILED, errors[-1] if errors else "stopped without a word (killed?)")


def print_jobs(found: list[Job], console: Console) -> int:
    """The sweep's table and the resume commands; returns how many jobs did not finish."""
    table = Table(title=f"sweep: {len(found)} job(s)", show_lines=False)
    for col in ("job", "state", "detail"):
        table.add_column(col, overflow="fold")
    for job in found:
        style = "green" if job.state is JobState.FINISHED else "red"
        table.add_row(str(job.dir), f"[{style}]{job.state.value}[/]", job.detail)
    console.print(table)
    unfinished = [j for j in found if j.state is not JobState.FINISHED]
    for job in unfinished:
        if job.resume:
            console.print(f"resume the failed job: {job.resume}", soft_wrap=True)  # one line: copy and paste
    if found:
        dirs = " ".join(sorted({str(j.dir.parent) for j in found}))
        console.print(f"report: autotune report {dirs}", soft_wrap=True)
    return len(unfinished)
