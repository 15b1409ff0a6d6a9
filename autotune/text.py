"""How figures are written for people: percentages that never round up across a goal, durations, sizes; and
text someone else wrote, fenced so that it stays text.

A share is written with one decimal and cut, not rounded (`pct(0.8496) == "84.9%"`): a run that cached 84.96%
of its prompt tokens has not met an 85% goal, and its summary must not say "85%".

    pct(0.847)          # "84.7%"
    pct(0.999999)       # "99.9%"  (100.0% only for all of it)
    us(1530.0)          # "1.53 ms"
"""

from __future__ import annotations

import math
import re

from rich.console import Console

LOG_WIDTH = 1000  # a table written to a file or a pipe is as wide as its rows need


class _LogConsole(Console):
    """A Console for a file or a pipe: as wide as LOG_WIDTH for tables, but a rule is one short line, not a line of
    LOG_WIDTH dashes."""

    def rule(self, title="", *args, **kwargs) -> None:
        self.print(f"-- {title} --" if title else "--", markup=True, highlight=False)


def console(**options) -> Console:
    """The commands' rich Console. Written to a file or a pipe (cli.log, a cluster job's output) its tables keep
    whole rows, every column as wide as its cells (rich would squeeze them to 80 columns: `29…`, `rms_nor`), and
    its rules are short lines."""
    shown = Console(**options)
    return shown if shown.is_terminal else _LogConsole(width=LOG_WIDTH, **options)


def pct(share: float | None, decimals: int = 1) -> str:
    """`share` (0.847) as a percentage cut at `decimals` places ("84.7%"); "-" for None or NaN."""
    if share is None or share != share:
        return "-"
    scale = 10 ** decimals
    value = math.floor(round(100 * float(share) * scale, 6)) / scale  # round(.., 6): 0.29 * 100 is 28.999...
    return f"{value:.{decimals}f}%"


def us(x: float | None) -> str:
    """Microseconds in the unit that reads best: "1.53 ms", "4.20 us", "350 ns"."""
    if x is None:
        return "-"
    if x >= 1e3:
        return f"{x / 1e3:,.2f} ms"
    if x >= 1:
        return f"{x:.2f} us"
    return f"{x * 1e3:.0f} ns" if x >= 0.01 else f"{x * 1e3:.1f} ns"


def size(n: int) -> str:
    """Bytes in decimal units: "1.05 MB"."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def fence(text: str, info: str = "python") -> str:
    """`text` as one fenced markdown code block that nothing in it can close: the fence is longer than any run of
    backticks in it (CommonMark closes a fence only with one at least as long). For a candidate's source on its
    evidence page, its output in the model's feedback."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    marks = "`" * max(3, longest + 1)
    return f"{marks}{info}\n{text}\n{marks}"
