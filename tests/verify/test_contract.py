"""Kernels that are right only on the inputs the checker used to show: each must now come back incorrect.

They were all accepted before this plan: every case passed eps=1e-5, dense inputs at an offset inside
the guard band, 2-D shapes, widths above 1024 that were multiples of 1024 and row counts of 32 or more
that were multiples of 32, and reuse of output buffers was checked within one case only. The runs use
fp32 and one seed (the failure does not depend on the dtype), so each stops after a few seconds.
"""

import hashlib
import math
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from autotune.config import compose
from autotune.targets import get
from autotune.targets.base import dtype_name
from autotune.verify import cases as cases_module
from autotune.verify import worker
from autotune.verify.cases import make_data, plan
from autotune.verify.compare import judge_case
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
    ("rms_norm", "output_ring.py", "shares memory with another output", None),
    ("rotary_embedding", "contiguous_rope.py", "qkv_", None),
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


def test_a_vllm_style_in_place_kernel_passes_its_declared_contract():
    v = judge(INPLACE, (CANDIDATES / "inplace_residual.py").read_text(), "inplace_residual.py", CFG)
    assert v.status is Status.UNMEASURED, v.reason
    assert all(c.passed for c in v.cases)


def _old_generator(target, shape, dtype, kind, seed, salt):
    """The derivation before the salt: public facts only (what predict_inputs.py rebuilds)."""
    text = f"{target.name}|{list(shape)}|{dtype_name(dtype)}|{kind}|{seed}".encode()
    return torch.Generator().manual_seed(int.from_bytes(hashlib.sha256(text).digest()[:8], "little"))


IN_PROCESS_SALT_TEST = "test_a_file_that_rebuilds_the_inputs_is_right_only_without_the_salt"


def test_the_in_process_salt_test_runs_in_a_fresh_interpreter():
    """The test below runs kernels in the test's own process, which needs TRITON_INTERPRET=1 before triton is
    imported (and imports the worker, which patches Triton for the run): it gets a Python of its own."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                          f"{__file__}::{IN_PROCESS_SALT_TEST}"], capture_output=True, text=True, env=env,
                         cwd=Path(__file__).resolve().parents[2], timeout=600)
    assert run.returncode == 0 and "1 passed" in run.stdout, run.stdout[-3000:] + run.stderr[-3000:]


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                    reason="runs kernels in this process: needs TRITON_INTERPRET=1 set before triton is imported "
                           "(test_the_in_process_salt_test_runs_in_a_fresh_interpreter runs it so)")
def test_a_file_that_rebuilds_the_inputs_is_right_only_without_the_salt(monkeypatch, tmp_path):
    """Run in this process (the same worker code, no sandbox) on the first default and edge cases: with the
    old public seeds its table answers every one; with the run's secret salt it answers none."""
    target, salt = get("rms_norm"), secrets.token_bytes(16)
    cases = [c for c in plan(target, None, compose([]).verify, False, salt) if c.source in ("default", "edge")][:6]
    fn = worker.load((CANDIDATES / "predict_inputs.py").read_text(), "rms_norm", tmp_path)
    monkeypatch.setattr(torch.utils.deterministic, "fill_uninitialized_memory", True)
    torch._C._set_deterministic_algorithms(True)  # unwritten outputs read as NaN, as in the worker

    def results():
        out = []
        for c in cases:
            data = make_data(target, c, salt)
            frame = worker.run_case(fn, {"index": c.index, "args": list(data.args), "repeat": c.repeat,
                                         "front_guard": c.front_guard, "refill_args": data.refill_args}, "cpu")
            out.append(judge_case(target, c, data, frame, target.tolerances[c.dtype])[0])
        return out

    try:
        with monkeypatch.context() as old:
            old.setattr(cases_module, "generator", _old_generator)
            assert all(r.passed for r in results()), [r.note for r in results() if not r.passed]
        salted = results()
    finally:
        torch._C._set_deterministic_algorithms(False)
    counted = [r for r in salted if r.evidence]  # (a one-row NaN case has an all-NaN answer: not evidence)
    assert len(counted) >= 4 and not any(r.passed for r in counted)
    assert "NaN at" in counted[0].note  # no stored input matched: the rows were never written


def test_a_file_that_rebuilds_the_inputs_is_incorrect():
    """The whole judge, static scan off (it already refuses the file's torch calls at import)."""
    v = judge(get("rms_norm"), (CANDIDATES / "predict_inputs.py").read_text(), "predict_inputs.py", CFG, scan=False)
    # incorrect here; where the worker also records aten ops at import, that finds it first (policy_violation)
    assert v.status in (Status.INCORRECT, Status.POLICY_VIOLATION), v.reason
    assert not v.passed
