"""Timing decisions (pure parts, on CPU) and, on a GPU, a real timed verdict."""

from pathlib import Path

import pytest
import torch

from autotune.config import compose
from autotune.records import ProfiledShape
from autotune.sandbox import SandboxResult
from autotune.targets import get
from autotune.verify import verify
from autotune.verify.bench import activations, percentile
from autotune.verify.timing import (
    Timed,
    _failure,
    conclude,
    decide,
    peak_bandwidth_gbps,
    shape_timing,
    timing_shapes,
    weighted_geomean,
)
from autotune.verify.verdict import Status, Verdict

RMS = get("rms_norm")
CFG = compose([]).verify


def test_peak_bandwidth_lookup_prefers_the_longest_match_and_the_override():
    assert peak_bandwidth_gbps("NVIDIA H200", None) == 4800
    assert peak_bandwidth_gbps("NVIDIA H100 80GB HBM3 SXM", None) == 3350
    assert peak_bandwidth_gbps("NVIDIA H100 PCIe", None) == 2000
    assert peak_bandwidth_gbps("NVIDIA A100-SXM4-80GB", None) == 2039
    assert peak_bandwidth_gbps("NVIDIA L4", None) == 300
    assert peak_bandwidth_gbps("Some Future GPU", None) is None
    assert peak_bandwidth_gbps("NVIDIA L4", 123) == 123.0


def test_geomean_is_weighted_by_calls():
    assert weighted_geomean([2.0, 0.5], [1, 1]) == pytest.approx(1.0)
    assert weighted_geomean([2.0, 0.5], [3, 1]) == pytest.approx(2 ** 0.5)
    assert weighted_geomean([4.0], [0]) == pytest.approx(4.0)


def timing(us: float, eager: float = 20.0, compiled: float = 10.0, peak: float | None = 3350.0, shape=(64, 4096)):
    return shape_timing(RMS, shape, "bfloat16", 10, {"median_us": us, "spread_us": 0.1},
                        {"eager": {"median_us": eager}, "compile": {"median_us": compiled}}, peak)


def test_speedup_is_against_the_best_baseline_with_the_bandwidth_floor():
    t = timing(5.0)
    assert t.speedup == pytest.approx(2.0)  # torch.compile's 10 us is the best baseline
    floor = RMS.bytes_moved((64, 4096), torch.bfloat16) / 3350e3
    assert t.floor_us == pytest.approx(floor) and not t.implausible
    assert t.pct_of_floor == pytest.approx(100 * floor / 5.0)


def test_decision_accepts_only_beyond_the_noise_margin_and_never_the_implausible():
    v = Verdict(status=Status.UNMEASURED, reason="", target="rms_norm", candidate="k.py")
    assert decide([timing(9.0)], 0.03, v)[0] is Status.ACCEPTED and v.speedup_geomean == pytest.approx(10 / 9)
    assert decide([timing(9.8)], 0.03, v)[0] is Status.SLOWER  # 2% faster: inside the noise margin
    assert decide([timing(12.0)], 0.03, v)[0] is Status.SLOWER
    status, reason = decide([timing(9.0), timing(0.05)], 0.03, v)
    assert status is Status.INCORRECT and "below the roofline floor" in reason


def test_timing_shapes_come_from_the_profile_or_the_defaults_in_bf16():
    assert timing_shapes(RMS, [((8, 4096), "float16", 7)], CFG) == [ProfiledShape((8, 4096), "float16", 7)]
    assert timing_shapes(RMS, None, CFG) == [ProfiledShape(tuple(s), "bfloat16", 1) for s in RMS.default_shapes]


def test_bench_helpers():
    x, res, w = torch.randn(4, 8), torch.randn(4, 8), torch.randn(8)
    assert activations([x, res, w, 1e-5]) == [0, 1]
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 0.5) == 3.0
    assert percentile([1.0, 2.0], 0.8) == pytest.approx(1.8)


def bench_run(result=None, ok=True, timed_out=False, error="") -> SandboxResult:
    return SandboxResult(ok=ok, returncode=0 if ok else 1, signal=None, timed_out=timed_out, result=result,
                         stderr_tail="", isolation={}, duration_s=1.0, error=error)


def test_what_a_bench_process_that_did_not_finish_means():
    assert _failure(bench_run({"shapes": []}), "candidate") is None
    assert _failure(bench_run(ok=False, timed_out=True), "candidate") == (
        Status.TIMEOUT, "timing the candidate took longer than the limit")
    assert _failure(bench_run({"error": "no cuda device visible"}), "baselines") == (  # not the candidate's fault
        Status.UNMEASURED, "correct; timing: not measured (no cuda device visible)")
    failed = bench_run({"failed": "Traceback ...\nDenied: not allowed in the sandbox: reading autotune.accel"})
    assert _failure(failed, "candidate") == (
        Status.RUNTIME_ERROR, "timing the candidate failed: “Denied: not allowed in the sandbox: reading autotune.accel”")


def test_a_protocol_that_could_not_finish_gives_its_failure():
    v = Verdict(status=Status.UNMEASURED, reason="", target="rms_norm", candidate="k.py")
    timed = Timed(device="NVIDIA H100 80GB HBM3", stand_in=False, failure=(Status.RUNTIME_ERROR, "timing failed"))
    assert conclude(timed, CFG, v) == (Status.RUNTIME_ERROR, "timing failed") and not v.measured and not v.timings
    assert timed.to_dict()["failure"] == ["runtime_error", "timing failed"]


def test_liger_counts_in_the_best_baseline_on_a_gpu_and_the_verdict_says_so():
    base = {"eager": {"median_us": 20.0}, "compile": {"median_us": 10.0}, "liger": {"median_us": 8.0}}
    t = shape_timing(RMS, (64, 4096), "bfloat16", 10, {"median_us": 9.0, "spread_us": 0.1}, base, None)
    assert t.speedup == pytest.approx(8 / 9) and t.eager_us == 20.0 and t.compile_us == 10.0
    v = Verdict(status=Status.UNMEASURED, reason="", target="rms_norm", candidate="k.py")
    timed = Timed(device="Some Future GPU", stand_in=False, timings=(t,), baselines=(base,), peak_bandwidth_gbps=None)
    status, reason = conclude(timed, CFG, v)
    assert status is Status.SLOWER and "0.889x the best baseline" in reason and v.measured and v.timings == [t]
    assert "Liger-Kernel baseline (counted in the best baseline): 8.00 us at [64, 4096] bfloat16" in v.notes
    assert "no bandwidth floor: unknown peak bandwidth for Some Future GPU (set verify.peak_bandwidth_gbps)" in v.notes


def test_no_baseline_time_leaves_a_correct_kernel_unmeasured():
    t = shape_timing(RMS, (64, 4096), "bfloat16", 1, {"median_us": 9.0, "spread_us": 0.1}, {}, None)
    v = Verdict(status=Status.UNMEASURED, reason="", target="rms_norm", candidate="k.py")
    assert decide([t], 0.03, v) == (Status.UNMEASURED, "correct; no baseline time to compare with")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_correct_kernel_is_timed_against_both_baselines_on_a_gpu():
    v = verify("rms_norm", Path(__file__).parent / "candidates" / "rms_norm_rowwise.py", compose(["device=cuda"]))
    assert v.status in (Status.ACCEPTED, Status.SLOWER), v.reason
    assert v.measured and v.timings and v.speedup_geomean is not None
    assert all(t.eager_us and t.compile_us and t.candidate_us > 0 and not t.implausible for t in v.timings)
