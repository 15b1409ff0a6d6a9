"""The judge's GPU plan (shapes whole, no range cases, no sampling, no dry calls) run end to end on the CPU
interpreter, through the real sandbox, on small served shapes: the plan a GPU run uses is tested without a GPU."""

from pathlib import Path

from autotune.config import compose
from autotune.targets import get
from autotune.verify.judge import judge
from autotune.verify.verdict import Status

EXAMPLES = Path(__file__).parents[2] / "autotune" / "targets" / "examples"
CANDIDATES = Path(__file__).parent / "candidates"
CFG = compose(["verify=quick", "verify.dtypes=[float32]"]).verify
SERVED = [((4, 256), "float32", 10)]


def test_the_gpu_plan_accepts_a_correct_kernel_on_the_interpreter():
    v = judge(get("rms_norm"), (EXAMPLES / "rms_norm.py").read_text(), "rms_norm.py", CFG, shapes=SERVED,
              device="cpu", whole=True)
    assert v.status is Status.UNMEASURED, v.reason
    assert v.cases and not any(c.source == "range" for c in v.cases)  # no range case, so nothing sampled
    assert [4, 256] in [c.shape for c in v.cases] and [1024, 64] in [c.shape for c in v.cases]  # nothing cut
    assert not any("cut for the CPU interpreter" in n for n in v.notes)


def test_the_gpu_plan_rejects_a_kernel_without_a_mask():
    v = judge(get("rms_norm"), (CANDIDATES / "no_mask.py").read_text(), "no_mask.py", CFG, shapes=SERVED,
              device="cpu", whole=True)
    assert v.status is Status.INCORRECT, v.reason
