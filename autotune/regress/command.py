"""`autotune regress`: the gate before rolling out an upgrade of Triton, torch, the driver or the GPU.

Every merged kernel in `kernels.dir` (kernels/<op>/<id>/, see autotune/kernels.py) is judged again by the
checker on this machine, on the shapes its proposal recorded (provenance.json `hotspot.shapes`; the
target's default shapes when none were recorded), and compared with the verdict it was merged with:

- wrong: it was correct and is not any more (its status is no longer `Status.correct`: accepted, unmeasured or slower);
- slower: both verdicts were timed (a GPU, then and now) and the weighted speedup fell by more than
  `--margin` (default 5%) of the recorded one;
- not compared: one of the two verdicts has no timings (say, a CPU machine), so only correctness counts.

Exits 1 when any kernel is wrong or slower, 0 otherwise; prints a table and writes the same table as
markdown (`--out`, default regress.md) for a PR comment.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
from pathlib import Path

from omegaconf import DictConfig
from rich.console import Console
from rich.table import Table

from autotune import kernels, targets, text
from autotune.errors import UserError

USAGE = "autotune regress [--margin 0.05] [--out regress.md] [key=value ...]"


class Finding(str, enum.Enum):
    OK = "ok"
    WRONG = "WRONG"
    SLOWER = "SLOWER"


@dataclasses.dataclass(frozen=True)
class Check:
    kernel: str  # <op>/<id>
    recorded_status: str
    status: str  # now
    recorded_speedup: float | None  # None unless both measured
    speedup: float | None
    finding: Finding
    detail: str

    @property
    def change(self) -> str:
        if self.recorded_speedup and self.speedup:
            return f"{self.speedup / self.recorded_speedup - 1:+.1%}"
        return "not compared"


def recorded_shapes(k: kernels.MergedKernel) -> list[tuple[tuple[int, ...], str, int]] | None:
    shapes = (k.provenance.get("hotspot") or {}).get("shapes") or []
    return [(tuple(s["shape"]), s["dtype"], int(s.get("calls") or 0)) for s in shapes] or None


def check(k: kernels.MergedKernel, cfg: DictConfig, margin: float, environment) -> Check:
    """Judge one merged kernel now and compare with its recorded verdict."""
    from autotune.verify import verify

    shapes = recorded_shapes(k)
    vcfg = cfg.copy()
    if shapes is None:
        vcfg.verify.shapes = "default"  # not whatever profile happens to lie around on this machine
    verdict = verify(targets.get(k.target), k.source_path, vcfg, shapes=shapes, environment=environment)
    rec = k.provenance.get("verdict") or {}
    then = rec.get("speedup_geomean") if rec.get("measured") else None
    now = verdict.speedup_geomean if verdict.measured else None
    status = verdict.status.value
    if not verdict.status.correct:
        finding, detail = Finding.WRONG, verdict.reason
    elif then and now and now < then * (1 - margin):
        finding, detail = Finding.SLOWER, f"{now:.2f}x now, {then:.2f}x recorded (margin {margin:.0%})"
    else:
        finding = Finding.OK
        detail = "correct" + ("" if then and now else "; speed not compared (a verdict without timings)")
    return Check(f"{k.target}/{k.id}", str(rec.get("status", "unknown")), status, then, now, finding, detail)


def run_checks(cfg: DictConfig, margin: float) -> list[Check]:
    from autotune.env import collect

    root = Path(str(cfg.kernels.dir))
    found = kernels.merged(root)
    if not found:
        raise UserError(f"no merged kernels under {root.resolve()} (set kernels.dir=PATH, or approve a proposal)")
    environment = collect(dict(cfg.get("labels") or {}))
    return [check(k, cfg, margin, environment) for ks in found.values() for k in ks]


def _speed(x: float | None) -> str:
    return f"{x:.2f}x" if x else "-"


def rows(checks: list[Check]) -> list[list[str]]:
    return [[c.kernel, c.finding.value, c.recorded_status, c.status, _speed(c.recorded_speedup), _speed(c.speedup),
             c.change, c.detail] for c in checks]


HEAD = ["kernel", "result", "recorded", "now", "recorded speedup", "speedup now", "change", "detail"]


def markdown(checks: list[Check], environment: str) -> str:
    bad = sum(c.finding is not Finding.OK for c in checks)
    lines = [f"### autotune regress: {bad} of {len(checks)} merged kernel(s) regressed", "",
             f"Environment: {environment}", "", "| " + " | ".join(HEAD) + " |", "|" + " --- |" * len(HEAD)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|").replace("\n", " ") for cell in r) + " |" for r in rows(checks)]
    return "\n".join(lines) + "\n"


def print_table(checks: list[Check], console: Console) -> None:
    table = Table(title="autotune regress")
    for h in HEAD:
        table.add_column(h, overflow="fold")
    for c, r in zip(checks, rows(checks)):
        style = "green" if c.finding is Finding.OK else "bold red"
        table.add_row(r[0], f"[{style}]{r[1]}[/]", *r[2:])
    console.print(table)


def main(argv: list[str]) -> int:
    """The command's entry (every command's is `main(argv)` in its stage's command.py)."""
    from autotune.config import from_argv
    from autotune.env import collect
    from autotune.report.data import environment_line

    parser = argparse.ArgumentParser(prog="autotune regress", add_help=False)
    parser.add_argument("--margin", type=float, default=0.05)
    parser.add_argument("--out", default="regress.md")
    cfg, argv = from_argv(argv)
    ns, unknown = parser.parse_known_args(argv)
    if unknown:
        raise UserError(f"unexpected argument(s) {' '.join(unknown)} "
                        "(usage: autotune regress [--margin 0.05] [--out regress.md] [key=value ...])")
    checks = run_checks(cfg, ns.margin)
    console = text.console(highlight=False)
    print_table(checks, console)
    Path(ns.out).write_text(markdown(checks, environment_line(collect().to_dict())))
    bad = [c for c in checks if c.finding is not Finding.OK]
    console.print(f"{len(bad)} of {len(checks)} merged kernel(s) regressed; table written to {ns.out}")
    return 1 if bad else 0
