"""Correct kernels must pass: `unmeasured` on CPU (correct; timing needs a GPU), every case passing."""

from pathlib import Path

import pytest

from autotune.config import compose
from autotune.targets import all_targets
from autotune.targets.base import OpClass
from autotune.verify import verify
from autotune.verify.verdict import Status

CANDIDATES = Path(__file__).parent / "candidates"
# Every target's own example kernel (Target.example, autotune/targets/examples/): the memory-bound ones on the
# default plan (each well under 30 s), the GEMM, attention and MoE ones on the quick plan (autotune/conf/verify/
# quick.yaml: every dtype, kind, layout, width and served range; fewer rows; their default-plan judging times, 30 s to
# 2 minutes each, are the README's figures, from `autotune verify T autotune/targets/examples/T.py`); then other
# designs of one target on the quick plan.
CORRECT = [(t.name, t.example_path, "default" if t.op_class is OpClass.MEMORY_BOUND else "quick")
           for t in all_targets()] + [
    ("rms_norm", CANDIDATES / "rms_norm_rowwise.py", "quick"),  # one row per program
    ("rms_norm", CANDIDATES / "rms_norm_chunked.py", "quick"),  # loops over wide rows in blocks of 1024
    ("rms_norm", CANDIDATES / "rms_norm_autotuned.py", "quick"),  # @triton.autotune: on CPU the configs take turns
    ("rms_norm", CANDIDATES / "rms_norm_zeros_like.py", "quick"),  # a zero-filled output under sampled range cases
    ("silu_and_mul", CANDIDATES / "silu_and_mul_flat.py", "quick"),  # one flat grid, its block chosen by rows x width
]


@pytest.mark.parametrize("target, path, plan", CORRECT, ids=[f"{c[0]}:{c[1].name}" for c in CORRECT])
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
