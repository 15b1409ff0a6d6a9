"""Kernels that are right only on the inputs the checker used to show: each must now come back incorrect.

They were all accepted before this plan: every case passed eps=1e-5, dense inputs at an offset inside
the guard band, 2-D shapes, widths above 1024 that were multiples of 1024 and row counts of 32 or more
that were multiples of 32, and reuse of output buffers was checked within one case only. The runs use
fp32 and one seed (the failure does not depend on the dtype), so each stops after a few seconds.
"""

import math
from pathlib import Path

import pytest

from autotune.config import compose
from autotune.targets import get
from autotune.verify.judge import judge
from autotune.verify.verdict import Status
from tests.verify.inplace_target import TARGET as INPLACE

CANDIDATES = Path(__file__).parent / "candidates"
CFG = compose(["verify.dtypes=[float32]", "verify.seeds=1"]).verify

# what the failing case has that no case of the old plan had
THREE_D = lambda s: len(s) == 3  # noqa: E731
WIDTH_WITH_TAIL = lambda s: s[-1] > 1024 and s[-1] % 1024  # noqa: E731
ROWS_WITH_TAIL = lambda s: 32 < math.prod(s[:-1]) and math.prod(s[:-1]) % 32  # noqa: E731 - rows: all leading dims

CHEATS = [
    ("rms_norm", "hardcoded_eps.py", "eps=1e-06", None),
    ("rms_norm", "shape0_rows.py", "", THREE_D),
    ("rms_norm", "offset_branch.py", "offset0", None),
    ("rms_norm", "padded_rows.py", "padded", None),
    ("rms_norm", "block_table_2048.py", "2048]", None),
    ("rms_norm", "unmasked_tail_1024.py", "", WIDTH_WITH_TAIL),
    ("rms_norm", "row_mask_32.py", "", ROWS_WITH_TAIL),
    ("rotary_embedding", "contiguous_rope.py", " qkv", None),
    (INPLACE, "inplace_forgets.py", "in-place write to `residual` is wrong", None),
    (INPLACE, "inplace_writes_x.py", "modified its input `x`", None),
]


@pytest.mark.parametrize("target, name, fragment, lacked", CHEATS, ids=[c[1] for c in CHEATS])
def test_kernels_right_only_on_the_old_cases_are_incorrect(target, name, fragment, lacked):
    target = get(target) if isinstance(target, str) else target
    v = judge(target, (CANDIDATES / name).read_text(), name, CFG)
    assert v.status is Status.INCORRECT, v.reason
    assert fragment in v.reason
    assert lacked is None or lacked(v.failing_case().shape), v.reason
    assert v.inputs_salt and len(bytes.fromhex(v.inputs_salt)) == 16


def test_a_ring_of_kept_output_buffers_is_state_between_calls():
    """Right only while its module-level ring of buffers lasts: refused first by the host's check of its module's
    globals after every call (tests/verify/test_runtime_defence.py hides the ring from that check)."""
    v = judge(get("rms_norm"), (CANDIDATES / "output_ring.py").read_text(), "output_ring.py", CFG)
    assert v.status is Status.POLICY_VIOLATION, v.reason
    assert "no state survives a call" in v.reason and "`RING`" in v.reason


def test_a_vllm_style_in_place_kernel_passes_its_declared_contract():
    v = judge(INPLACE, (CANDIDATES / "inplace_residual.py").read_text(), "inplace_residual.py", CFG)
    assert v.status is Status.UNMEASURED, v.reason
    assert all(c.passed for c in v.cases)


def test_a_range_case_compares_what_its_sampled_programs_wrote_in_place():
    """At the served rows (2048) a range case runs 8 sampled rows: the right kernel passes (the rows it skipped
    still hold the input, where the reference has its result), one whose in-place write is wrong from row 256 on
    (past every ordinary case) fails there (all 8 sampled rows below 256: p = 8**-8)."""
    cfg = compose(["verify.dtypes=[float32]", "verify.seeds=1", "verify.range_programs=8",
                   "verify.range_whole_work=0"]).verify
    served = [((2048, 256), "float32", 1)]
    right = judge(INPLACE, (CANDIDATES / "inplace_residual.py").read_text(), "inplace_residual.py", cfg,
                  shapes=served)
    assert right.status is Status.UNMEASURED, right.reason
    assert any(c.source == "range" and c.shape == [2048, 256] and c.passed for c in right.cases)
    wrong = judge(INPLACE, (CANDIDATES / "inplace_late_rows.py").read_text(), "inplace_late_rows.py", cfg,
                  shapes=served)
    assert wrong.status is Status.INCORRECT, wrong.reason
    assert "case [2048, 256]" in wrong.reason and "in-place write to `residual` is wrong" in wrong.reason


def test_a_file_that_rebuilds_the_inputs_is_incorrect():
    """The whole judge, static scan off (it already refuses the file's torch calls at import). The file's stored
    answers are host tensors, which never reach the device process that runs its kernel: whatever it matched,
    the kernel would read NaN there."""
    v = judge(get("rms_norm"), (CANDIDATES / "predict_inputs.py").read_text(), "predict_inputs.py", CFG, scan=False)
    # incorrect here; where the worker also records aten ops at import, that finds it first (policy_violation)
    assert v.status in (Status.INCORRECT, Status.POLICY_VIOLATION), v.reason
    assert not v.passed
