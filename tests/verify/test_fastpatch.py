"""The interpreter's speed-ups (autotune.verify.interp.fastpatch) change nothing it computes or refuses: the
frontend's block types and tensors, Triton's own errors for shapes it refuses, and a kernel's results (int32
index arithmetic that wraps, loads, stores, a dot) are the same before and after, on a first build of a shape
and on a remembered one. One fresh interpreter process (tests/verify/fastpatch_probe.py, ~5 s)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = Path(__file__).parent / "fastpatch_probe.py"


@pytest.fixture(scope="module")
def runs():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, str(PROBE)], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


@pytest.mark.parametrize("part", ["blocks", "tensors", "errors", "types", "kernel"])
def test_the_fast_interpreter_builds_refuses_and_computes_as_the_stock_one(runs, part):
    assert runs["patched"][part] == runs["stock"][part]
    assert runs["again"][part] == runs["stock"][part]  # the remembered shapes


def test_the_probe_reaches_each_refusal_and_the_wrap(runs):
    # the comparison above is only worth something if the stock run refused each bad shape and the int32
    # arithmetic wrapped (an overflow check that raised would show as a failed probe, not as equal results)
    assert all(e != "no error" for e in runs["stock"]["errors"]), runs["stock"]["errors"]
    assert min(runs["stock"]["kernel"][0]) < 0
