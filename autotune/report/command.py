"""`autotune report RUN_OR_SWEEP_DIR... [--out DIR]`: the command's entry (the work is in build.py)."""

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
