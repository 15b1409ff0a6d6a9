"""Is the file correct for the target, and on a GPU faster than the eager and torch.compile baselines?

The file must define the entry function named after the target with the reference's arguments
(`def rms_norm(x, weight, eps)`) and launch at least one @triton.jit kernel that does the math; outside
kernels it may only allocate, reshape/view, make contiguous and query shapes.

What happens:
  1. a static scan of the source (never executed here): imports, torch math, file/process/network
     access, exec tricks -> policy_violation;
  2. the file runs in a fresh, isolated process (own session, allow-listed environment, private
     directory and Triton cache, no network, unprivileged uid where possible, memory/file/process
     limits, verify.timeout_s wall clock) on every case: the profile's shapes (or the target's
     defaults) and edge shapes, in fp32/bf16/fp16, with realistic, large and NaN/Inf inputs, several
     seeds, a repeat and a refill of the same buffers;
  3. this process, which never imports the candidate, compares each output with the reference and an
     fp64 golden it computed itself (torch.testing.assert_close rule at the target's tolerance);
  4. on a GPU, the candidate and the eager/torch.compile baselines are timed in separate processes.
On CPU the kernel runs under the Triton interpreter, shapes are cut to keep it quick (the report says
which), and a correct candidate is `unmeasured`: timing needs a GPU.

`--plan` (no FILE) prints the call domain the target is judged on (each dim's served values, the edges, layouts,
scalar values, dtypes) and the plan that covers it on this device: its cases, what it cuts, what it never runs
whole.

Output: a readable report (per case: shape, dtype, input kind, max abs/rel error, pass/fail; the
isolation applied; timings or "not measured"), or with --json exactly one JSON object (the Verdict:
status, reason, cases, timings, sandbox, environment, ...).
Exit status: 0 accepted or unmeasured; 1 any other verdict (slower, incorrect, compile_error,
runtime_error, timeout, policy_violation); 2 bad input (unknown target, missing file, bad override).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys

from autotune.config import from_argv
from autotune.errors import UserError
from autotune.verify import start_worker, verify

USAGE = "autotune verify TARGET FILE [--json] [key=value ...]  |  autotune verify TARGET --plan [key=value ...]"


class _ArgParser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, our format, exit 2
        raise UserError(f"{message} (usage: {USAGE})")


def main(argv: list[str]) -> int:
    """The command's entry (every command's is `main(argv)` in its stage's command.py). With --json, stdout holds
    exactly one JSON object whatever happens: the verdict, or {"error": ...} for bad input (exit 2)."""
    try:
        return _main(argv)
    except UserError as e:
        if "--json" in argv:
            print(json.dumps({"error": str(e)}))
        raise


def _main(argv: list[str]) -> int:
    cfg, rest = from_argv(argv)
    parser = _ArgParser(prog="autotune verify", add_help=False)
    parser.add_argument("target")
    parser.add_argument("file", nargs="?")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--plan", action="store_true")
    ns = parser.parse_args(rest)
    if ns.plan:  # the call domain and the plan that covers it, no candidate
        from autotune.verify import describe_plan

        print("\n".join(describe_plan(ns.target, cfg)))
        return 0
    if ns.file is None:
        raise UserError(f"name the candidate file to judge (usage: {USAGE})")
    start_worker(str(cfg.get("device", "auto")))
    return judge_file(cfg, ns.target, ns.file, ns.json)


def judge_file(cfg, target: str, file: str, as_json: bool) -> int:
    progress = logging.StreamHandler(sys.stderr)  # "judged N of M cases" while it works (stdout: the verdict only)
    progress.setFormatter(logging.Formatter("%(message)s"))
    log = logging.getLogger("autotune.verify")
    log.addHandler(progress)
    log.setLevel(logging.INFO)
    try:
        verdict = verify(target, file, cfg)
    finally:
        log.removeHandler(progress)
    if as_json:
        print(json.dumps(_finite(verdict.to_dict()), allow_nan=False))
    else:
        from autotune.verify.report import render

        render(verdict)
    return 0 if verdict.passed else 1


def _finite(obj):
    """The verdict as strict JSON: NaN and Inf (never expected, but never invalid output) become null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj
