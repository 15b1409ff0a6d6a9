"""fused_moe and paged_attention: each target's own cheats and bugs are rejected for the right reason.

Their correct example kernels pass the checker's quick plan in tests/verify/test_correct.py and the search
agent's first configurations the quick plan in tests/agent/test_search.py, as every target's do. Here the checker
runs the quick plan (one seed, 64 rows: every dtype, kind and width, the experts, top-k, block size, kv heads and
the 8192-long context uncut), and a cheat stops at the first case it fails.
"""

from pathlib import Path

import pytest

from autotune.config import compose
from autotune.verify import verify
from autotune.verify.verdict import Status
from tests.verify.reasons import WRONG_VALUES, says

CANDIDATES = Path(__file__).parent / "candidates"
QUICK = compose(["device=cpu", "verify.shapes=default", "verify=quick"]).verify

# named CASES, as in test_adversarial.py: `autotune selfcheck` reads this table and checks these files on a GPU too
CASES = [
    # ids modulo 64: right for Mixtral's 8 and the tiny preset's 16 experts, wrong for Qwen3-30B-A3B's 128
    ("fused_moe", "fused_moe_expert_mod_64.py", Status.INCORRECT, WRONG_VALUES),
    ("fused_moe", "fused_moe_first_slot.py", Status.INCORRECT, WRONG_VALUES),
    ("fused_moe", "fused_moe_ignores_weights.py", Status.INCORRECT, WRONG_VALUES),
    ("fused_moe", "fused_moe_weights_twice.py", Status.INCORRECT, WRONG_VALUES),
    ("fused_moe", "fused_moe_renormalises.py", Status.INCORRECT, WRONG_VALUES),
    # capacity factor 2: the hot expert (about 3/4 of the tokens) overflows it
    ("fused_moe", "fused_moe_capacity.py", Status.INCORRECT, WRONG_VALUES),
    # reads the pool's blocks in order, not the table's: other sequences' values, blocks nobody wrote (NaN), or, in
    # the cache views autotune's vLLM plugin hands over (a half of one tensor), past the view's end
    ("paged_attention", "paged_attention_blocks_in_order.py", Status.INCORRECT,
     (*WRONG_VALUES, "outside every tensor argument of its launch")),
    ("paged_attention", "paged_attention_no_window.py", Status.INCORRECT, WRONG_VALUES),
    ("paged_attention", "paged_attention_kv_head_mod_4.py", Status.INCORRECT, WRONG_VALUES),
    ("paged_attention", "paged_attention_whole_blocks.py", Status.INCORRECT, WRONG_VALUES),
    # interleaved GQA groups (h % kv_heads): right for MHA and MQA only
    ("paged_attention", "paged_attention_gqa_mixup.py", Status.INCORRECT, WRONG_VALUES),
    # exp without the max: logits near 1e4 (the "large" inputs) overflow
    ("paged_attention", "paged_attention_no_max.py", Status.INCORRECT, WRONG_VALUES),
    # a prefill chunk's rows see the chunk's later keys: right for every decode
    ("paged_attention", "paged_attention_noncausal.py", Status.INCORRECT, WRONG_VALUES),
]


@pytest.mark.parametrize("target, name, status, fragment", CASES, ids=[c[1] for c in CASES])
def test_cheat_is_rejected_for_its_failure(target, name, status, fragment):
    v = verify(target, CANDIDATES / name, QUICK)
    assert v.status is status, v.reason
    assert says(v.reason, fragment), v.reason
