"""A run's live progress: a rich table on a terminal, one line per event in `<run dir>/cli.log` always.

The run's ledger is the single source: `ProgressLedger.append` writes the record and then shows it, so
what the screen says is what the ledger holds (and a resumed run starts from the records it already has).
Per target the table shows candidates judged and correct, the best measured speedup so far, tokens and
dollars spent, and the time left of `agent.budget.wall_s`. When stdout is not a terminal (a scheduler's
log, a pipe) there is no live display, only cli.log and the run's usual lines.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from autotune.ledger import Ledger
from autotune.verify.verdict import is_correct, is_passed

log = logging.getLogger("autotune.events")


@dataclasses.dataclass
class TargetProgress:
    name: str
    state: str = "waiting"
    judged: int = 0
    correct: int = 0  # Status.correct: accepted, unmeasured or slower
    best_speedup: float | None = None  # measured only (a GPU); None = nothing measured yet
    tokens: int = 0
    dollars: float = 0.0
    started: float | None = None  # time.monotonic() when its search began in this process
    ended: float | None = None  # ... and when it ended (the budget clock stops)


class Progress:
    """Per-target counters fed by ledger records; renders itself as a rich table."""

    def __init__(self, names: list[str], budget_wall_s: float | None, run_dir: Path, console: Console,
                 worker: str = "the search"):
        self.targets = {n: TargetProgress(n) for n in names}
        self.worker = worker  # who writes the candidates, as the log names it: "the LLM agent (model m)", ...
        self.budget_wall_s = budget_wall_s
        self.console = console
        self.lock = threading.Lock()
        self.live = Live(self, console=console, refresh_per_second=2, transient=False) \
            if console.is_terminal else None
        self._handler = _file_handler(run_dir / "cli.log")

    def __enter__(self) -> Progress:
        log.addHandler(self._handler)
        if self.live:
            self.live.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.live:
            self.live.stop()
        log.removeHandler(self._handler)
        self._handler.close()

    def seed(self, records: list[dict[str, Any]]) -> None:
        """A resumed run: count what the ledger already holds, without logging it again."""
        for r in records:
            self.update(r)

    def started(self, name: str) -> None:
        with self.lock:
            t = self.targets.setdefault(name, TargetProgress(name))
            t.state, t.started = "working", time.monotonic()
        log.info("%s: %s started writing candidates", name, self.worker)

    def on_record(self, r: dict[str, Any]) -> None:
        self.update(r)
        line = event_line(r)
        if line:
            log.info(line)

    def update(self, r: dict[str, Any]) -> None:
        name = r.get("target")
        if name is None:
            return
        with self.lock:
            t = self.targets.setdefault(name, TargetProgress(name))
            kind = r.get("kind")
            if kind == "candidate":
                t.judged += 1
                t.correct += is_correct(r.get("status"))
                speedup = _measured_speedup(r.get("verdict") or {})
                if speedup is not None:
                    t.best_speedup = max(t.best_speedup or 0.0, speedup)
            elif kind == "llm":
                t.tokens += int(r.get("prompt_tokens", 0)) + int(r.get("completion_tokens", 0))
                t.dollars += float(r.get("cost_usd") or 0.0)
            elif kind == "agent_search":
                t.state = "model check" if is_passed(r.get("best_status")) else "done"
            elif kind == "outcome":
                t.state, t.ended = str(r.get("status", "done")).replace("_", " "), time.monotonic()
            elif kind == "failed":
                t.state, t.ended = "failed", time.monotonic()

    def __rich__(self) -> Table:
        table = Table(title="autotune run", expand=False)
        for col in ("target", "state", "judged", "correct", "best speedup", "tokens", "$", "time left"):
            table.add_column(col, justify="left" if col in ("target", "state") else "right")
        with self.lock:
            for t in self.targets.values():
                table.add_row(t.name, t.state, str(t.judged), str(t.correct),
                              f"{t.best_speedup:.2f}x" if t.best_speedup else "not measured",
                              f"{t.tokens:,}", f"{t.dollars:.4f}", self._time_left(t))
        return table

    def _time_left(self, t: TargetProgress) -> str:
        if self.budget_wall_s is None:
            return "no limit"
        if t.started is None:
            return f"{self.budget_wall_s:.0f} s"
        spent = (t.ended or time.monotonic()) - t.started
        return f"{max(self.budget_wall_s - spent, 0):.0f} s"


class ProgressLedger(Ledger):
    """A Ledger that tells a Progress about each record it has written."""

    def __init__(self, path, progress: Progress):
        super().__init__(path)
        self.progress = progress

    def append(self, kind: str, **fields: Any) -> dict[str, Any]:
        record = super().append(kind, **fields)
        self.progress.on_record(record)
        return record


def _measured_speedup(verdict: dict[str, Any]) -> float | None:
    return verdict.get("speedup_geomean") if verdict.get("measured") else None


def event_line(r: dict[str, Any]) -> str | None:
    """One line for cli.log per ledger record."""
    kind, name = r.get("kind"), r.get("target", "")
    if kind == "candidate":
        s = _measured_speedup(r.get("verdict") or {})
        return f"{name}: {r.get('id')} {r.get('status')}" + (f" {s:.2f}x" if s else "")
    if kind == "llm":
        return (f"{name}: llm c{r.get('index')} t{r.get('turn')} {r.get('prompt_tokens', 0)}+"
                f"{r.get('completion_tokens', 0)} tokens ({r.get('cached_tokens', 0)} cached) "
                f"${r.get('cost_usd', 0):.4f}")
    if kind == "agent_search":
        return f"{name}: candidates done, best {r.get('best')} ({r.get('best_status')}); {r.get('stopped')}"
    if kind == "model_check":
        return f"{name}: model check of {r.get('candidate')}: {'passed' if r.get('passed') else 'failed'}"
    if kind == "proposal":
        return f"{name}: proposed {r.get('id')} {r.get('pr_url') or r.get('branch') or ''}".rstrip()
    if kind == "outcome":
        return f"{name}: {r.get('status')}: {r.get('detail')}"
    if kind == "failed":
        return f"{name or 'run'}: FAILED: {r.get('error')}"
    if kind == "profile":
        return f"profile: {len(r.get('hotspots') or [])} hot spot(s) in {r.get('run_dir')}"
    return None


def _file_handler(path: Path) -> logging.Handler:
    handler = logging.FileHandler(path, mode="a", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    log.setLevel(logging.INFO)
    log.propagate = False  # cli.log only: the terminal has the live table (Hydra's handlers would print it)
    return handler
