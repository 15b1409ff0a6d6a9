"""The targets where serving time goes (attention, GEMMs): each target's own cheats and bugs are rejected for the
right reason.

Their correct example kernels (autotune/targets/examples/) pass the checker's default plan in
tests/verify/test_correct.py, as every target's do, and so does the search agent's first configuration
(tests/agent/test_search.py). Here the checker runs with fewer cases than its defaults (one seed; shapes cut
to 64 rows and 65,536 elements on the CPU) so that each cheat takes seconds under the Triton interpreter.
"""

from pathlib import Path

import pytest

from autotune.config import compose
from autotune.verify import verify
from autotune.verify.verdict import Status
from tests.verify.reasons import WRONG_VALUES, says

CANDIDATES = Path(__file__).parent / "candidates"
SMALL = compose(["device=cpu", "verify.shapes=default", "verify.seeds=1", "verify.max_interpreter_rows=64",
                 "verify.max_interpreter_elements=65536"]).verify

# named CASES, as in test_adversarial.py: `autotune selfcheck` reads this table and checks these files on a GPU too
CASES = [
    ("int8_linear", "int8_linear_no_scale.py", Status.INCORRECT, WRONG_VALUES),
    # a float copy of the whole weight per call: the int8 kernel's point (1 byte per weight read) is gone
    ("int8_linear", "int8_linear_torch_dequant.py", Status.POLICY_VIOLATION, "converts a dtype with `.to(...)`"),
    # the fusion's quantizer: truncation, int8's full range, and skipping the unfused sequence's rounding of y to
    # the activations' dtype (caught in bf16/fp16 only: in fp32 that rounding is the identity)
    ("fused_add_rms_norm_quant", "fused_quant_truncates.py", Status.INCORRECT, "integers off by one, more than"),
    ("fused_add_rms_norm_quant", "fused_quant_scale_128.py", Status.INCORRECT,
     ("integers off by one, more than", "less accurate than the reference")),  # the int8 values, or the scale itself
    ("fused_add_rms_norm_quant", "fused_quant_unrounded_y.py", Status.INCORRECT, "bfloat16"),
]


@pytest.mark.parametrize("target, name, status, fragment", CASES, ids=[c[1] for c in CASES])
def test_cheat_is_rejected_for_its_failure(target, name, status, fragment):
    v = verify(target, CANDIDATES / name, SMALL)
    assert v.status is status, v.reason
    assert says(v.reason, fragment), v.reason
