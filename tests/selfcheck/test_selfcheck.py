"""The GPU selfcheck, run here as its dry run: the same sections and commands on the CPU, small sizes.

On the lent GPU the script must only run, never be debugged: every section, the page, the JSON and the
expectations it reads from the test suite are exercised here first.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.selfcheck import SECTIONS, Clock, Plan, _run_section, page
from autotune.selfcheck.expect import Expectation, entry_target, expectations
from autotune.verify.timing import STAND_IN_REASON
from tests.shared import once

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def dry_run(tmp_path_factory, worker_id):
    """One dry run for the session: (its exit status and output, its benchmarks folder)."""
    def make(out: Path) -> dict:
        proc = subprocess.run([sys.executable, "-m", "autotune.selfcheck", "--dry-run", "--out", str(out),
                               "--max-candidates", "1"], cwd=ROOT, capture_output=True, text=True, timeout=900)
        return {"returncode": proc.returncode, "output": proc.stdout + proc.stderr, "out": str(out)}

    run = once(tmp_path_factory, worker_id, "selfcheck_dry_run", make)
    return run, Path(run["out"])


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_dry_run_passes_every_section_and_writes_the_page(dry_run):
    run, out = dry_run
    assert run["returncode"] == 0, run["output"]
    [md] = out.glob("*-cpu-dry-run.md")
    text = md.read_text()
    for title in page.TITLES.values():
        assert f"## {title}: " in text
    assert "FAILED" not in text and "not run" not in text.split("## 3.")[0]
    assert "not measured" in text  # no interpreter figure is reported as a timing
    assert "not a GPU's figures and never a speed" in text  # the stand-in's are labelled
    assert (out / "selfcheck.log").read_text().count("$ autotune ") >= 6


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_dry_run_json_holds_each_sections_figures(dry_run):
    _, out = dry_run
    [raw] = out.glob("*-cpu-dry-run.json")
    sections = {s["name"]: s for s in json.loads(raw.read_text())["sections"]}
    assert list(sections) == list(SECTIONS)
    roof = sections["roofline"]["data"]
    assert roof["copy_gbps"] > 0 and not roof["measured"] and roof["stand_in"]
    profile = sections["profile"]["data"]
    assert profile["ttft_ms"]["p50"] > 0 and {h["target"] for h in profile["hotspots"]} >= {"rms_norm"}
    judged = sections["verify"]["data"]["candidates"]
    assert {c["expected"] for c in judged} >= {"unmeasured"} and len({c["expected"] for c in judged}) == 2
    assert all(c["as_expected"] for c in judged)
    # the correct example's timing protocol ran on the CPU stand-in, labelled, and left it unmeasured
    [timed] = [c["stand_in"] for c in judged if c["expected"] == "unmeasured"]
    assert timed["device"] == "cpu (stand-in)" and timed["stand_in"] and not timed["kept_as_timings"]
    assert timed["status"] == "unmeasured" and timed["reason"] == STAND_IN_REASON and timed["timings"]
    assert [o["status"] for o in sections["run"]["data"]["outcomes"]] == ["proposed"]
    checks = sections["protocol"]["data"]["checks"]
    assert all(c["status"] == "unmeasured" for c in checks)
    slowed = checks[0]["stand_in"]  # the slowed kernel, timed on the stand-in against every baseline
    assert slowed["status"] == "unmeasured" and slowed["reason"] == STAND_IN_REASON and slowed["as_expected"]
    [t] = slowed["timings"]
    assert t["candidate_us"] > 0 and t["eager_us"] > 0 and t["compile_us"] > 0
    assert slowed["compile_backend"] == "aot_eager"
    assert "liger" in slowed["absent"] or t["speedup"] is not None  # Liger: timed, or named with its reason


def test_expectations_come_from_the_test_tables():
    found = {Path(e.path).name: e for e in expectations(ROOT)}
    assert found["rms_norm_rowwise.py"] == Expectation("rms_norm", "tests/verify/candidates/rms_norm_rowwise.py",
                                                       "unmeasured")
    assert found["fused_add_rms_norm.py"].target == "fused_add_rms_norm"
    assert found["torch_fallback.py"].expected == "policy_violation"
    assert found["hang.py"].expected is None  # in no table: too slow to be worth a GPU minute
    assert all(Path(ROOT / e.path).is_file() for e in found.values())


def test_a_correct_kernel_must_be_timed_on_a_gpu_and_a_cheat_must_fail_the_same_way():
    correct = Expectation("rms_norm", "x.py", "unmeasured")
    assert correct.matches("unmeasured", on_gpu=False) and not correct.matches("unmeasured", on_gpu=True)
    assert correct.matches("slower", on_gpu=True) and correct.matches("accepted", on_gpu=True)
    cheat = Expectation("rms_norm", "y.py", "incorrect")
    assert cheat.matches("incorrect", on_gpu=True) and not cheat.matches("accepted", on_gpu=True)


def test_the_entry_function_names_the_target(tmp_path):
    f = tmp_path / "k.py"
    f.write_text("import torch\n\ndef helper():\n    pass\n\ndef silu_and_mul(x):\n    return x\n")
    assert entry_target(f) == "silu_and_mul"
    f.write_text("def broken(:\n")
    assert entry_target(f) == "rms_norm"


def test_a_failing_section_is_reported_and_the_others_are_kept(tmp_path):
    plan = Plan(out=tmp_path, root=ROOT, dry_run=True, budget_s=60)

    def broken(plan, clock, done):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    results = [_run_section("roofline", lambda p, c, d: (None, {"device": "cpu", "gpu": None, "bytes": 1 << 20,
                                                                 "copy_gbps": 1.0, "reduce_gbps": 2.0,
                                                                 "datasheet_gbps": None}), plan, Clock(60), []),
               ]
    results.append(_run_section("profile", broken, plan, Clock(60), results))
    page.write(tmp_path / "page", {"gpu": "cpu", "mode": "test", "environment": {}}, results)
    text = (tmp_path / "page.md").read_text()
    assert "## 2. Profile of the served model: FAILED (RuntimeError: CUDA error: an illegal memory access" in text
    assert "| device-to-device copy (read + write) | 1.0 | - |" in text
    assert "## 3. The checker on every example and cheating kernel: not run" in text


def test_the_script_copies_its_page_to_the_device_result_folder(tmp_path):
    out, result = tmp_path / "bench", tmp_path / "OUT"
    result.mkdir()
    proc = subprocess.run(["bash", "scripts/gpu_check.sh", "--dry-run", "--only", "roofline", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OUT": str(result), "PYTHON": sys.executable})  # this venv's, not PATH's
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.suffix for p in result.iterdir()) == [".json", ".log", ".md"]


def test_without_a_gpu_the_real_check_refuses_to_start(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "autotune.selfcheck", "--out", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no CUDA GPU visible; use --dry-run" in proc.stderr
