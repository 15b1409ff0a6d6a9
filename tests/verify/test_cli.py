"""`autotune verify` as a user runs it: a real subprocess, its stdout, its exit status."""

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.verify.reasons import WRONG_VALUES, says

CANDIDATES = Path(__file__).parent / "candidates"
QUICK = ["verify=quick", "verify.dtypes=[float32]"]  # fewer cases: the CLI, not the checker, is under test


def autotune(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autotune.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=240)


def test_json_for_a_correct_kernel_is_one_object_and_exit_0(tmp_path):
    p = autotune("verify", "rms_norm", str(CANDIDATES / "rms_norm_rowwise.py"), "--json", *QUICK, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    verdict = json.loads(p.stdout)  # exactly one JSON document on stdout, nothing else
    assert verdict["status"] == "unmeasured" and "not measured (no GPU)" in verdict["reason"]
    assert verdict["cases"] and all(c["passed"] for c in verdict["cases"])
    assert not any(tmp_path.iterdir())  # nothing written where it ran
    # each case's cost, the device's run and the judge's comparison of it, for the researchers' ledgers
    assert all(c["seconds"] is not None and 0 < c["seconds"] < verdict["duration_s"] for c in verdict["cases"])
    n = len(verdict["cases"])  # progress goes to stderr, the last line when the last case is judged
    assert re.search(rf"^rms_norm: judged {n} of {n} cases \(\d+ s\)$", p.stderr, re.M), p.stderr[-2000:]


def test_readable_report_for_a_broken_kernel_and_exit_1(tmp_path):
    p = autotune("verify", "rms_norm", str(CANDIDATES / "no_mask.py"), *QUICK, cwd=tmp_path)
    assert p.returncode == 1, p.stderr[-2000:]
    out = p.stdout
    # it fails on the first case whose width is not a power of two or whose rows are padded (both kinds now
    # come before [7, 1000]: drawn widths and the padded layout)
    for expected in ("autotune verify rms_norm", "max abs err", "FAIL", "isolation", "network:",
                     "status: incorrect"):
        assert expected in out, expected
    assert says(out, WRONG_VALUES), out
    assert re.search(r"rtol / atol\s+┃\s+s ┃", out), out  # each case's seconds, a column of the table
    assert re.search(r"case \[\d+(, \d+)*\] float32 (normal|special) seed \d", out), out  # the failing case, named


def test_policy_violation_in_json_exits_1(tmp_path):
    p = autotune("verify", "rms_norm", str(CANDIDATES / "gc_hunt.py"), "--json", cwd=tmp_path)
    assert p.returncode == 1
    verdict = json.loads(p.stdout)
    assert verdict["status"] == "policy_violation" and "gc" in verdict["reason"] and verdict["policy"]


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    p = autotune("verify", "rms_norm", str(tmp_path / "missing.py"), cwd=tmp_path)
    assert p.returncode == 2 and p.stderr.startswith("error: candidate file") and p.stdout == ""
    p = autotune("verify", "layer_norm", str(CANDIDATES / "rms_norm_rowwise.py"), cwd=tmp_path)
    assert p.returncode == 2 and "unknown target 'layer_norm'" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_help_is_the_commands_docstring(tmp_path):
    p = autotune("verify", "--help", cwd=tmp_path)
    assert p.returncode == 0 and "usage: autotune verify TARGET FILE [--json]" in p.stdout
    assert "Exit status: 0 accepted or unmeasured" in p.stdout


def test_plan_says_the_call_domain_and_its_plan_without_a_candidate(tmp_path):
    """`--plan`: each dim's served values (the presets' hidden sizes among them: Llama 3 8B's 4096, Qwen2.5-0.5B's
    896), the layouts and scalars, the plan's case count; narrowed by verify.models as a verdict would be."""
    p = autotune("verify", "rms_norm", "--plan", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    served = next(line for line in p.stdout.splitlines() if line.startswith("served values: "))
    assert "896" in served and "4096" in served, served
    assert re.search(r"^plan: \d+ cases over \d+ shapes \(", p.stdout, re.M) and "layouts: " in p.stdout
    narrowed = autotune("verify", "rms_norm", "--plan", "verify.models=[tiny]", cwd=tmp_path)
    assert narrowed.returncode == 0 and "1 model presets" in narrowed.stdout, narrowed.stdout
    assert "896" not in next(line for line in narrowed.stdout.splitlines() if line.startswith("served values: "))
    beyond = [line for line in p.stdout.splitlines() if line.startswith("served values no case runs")]
    # rms_norm declares no value beyond its plan: only vLLM's larger steps than the 2048 rows it is served at
    assert len(beyond) == 1 and "; " not in beyond[0] and "serve.max_batched_tokens=8192" in beyond[0], beyond
    paged = autotune("verify", "paged_attention", "--plan", cwd=tmp_path)
    assert paged.returncode == 0 and re.search(r"^served values no case runs .*131072", paged.stdout, re.M), paged.stdout
    missing = autotune("verify", "rms_norm", cwd=tmp_path)
    assert missing.returncode == 2 and "name the candidate file" in missing.stderr, missing.stderr[-500:]
