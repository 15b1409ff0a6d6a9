"""The timing protocol end to end on a fake clock: bench.time_function's rounds, medians, empty-window
subtraction and samples, fed into the decision, without a GPU. The fake clock (the CPU device layer with its
timed window replaced) says how long each call "took"; everything after it (medians, speedups, floors,
statuses) is the real code."""

import pytest
import torch

from autotune.accel.cpu import Cpu
from autotune.targets import get
from autotune.verify import bench
from autotune.verify.timing import decide, shape_timing
from autotune.verify.verdict import Status, Verdict

RMS = get("rms_norm")
SHAPE = (8, 1024)
TIMING = {"warmup_ms": 0.01, "rep_ms": 0.5, "repetitions": 3}
EMPTY_US = 4.0  # what an empty synchronize-only window costs on the fake clock


class FakeClock(Cpu):
    """Every call of a function takes call_us (+ the empty window); the pointers of each call's arguments kept."""

    def __init__(self, call_us: float):
        self.call_us, self.seen = call_us, []

    def timed(self, fn, args):
        if fn is None:
            return EMPTY_US, None
        self.seen.append([a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args])
        return EMPTY_US + self.call_us, fn(*args)


def measure(fn, call_us: float) -> dict:
    gen = torch.Generator().manual_seed(0)
    sets = [list(RMS.make_inputs(SHAPE, torch.bfloat16, gen, "normal")) for _ in range(bench.SETS)]
    return bench.time_function(fn, sets, TIMING, torch.empty(1024, dtype=torch.int8), gen, FakeClock(call_us))


def verdict_for(candidate_us: float, baseline_us: float, peak_gbps: float = 4800.0):
    cand = measure(RMS.reference, candidate_us)
    base = {"eager": measure(RMS.reference, baseline_us)}
    t = shape_timing(RMS, SHAPE, "bfloat16", 1, cand, base, peak_gbps)
    v = Verdict(status=Status.UNMEASURED, reason="", target="rms_norm", candidate="k.py")
    return t, decide([t], 0.03, v)


def test_the_empty_window_is_subtracted_and_the_last_calls_are_sampled():
    r = measure(RMS.reference, 10.0)
    assert r["median_us"] == pytest.approx(10.0) and r["empty_us"] == pytest.approx(EMPTY_US)
    assert len(r["rounds_us"]) == 3 and r["spread_us"] == pytest.approx(0.0)
    assert r["calls_per_round"] == int(500 / (10.0 + EMPTY_US))  # rep_ms over the estimate (window included)
    assert len(r["samples"]) == bench.SAMPLES and all(s["outputs"][0].shape == SHAPE for s in r["samples"])


def test_inputs_rotate_over_the_live_sets():
    gen = torch.Generator().manual_seed(0)
    sets = [list(RMS.make_inputs(SHAPE, torch.bfloat16, gen, "normal")) for _ in range(bench.SETS)]
    clock = FakeClock(10.0)
    bench.time_function(RMS.reference, sets, TIMING, torch.empty(8, dtype=torch.int8), gen, clock)
    assert len({call[0] for call in clock.seen}) == bench.SETS  # the activations' pointers differ between calls


def test_a_faster_kernel_is_accepted():
    t, (status, reason) = verdict_for(candidate_us=10.0, baseline_us=15.0)
    assert status is Status.ACCEPTED and t.speedup == pytest.approx(1.5), reason


def test_a_slowed_kernel_is_slower():
    t, (status, reason) = verdict_for(candidate_us=80.0, baseline_us=10.0)
    assert status is Status.SLOWER and t.speedup == pytest.approx(0.125), reason


def test_a_time_below_the_bandwidth_floor_is_implausible():
    floor_us = RMS.bytes_moved(SHAPE, torch.bfloat16) / 4800e3
    t, (status, reason) = verdict_for(candidate_us=floor_us / 2, baseline_us=10.0)
    assert t.implausible and status is Status.INCORRECT and "below the roofline floor" in reason
