"""The selfcheck's GPU-only parts run on the CPU device layer, every figure labelled a stand-in (the dry run
itself, all sections, is tests/selfcheck/test_selfcheck.py)."""

import json
import os
import subprocess
import sys

import pytest

from autotune import accel
from autotune.selfcheck import Clock, Plan, _run_section, page
from autotune.selfcheck.bandwidth import roofline

CPU = accel.get("cpu")


def test_the_roofline_on_the_stand_in_is_labelled_and_not_a_gpu_figure():
    r = roofline(CPU, 4 << 20)
    assert r["stand_in"] and not r["measured"] and r["gpu"] is None and r["datasheet_gbps"] is None
    assert r["copy_gbps"] > 0 and r["reduce_gbps"] > 0 and r["bytes"] == 4 << 20


def test_the_library_table_times_on_the_stand_in_and_names_what_failed():
    # a process of its own: Triton reads TRITON_INTERPRET once, when this process may have imported it already
    script = ("import json; from autotune import accel; from autotune.targets import get; "
              "from autotune.selfcheck.bandwidth import library_table; "
              "print(json.dumps(library_table({'rms_norm': get('rms_norm').example_path}, accel.get('cpu'), "
              "smallest=True)))")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **CPU.triton_env()})
    assert proc.returncode == 0, proc.stderr[-3000:]
    [row] = json.loads(proc.stdout.splitlines()[-1])
    assert row["shape"] == [1, 4096] and row["device"] == "cpu (stand-in)" and row["stand_in"]
    assert row["eager_us"] > 0 and row["ours_us"] > 0 and row["agrees_with_reference"]["ours"] is True
    assert row["note"].startswith("CPU stand-in times (interpreter, host clock): not a GPU's")
    # Liger-Kernel's rms_norm calls .to() on a scalar argument, which the interpreter passes as a float
    assert (row["liger_us"] is None) == ("liger failed" in row["note"])


def test_the_page_shows_stand_in_figures_as_such(tmp_path):
    stand_in = {"device": "cpu (stand-in)", "stand_in": True, "status": "unmeasured",
                "reason": "correct; timing: not measured (CPU stand-in timings only)", "as_expected": True,
                "timings": [{"shape": [4, 128], "dtype": "float32", "candidate_us": 25916.0, "eager_us": 21.3,
                             "compile_us": 79.7}], "absent": {"liger": "failed: InterpreterError"}}
    row = {"file": "tests/verify/candidates/rms_norm_slowed.py", "target": "rms_norm", "expected": "slower",
           "status": "unmeasured", "as_expected": True, "reason": "correct", "stand_in": stand_in}
    plan = Plan(out=tmp_path, root=tmp_path, dry_run=True, budget_s=60)
    results = [_run_section("protocol", lambda p, c, d: (True, {"checks": [row]}), plan, Clock(60), [])]
    page.write(tmp_path / "page", {"gpu": "cpu", "mode": "test", "environment": {}}, results)
    text = (tmp_path / "page.md").read_text()
    assert "interpreter times on a host clock, **not a GPU's figures and never a speed**" in text
    assert ("| rms_norm_slowed.py | cpu (stand-in) | 4x128 | float32 | 25916 | 21.3 | 79.7 | "
            "liger: failed: InterpreterError | unmeasured | yes |") in text


@pytest.mark.parametrize("dry_run, name", [(True, "cpu"), (False, "cuda")])
def test_the_plan_picks_the_device_layer(tmp_path, dry_run, name):
    assert Plan(out=tmp_path, root=tmp_path, dry_run=dry_run, budget_s=1).accel.name == name
