"""The timing protocol end to end on the CPU device layer, through the same sandboxed processes a GPU run uses:
the candidate's bench process (the candidate imported as the checker's host imports it), the baselines' (eager,
torch.compile, Liger-Kernel where it has the op), the L2 flush, fresh inputs, warm-up, the statistics and the
re-check of the last calls' outputs. Every figure is labelled a CPU stand-in and none reaches a verdict as
speed. Small served shapes and few repetitions: each sandboxed process takes a few seconds."""

from pathlib import Path

import pytest

from autotune import accel
from autotune.config import compose
from autotune.targets import get
from autotune.verify.timing import STAND_IN_REASON, Timed, conclude, measure, protocol
from autotune.verify.verdict import Status, Verdict

RMS = get("rms_norm")
ROWWISE = (Path(__file__).parent / "candidates" / "rms_norm_rowwise.py").read_text()
SHAPES = [((4, 64), "float32", 3)]  # a served shape, as the profile gives it: (shape, dtype, calls)
CFG = compose(["verify.timing.warmup_ms=1", "verify.timing.rep_ms=1", "verify.timing.repetitions=2",
               "verify.baselines=[eager,compile,liger]"]).verify
CPU = accel.get("cpu")


def fresh_verdict() -> Verdict:
    return Verdict(status=Status.UNMEASURED, reason="", target="rms_norm", candidate="rms_norm_rowwise.py")


@pytest.fixture(scope="module")
def measured() -> tuple[Timed, Verdict, tuple[Status, str]]:
    """One call of `measure`, as the judge makes it on a GPU, here on the CPU layer: (what the protocol measured,
    the verdict it filled, the status and reason it returned)."""
    seen: list[Timed] = []
    verdict = fresh_verdict()
    result = measure(RMS, ROWWISE, SHAPES, CFG, verdict, accel=CPU, on_timed=seen.append)
    return seen[0], verdict, result


@pytest.fixture(scope="module")
def timed(measured) -> Timed:
    return measured[0]


def test_every_record_of_the_protocol_says_it_is_a_cpu_stand_in(timed):
    assert timed.failure is None and timed.device == "cpu (stand-in)" and timed.stand_in
    figures = [*timed.candidate, *(b for shape in timed.baselines for b in shape.values())]
    assert figures and all(f["device"] == "cpu (stand-in)" and f["stand_in"] is True for f in figures)


def test_the_statistics_come_from_rounds_of_timed_calls(timed):
    [cand] = timed.candidate
    assert len(cand["rounds_us"]) == 2 and cand["calls_per_round"] >= 20  # repetitions; the protocol's minimum
    assert cand["median_us"] == pytest.approx(sorted(cand["rounds_us"])[0] / 2 + sorted(cand["rounds_us"])[1] / 2)
    assert cand["spread_us"] >= 0 and cand["empty_us"] >= 0
    assert cand["median_us"] > cand["empty_us"]  # an interpreted launch costs more than an empty window
    [t] = timed.timings
    assert t.shape == [4, 64] and t.dtype == "float32" and t.calls == 3 and t.candidate_us == cand["median_us"]


def test_the_baselines_are_timed_in_their_own_process_or_named_as_absent(timed):
    [base] = timed.baselines
    assert {"eager", "compile"} <= set(base) and timed.compile_backend == "aot_eager"
    assert base["eager"]["median_us"] > 0 and base["compile"]["median_us"] > 0
    # Liger-Kernel has rms_norm: timed where it runs, else named with the reason (not installed, or its kernels
    # fail under the Triton interpreter: they call .to() on scalar arguments, which the interpreter passes as floats)
    assert ("liger" in base) != ("liger" in timed.absent)
    [t] = timed.timings
    assert t.eager_us == base["eager"]["median_us"] and t.compile_us == base["compile"]["median_us"]


def test_stand_in_figures_never_reach_a_verdict_as_speed(timed):
    verdict = fresh_verdict()
    status, reason = conclude(timed, CFG, verdict)
    assert status is Status.UNMEASURED and reason == STAND_IN_REASON
    assert verdict.timings == [] and not verdict.measured and verdict.speedup_geomean is None
    assert any("ran end to end on cpu (stand-in)" in n and "not a GPU's" in n for n in verdict.notes)
    assert any(n.startswith("baseline liger: not timed") for n in verdict.notes) == ("liger" in timed.absent)


def test_the_same_figures_from_a_gpu_would_decide(timed):
    """The decision the stand-in is kept from: the same record, labelled as a GPU's, is decided on speed."""
    on_gpu = Timed(**{**timed.__dict__, "device": "NVIDIA H100 80GB HBM3", "stand_in": False})
    verdict = fresh_verdict()
    status, _ = conclude(on_gpu, CFG, verdict)
    assert status in (Status.ACCEPTED, Status.SLOWER) and verdict.measured and verdict.timings


def test_measure_keeps_a_correct_candidate_unmeasured_on_the_cpu(measured):
    _, verdict, (status, reason) = measured
    assert (status, reason) == (Status.UNMEASURED, "correct; timing: not measured (CPU stand-in timings only)")
    assert verdict.timings == [] and not verdict.measured and verdict.speedup_geomean is None
    assert any("ran end to end on cpu (stand-in)" in n for n in verdict.notes)


def test_a_wrong_output_while_timed_is_caught_by_the_recheck():
    wrong = ROWWISE.replace("y = x * inv_rms * w", "y = x * inv_rms * w * 1.25")
    timed = protocol(RMS, wrong, SHAPES, CFG, CPU)
    assert timed.failure is not None and timed.failure[0] is Status.INCORRECT
    assert "an output produced while timing [4, 64] float32 is wrong" in timed.failure[1]
    assert timed.stand_in and timed.baselines == ()  # the baselines' process is not started for a wrong kernel


def test_a_candidate_cannot_reach_the_timer_it_shares_a_process_with():
    """The candidate runs in the process that times it: the timing code's modules are sealed before its import."""
    cheat = ROWWISE + ("\nimport autotune.accel.cpu as _clock\n"
                       "_clock.Cpu.timed = lambda self, fn, args: (0.001, fn(*args) if fn else None)\n")
    timed = protocol(RMS, cheat, SHAPES, CFG, CPU)
    assert timed.failure is not None and timed.failure[0] is Status.RUNTIME_ERROR
    assert "not allowed in the sandbox: reading autotune.accel" in timed.failure[1]


def test_a_library_without_the_op_or_not_installed_is_named_absent():
    from autotune.verify import bench

    assert bench._library("paged_attention") == "Liger-Kernel has no paged_attention op"
    fns, absent = bench._baselines({"target": "paged_attention", "baselines": ["eager", "liger", "tvm"]}, CPU)
    assert list(fns) == ["eager"]
    assert absent == {"liger": "Liger-Kernel has no paged_attention op",
                      "tvm": "unknown baseline (known: eager, compile, liger)"}
