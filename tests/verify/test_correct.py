"""Correct kernels must pass: `unmeasured` on CPU (correct; timing needs a GPU), every case passing."""

from pathlib import Path

import pytest

from autotune.config import compose
from autotune.targets import all_targets, get
from autotune.verify import verify
from autotune.verify.verdict import Status

CANDIDATES = Path(__file__).parent / "candidates"
# Every target's own example kernel (Target.example, autotune/targets/examples/) on the quick plan (conf/verify/
# quick.yaml: every dtype, kind, layout, width and served range; fewer rows), and rms_norm's on the default plan
# too, so that a correct kernel passes the plan users run; each example's default-plan judging time (10-60 s) is a
# README figure, from `autotune verify T autotune/targets/examples/T.py`, not a test's cost. Then other designs of
# one target on the quick plan.
CORRECT = [(t.name, t.example_path, "quick") for t in all_targets()] + [
    ("rms_norm", get("rms_norm").example_path, "default"),
    ("rms_norm", CANDIDATES / "rms_norm_rowwise.py", "quick"),  # one row per program
    ("rms_norm", CANDIDATES / "rms_norm_chunked.py", "quick"),  # loops over wide rows in blocks of 1024
    ("rms_norm", CANDIDATES / "rms_norm_autotuned.py", "quick"),  # @triton.autotune: on CPU the configs take turns
    ("rms_norm", CANDIDATES / "rms_norm_zeros_like.py", "quick"),  # a zero-filled output under sampled range cases
    ("silu_and_mul", CANDIDATES / "silu_and_mul_flat.py", "quick"),  # one flat grid, its block chosen by rows x width
]


@pytest.mark.parametrize("target, path, plan", CORRECT, ids=[f"{c[0]}:{c[1].name}:{c[2]}" for c in CORRECT])
def test_correct_kernels_are_unmeasured_on_cpu(target, path, plan):
    v = verify(target, path, compose([f"verify={plan}"]))
    assert v.status is Status.UNMEASURED, v.reason
    assert v.passed and v.reason.endswith("timing: not measured (no GPU)")
    assert v.cases and all(c.passed for c in v.cases)
    assert sum(c.evidence for c in v.cases) >= len(v.cases) // 2
    assert {c.dtype for c in v.cases} == {"float32", "bfloat16", "float16"}
    assert {c.kind for c in v.cases} == {"normal", "large", "special"}
    assert v.timings == [] and not v.measured
    assert {"rlimits", "network", "filesystem", "user", "environment", "timeout_s"} <= set(v.sandbox)
    assert v.environment["device"] == "cpu" and v.candidate_sha256
    beyond = get(target).beyond_domain  # what no plan runs is said, never implied covered (paged_attention's contexts)
    assert not beyond or any(n.startswith("served values no case runs") and beyond[0] in n for n in v.notes), v.notes
