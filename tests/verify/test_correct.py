"""Correct kernels must pass: `unmeasured` on CPU (correct; timing needs a GPU), every case passing."""

from pathlib import Path

import pytest

from autotune.config import compose
from autotune.verify import verify
from autotune.verify.verdict import Status

CANDIDATES = Path(__file__).parent / "candidates"
CORRECT = [
    ("rms_norm", "rms_norm_rowwise.py"),  # one row per program
    ("rms_norm", "rms_norm_chunked.py"),  # loops over wide rows in blocks of 1024
    ("rms_norm", "rms_norm_autotuned.py"),  # @triton.autotune: on CPU the configs take turns
    ("silu_and_mul", "silu_and_mul.py"),
    ("fused_add_rms_norm", "fused_add_rms_norm.py"),  # two outputs, each compared
    ("rotary_embedding", "rotary_embedding.py"),
    ("softmax", "softmax.py"),  # -inf masked rows
]


@pytest.mark.parametrize("target, name", CORRECT, ids=[c[1] for c in CORRECT])
def test_correct_kernels_are_unmeasured_on_cpu(target, name):
    v = verify(target, CANDIDATES / name, compose([]))
    assert v.status is Status.UNMEASURED, v.reason
    assert v.passed and v.reason.endswith("timing: not measured (no GPU)")
    assert v.cases and all(c.passed for c in v.cases)
    assert sum(c.evidence for c in v.cases) >= len(v.cases) // 2
    assert {c.dtype for c in v.cases} == {"float32", "bfloat16", "float16"}
    assert {c.kind for c in v.cases} == {"normal", "large", "special"}
    assert v.timings == [] and not v.measured
    assert {"rlimits", "network", "filesystem", "user", "environment", "timeout_s"} <= set(v.sandbox)
    assert v.environment["device"] == "cpu" and v.candidate_sha256
