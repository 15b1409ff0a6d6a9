"""The readable report of a Verdict (`autotune verify` without --json), printed with rich."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from autotune import text
from autotune.verify.verdict import Status, Verdict

STYLE = {Status.ACCEPTED: "bold green", Status.UNMEASURED: "bold green", Status.SLOWER: "bold yellow"}


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def cases_table(verdict: Verdict) -> Table:
    table = Table(title=f"correctness: {len(verdict.cases)} cases", title_justify="left")
    for name in ("shape", "dtype", "kind", "seed", "max abs err", "max rel err", "rtol / atol", "s", "result"):
        table.add_column(name, justify="right" if "err" in name or name in ("seed", "s") else "left")
    for c in verdict.cases:
        result = "[green]pass[/]" if c.passed else "[bold red]FAIL[/]"
        if c.passed and not c.evidence:
            result += " (not evidence)"
        table.add_row(str(c.shape), c.dtype, c.kind, str(c.seed), _num(c.max_abs_err), _num(c.max_rel_err),
                      f"{c.rtol:g} / {c.atol:g}" if c.rtol is not None else "-",
                      "-" if c.seconds is None else f"{c.seconds:.1f}", result)
    return table


def timing_table(verdict: Verdict) -> Table:
    table = Table(title="timing (median of repetitions, us)", title_justify="left")
    for name in ("shape", "dtype", "calls", "candidate", "spread", "eager", "compile", "speedup", "floor", "bound",
                 "% of floor"):
        table.add_column(name, justify="left" if name in ("shape", "dtype", "bound") else "right")
    for t in verdict.timings:
        flag = " [bold red]implausible[/]" if t.implausible else ""
        table.add_row(str(t.shape), t.dtype, str(t.calls), _num(t.candidate_us), _num(t.candidate_spread_us),
                      _num(t.eager_us), _num(t.compile_us), _num(t.speedup) + flag, _num(t.floor_us),
                      t.bound or "-", _num(t.pct_of_floor))
    return table


def render(verdict: Verdict, console: Console | None = None) -> None:
    if console is None:
        console = text.console(highlight=False)
    console.print(f"[bold]autotune verify[/] {verdict.target}  {verdict.candidate}  "
                  f"(sha256 {verdict.candidate_sha256[:12]}, {verdict.duration_s:.1f} s)")
    if verdict.policy:
        console.print("[bold]policy findings[/] (static scan of the source):")
        for finding in verdict.policy:
            console.print(f"  - {finding}", markup=False)
    if verdict.cases:
        console.print(cases_table(verdict))
    if verdict.timings:
        console.print(timing_table(verdict))
        if verdict.speedup_geomean is not None:
            console.print(f"speedup over the best baseline, geometric mean weighted by calls: "
                          f"{verdict.speedup_geomean:.3f}x")
    elif verdict.status.correct:
        console.print("timing: not measured (no GPU)")
    if verdict.fp32_dots:
        console.print(f"note: fp32 through {', '.join(verdict.fp32_dots).upper()}: its fp32 tl.dot takes its operands "
                      "at that precision (Triton's default on NVIDIA), and its fp32 cases were judged against the "
                      "reference's products at it (verify.fp32_dot=ieee demands IEEE)", markup=False)
    for note in verdict.notes:
        console.print(f"note: {note}", markup=False)
    if verdict.sandbox:
        console.print("[bold]isolation[/]:")
        for step, what in verdict.sandbox.items():
            console.print(f"  {step}: {what}", markup=False)
    if verdict.stderr_tail and verdict.status in (Status.COMPILE_ERROR, Status.RUNTIME_ERROR, Status.TIMEOUT):
        console.print("[bold]candidate output (stderr, trimmed)[/]:")
        console.print("\n".join(verdict.stderr_tail.strip().splitlines()[-20:]), markup=False)
    style = STYLE.get(verdict.status, "bold red")
    console.print(f"[{style}]status: {verdict.status.value}[/] - ", end="")
    console.print(verdict.reason, markup=False)
