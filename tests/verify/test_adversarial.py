"""Candidates that cheat or break: each must get the right non-passing status, for the right reason.

Most stop at the first case (the judge kills the worker on the first failure), so each costs a worker
start-up (~3-5 s on 2 cores). The second half runs some of them with the static scan off, to show that
the deeper defence (the sandbox, the parent-side comparison, the run-time op record) holds on its own.
"""

import os
from pathlib import Path

import pytest

from autotune.config import compose
from autotune.targets import get
from autotune.verify import verify
from autotune.verify.judge import judge
from autotune.verify.verdict import Status
from tests.verify.reasons import WRONG_VALUES, says

CANDIDATES = Path(__file__).parent / "candidates"
CFG = compose([]).verify

CASES = [
    ("torch_fallback.py", Status.POLICY_VIOLATION, "torch.rsqrt"),
    ("operator_fallback.py", Status.POLICY_VIOLATION, "torch math at run time"),
    ("mutate_input.py", Status.INCORRECT, "modified its input `x`"),
    ("pointer_cache.py", Status.POLICY_VIOLATION, "no state survives a call"),  # a module-level dict it fills
    ("no_mask.py", Status.INCORRECT, WRONG_VALUES),  # a drawn width or padded rows, before [7, 1000]
    ("too_few_programs.py", Status.INCORRECT, WRONG_VALUES),
    ("wrong_dtype.py", Status.INCORRECT, "output dtype float32 where the reference has bfloat16"),
    ("swallow_nan.py", Status.INCORRECT, WRONG_VALUES),
    ("patch_compare.py", Status.POLICY_VIOLATION, "assigns to `torch.testing.assert_close`"),
    ("gc_hunt.py", Status.POLICY_VIOLATION, "imports `gc`"),
    ("kill_self.py", Status.POLICY_VIOLATION, "imports `os`"),
    ("segfault.py", Status.INCORRECT, "outside every tensor argument of its launch"),  # once a SIGSEGV
    ("syntax_error.py", Status.COMPILE_ERROR, "does not parse: expected ':' (line 6)"),
    ("no_entry.py", Status.POLICY_VIOLATION, "no entry function"),
    ("read_secret.py", Status.POLICY_VIOLATION, "imports `os`"),
    ("no_launch.py", Status.POLICY_VIOLATION, "no Triton kernel ran"),
    ("import_error.py", Status.COMPILE_ERROR, "NameError: name 'DEFAULT_BLOCK_SIZE' is not defined” (candidate line 7)"),
    ("kernel_typo.py", Status.COMPILE_ERROR, "has no attribute 'lod'"),
    # the second config normalises over 64 columns only (the rest hold what the tuning's run of the first wrote there,
    # as a GPU's benchmark runs would have): which of its wrong values shows first depends on the drawn turn
    ("autotuned_bad_config.py", Status.INCORRECT, WRONG_VALUES),
    ("oob_store.py", Status.INCORRECT, "wrote outside its input `x`"),
]


@pytest.mark.parametrize("name, status, fragment", CASES, ids=[c[0] for c in CASES])
def test_cheats_and_bugs_get_the_right_status(name, status, fragment):
    v = verify("rms_norm", CANDIDATES / name, CFG)
    assert v.status is status, v.reason
    assert says(v.reason + " ".join(v.policy), fragment), v.reason
    assert not v.passed


def test_fp16_accumulation_is_caught():
    v = verify("rms_norm", CANDIDATES / "half_accumulator.py", compose(["verify.dtypes=[float16]"]).verify)
    assert v.status is Status.INCORRECT
    # once caught only on large inputs; the small-magnitude rows (eps variants) now catch it on realistic ones
    assert "float16" in v.reason and says(v.reason, WRONG_VALUES), v.reason


def test_a_hang_is_a_timeout_naming_the_case():
    v = verify("rms_norm", CANDIDATES / "hang.py", compose(["verify.timeout_s=4"]).verify)
    assert v.status is Status.TIMEOUT
    assert "no case finished within verify.timeout_s=4 s (killed while " in v.reason  # importing, or a case


def test_a_write_outside_the_private_directory_is_stopped_twice(tmp_path):
    marker = tmp_path / "written-by-candidate.txt"
    source = (CANDIDATES / "write_outside.py").read_text().replace("/nonexistent/autotune-test-marker", str(marker))
    v = verify("rms_norm", source, CFG)
    assert v.status is Status.POLICY_VIOLATION and "`open`" in v.reason
    if os.geteuid() != 0:
        pytest.skip("without root the sandbox has no private file system to show")
    deep = judge(get("rms_norm"), source, "write_outside.py", CFG, scan=False)
    assert deep.status is Status.POLICY_VIOLATION, deep.reason  # the worker's audit hook denies the open()
    assert "not allowed in the sandbox: “open" in deep.reason
    assert not marker.exists()


# The same attacks with the static scan off: what stops them then (tests/verify/test_runtime_defence.py has more).
DEEP = [
    # torch's modules are frozen in the worker (and the comparison runs in the judge's process anyway)
    ("patch_compare.py", Status.POLICY_VIOLATION, "not allowed in the sandbox: “replacing torch.testing.assert_close”"),
    ("gc_hunt.py", Status.POLICY_VIOLATION, "not allowed in the sandbox: “gc.get_objects”"),  # the audit hook
    ("reference_spy.py", Status.INCORRECT, WRONG_VALUES),  # no judge module in the worker (else: runtime_error)
    ("kill_self.py", Status.POLICY_VIOLATION, "not allowed in the sandbox: “os.kill”"),
    ("torch_fallback.py", Status.POLICY_VIOLATION, "aten.rsqrt"),  # the run-time op record
]


@pytest.mark.parametrize("name, status, fragment", DEEP, ids=[c[0] for c in DEEP])
def test_deeper_defences_hold_without_the_scan(name, status, fragment):
    v = judge(get("rms_norm"), (CANDIDATES / name).read_text(), name, CFG, scan=False)
    assert v.status is status, v.reason
    assert says(v.reason, fragment), v.reason


def test_the_worker_never_sees_the_parents_secrets(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret-for-the-worker")
    v = judge(get("rms_norm"), (CANDIDATES / "read_secret.py").read_text(), "read_secret.py", CFG, scan=False)
    assert v.status is Status.INCORRECT, v.reason  # compile_error "read the API key" if the key leaked
    assert "OPENAI_API_KEY" not in v.sandbox["environment"]
