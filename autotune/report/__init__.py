"""`autotune report RUN_OR_SWEEP_DIR... [--out DIR]`: many runs' ledgers read at a glance.

    from autotune.report import build
    written = build(["multirun/2026-11-30/21-00-00"], out="report")   # -> Written (paths of what it wrote)

It reads every run directory under the paths given (ledger.jsonl, config.yaml, env.json) into pandas
(data.py), draws the figures with matplotlib (plots.py) and writes, into `--out` (default: the first
path given): report.html (one self-contained page, the PNGs embedded), report.md (the same tables,
linking the PNGs), one CSV per table and one PNG per figure.
"""

from autotune.report.build import Written, build

__all__ = ["Written", "build"]
