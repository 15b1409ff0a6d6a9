"""Issue 16's classes 1, 2, 4 and 5 (class 3 and 6: test_gpu_semantics.py, test_tensor_core_candidates.py): a kernel
that is right on the CPU plan's old, shrunken cases and wrong where the served model takes it. Each candidate is
one fault in a correct kernel; each must be rejected with the status and a reason that names what went wrong.

They run in fp32 only (the faults do not depend on the dtype) on the quick plan with two programs per range case.
"""

from pathlib import Path

import pytest

from autotune.config import compose
from autotune.targets import get
from autotune.verify.judge import judge
from autotune.verify.verdict import Status

CANDIDATES = Path(__file__).parent / "candidates"
CFG = compose(["verify=quick", "verify.dtypes=[float32]", "verify.range_programs=2"]).verify

CASES = [
    # class 1: the range of a dim the kernel indexes, whole in a range case (a sample of the programs run)
    ("paged_attention", "paged_attention_context_4096.py", Status.INCORRECT, ", 819"),  # 8190 or 8192 keys
    ("linear", "linear_large_m.py", Status.INCORRECT, "[2048,"),
    ("rms_norm", "rms_norm_persistent.py", Status.INCORRECT, "case [2048,"),  # rows a persistent grid loops over
    ("rms_norm", "rms_norm_persistent_floor.py", Status.INCORRECT, "case [2048,"),  # rows no program writes
    ("rms_norm", "rms_norm_numel_branch.py", Status.INCORRECT, "programs sampled"),  # a branch on rows x width
    # class 2: a launch only served sizes make, seen by the dry call at that size: the cheapest probe that makes it
    # too (here the served rows, the width being whole already) runs it, sampled
    ("rms_norm", "rms_norm_served_rows.py", Status.INCORRECT, "case [2048, 4096] float32"),
    ("rms_norm", "rms_norm_pruned_config.py", Status.INCORRECT, "case [2048, 4096] float32"),  # a config no list holds
    # ... and one served combination of sizes (Llama 3.2 1B's group of 4 with head_dim 64): a case at that shape
    ("paged_attention", "paged_attention_group_dim_combo.py", Status.INCORRECT, ", 32, 8, 64, "),
    # class 4: a computed check decides
    ("rms_norm", "dither_by_address.py", Status.INCORRECT, "on the same inputs"),  # a repeat, or the long run
    # inputs as engines serve them: attention's scores masked at a row's head (left padding, a window's start), not
    # only its tail (a round-15 attacker's online softmax)
    ("softmax", "softmax_online_masked_chunk.py", Status.INCORRECT, "NaN at"),
]


# rms_norm_persistent_floor.py leaves rows unwritten: only a range case that runs every program compares them
SAMPLE = {"rms_norm_persistent_floor.py": compose(["verify=quick", "verify.dtypes=[float32]",
                                                   "verify.range_whole_work=8388608"]).verify}


@pytest.mark.parametrize("target, name, status, fragment", CASES, ids=[c[1] for c in CASES])
def test_right_on_a_shrunken_plan_is_not_enough(target, name, status, fragment):
    v = judge(get(target), (CANDIDATES / name).read_text(), name, SAMPLE.get(name, CFG))
    assert v.status is status, v.reason
    assert fragment in v.reason, v.reason


def test_a_counter_hidden_from_every_static_rule_shows_in_the_long_run_of_calls():
    """Class 5 with the scan off (it refuses the attribute store): the 2,049th call launches differently."""
    cfg = compose(["verify=quick", "verify.dtypes=[float32]", "verify.long_calls=2100"]).verify
    v = judge(get("rms_norm"), (CANDIDATES / "call_counter_hidden.py").read_text(), "counter", cfg, scan=False)
    assert v.status is Status.INCORRECT, v.reason
    assert "on the same inputs launched or returned differently" in v.reason and "state between calls" in v.reason
