"""What the runs of a sweep (or any run folders) proposed and what it cost, on one page.

Give run or sweep directories (as `autotune run` printed them); a folder of runs is searched at any depth. It
writes, into --out (default: the first directory): report.html (one self-contained page: the proposed kernels
first, the largest share of serving time first, with the measured speedup or "not measured", the review state
and the evidence page; then each run's cost, the figures that have something to show, and the settings side by
side), report.md (the same, linking the PNGs), one CSV per table and one PNG per figure. A run that died is a
row that says why; nothing is drawn or projected from a speed nobody measured.
"""

from __future__ import annotations

import argparse

from autotune.errors import UserError
from autotune.report.build import build

USAGE = "autotune report RUN_OR_SWEEP_DIR... [--out DIR]"


def main(argv: list[str]) -> int:
    """The command's entry (every command's is `main(argv)` in its stage's command.py); paths, not overrides: a
    run directory may contain '=' only by accident."""
    parser = argparse.ArgumentParser(prog="autotune report", add_help=False)
    parser.add_argument("paths", nargs="*")
    parser.add_argument("--out", default=None)
    ns, unknown = parser.parse_known_args(argv)
    if unknown or not ns.paths:
        raise UserError(f"usage: {USAGE}"
                        + (f" (unexpected: {' '.join(unknown)})" if unknown else " (give at least one directory)"))
    w = build(ns.paths, ns.out)
    print(f"report: {w.html}\n        {w.markdown}\n        {len(w.csvs)} CSV and {len(w.pngs)} PNG files in {w.out}")
    return 0
