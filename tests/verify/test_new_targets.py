"""The targets where serving time goes (attention, GEMMs, a fusion): a correct kernel passes, and each
target's own cheats and bugs are rejected for the right reason.

The checker runs with fewer cases than its defaults (one seed; shapes cut to 64 rows and 65,536 elements
on the CPU) so that each correct kernel takes seconds under the Triton interpreter; the default plan for
these kernels is exercised by `tests/agent/test_search.py` (the search agent's first configuration).
"""

from pathlib import Path

import pytest

from autotune.config import compose
from autotune.verify import verify
from autotune.verify.verdict import Status

CANDIDATES = Path(__file__).parent / "candidates"
SMALL = compose(["device=cpu", "verify.shapes=default", "verify.seeds=1", "verify.max_interpreter_rows=64",
                 "verify.max_interpreter_elements=65536"]).verify

CORRECT = [
    ("decode_attention", "decode_attention.py"),  # one program per (sequence, query head), no tl.dot
    ("prefill_attention", "prefill_attention.py"),  # 16 query rows per program, broadcast sums, no tl.dot
    ("linear", "linear.py"),  # 16 x 32 tiles, fp32 tl.dot
    ("int8_linear", "int8_linear.py"),  # the same tiles, int8 weights converted in registers
]

CHEATS = [
    # attends to every cache position below the longest context: shorter sequences read stale entries
    ("decode_attention", "decode_attention_whole_cache.py", Status.INCORRECT, "values differ"),
    ("decode_attention", "decode_attention_gqa_mixup.py", Status.INCORRECT, "values differ"),
    # exp without the max: logits near 1e4 (the "large" inputs) overflow
    ("decode_attention", "decode_attention_no_max.py", Status.INCORRECT, "large seed 0: NaN at"),
    ("prefill_attention", "prefill_attention_noncausal.py", Status.INCORRECT, "values differ"),
    ("int8_linear", "int8_linear_no_scale.py", Status.INCORRECT, "values differ"),
    # a float copy of the whole weight per call: the int8 kernel's point (1 byte per weight read) is gone
    ("int8_linear", "int8_linear_torch_dequant.py", Status.POLICY_VIOLATION, "converts a dtype with `.to(...)`"),
]


@pytest.mark.parametrize("target, name", CORRECT, ids=[c[1] for c in CORRECT])
def test_correct_kernel_passes(target, name):
    v = verify(target, CANDIDATES / name, SMALL)
    assert v.status is Status.UNMEASURED, v.reason
    assert v.cases and all(c.passed for c in v.cases)
    assert {c.dtype for c in v.cases} == {"float32", "bfloat16", "float16"}
    assert {c.kind for c in v.cases} == {"normal", "large", "special"}
    assert sum(c.evidence for c in v.cases) >= len(v.cases) // 2


@pytest.mark.parametrize("target, name, status, fragment", CHEATS, ids=[c[1] for c in CHEATS])
def test_cheat_is_rejected_for_its_failure(target, name, status, fragment):
    v = verify(target, CANDIDATES / name, SMALL)
    assert v.status is status, v.reason
    assert fragment in v.reason, v.reason
