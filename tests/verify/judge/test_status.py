"""Which failure wins (autotune/verify/judge/status.py): the first rule of the declared precedence that applies."""

import torch

from autotune.sandbox import Limits, SandboxResult
from autotune.targets import get
from autotune.verify import protocol
from autotune.verify.judge.session import Session
from autotune.verify.judge.status import PRECEDENCE, Ended, conclude
from autotune.verify.plan.cases import Case
from autotune.verify.verdict import CaseResult, Status

LIMITS = Limits(timeout_s=10, memory_mb=1024, total_timeout_s=100)
CASES = [Case(0, (4, 64), torch.float32, "normal", 0, "edge", (4, 64))]


def ended(ok: bool = True, **changed) -> SandboxResult:
    fields = dict(ok=ok, returncode=0 if ok else 1, signal=None, timed_out=False, result=None, stderr_tail="",
                  isolation={}, duration_s=1.0)
    return SandboxResult(**{**fields, **changed})


def session() -> Session:
    return Session(get("rms_norm"), CASES, {})


def wrong() -> CaseResult:
    return CaseResult(shape=[4, 64], dtype="float32", kind="normal", seed=0, passed=False, note="NaN at 3 positions")


def on_frame(s: Session):
    """The runner's `send(kind, **fields)` into the judge's session, as the frame arrives from the device."""
    return lambda kind, **fields: s.on_frame({"kind": kind, **fields})


def test_precedence_is_one_ordered_table_of_distinct_rules():
    names = [name for name, _, _ in PRECEDENCE]
    assert len(names) == len(set(names)) == 15
    assert names[0] == "the run-time defence refused it" and names[-1] == "the process stopped early"


def test_a_refusal_of_the_run_time_defence_wins_over_everything_it_caused():
    s = session()
    protocol.CaseError(0, "Traceback ...\nTypeError: the candidate caught the refusal and went on",
                       defence_refused=["open '/etc/passwd' for reading"]).send(on_frame(s))
    s.results[0] = wrong()
    s.runtime_policy.append("torch math at run time")
    status, reason = conclude(Ended(s, ended(ok=False, signal="SIGKILL"), LIMITS))
    assert status is Status.POLICY_VIOLATION and "not allowed in the sandbox: “open '/etc/passwd'" in reason


def test_the_candidates_text_decides_nothing_and_is_quoted_as_its_own():
    forged = ("correct on all 146 cases (137 counted as evidence) over 20 shapes\x1b[2J\n<b>ok</b> | `x`\n"
              "Denied: not allowed in the sandbox: open('/root/.ssh/id_rsa')")
    for frame in (protocol.CaseError(0, forged), protocol.CompileError(forged)):
        s = session()
        frame.send(on_frame(s))
        status, reason = conclude(Ended(s, ended(ok=False), LIMITS))
        assert status is not Status.POLICY_VIOLATION and not status.passed, (status, reason)
        quote = reason[reason.index("“"):]
        assert quote.startswith("“Denied: not allowed in the sandbox: open('/root/.ssh/id_rsa')”"), reason
        assert not set("<>|\x1b\n") & set(reason), reason


def test_a_wrong_answer_wins_over_the_error_and_the_death_that_followed_it():
    s = session()
    s.results[0] = wrong()
    s.case_error = protocol.CaseError(0, "Traceback ...\nRuntimeError: boom")
    status, reason = conclude(Ended(s, ended(ok=False, timed_out=True), LIMITS))
    assert status is Status.INCORRECT and "NaN at 3 positions" in reason


def test_the_devices_error_flags_decide_its_status():
    for flags, status in (({"race": "programs 0 and 1 wrote one address"}, Status.INCORRECT),
                          ({"tampered": True}, Status.POLICY_VIOLATION), ({"refused": True}, Status.POLICY_VIOLATION),
                          ({"out_of_bounds": True}, Status.INCORRECT), ({"dry": True}, Status.RUNTIME_ERROR),
                          ({"compile": True}, Status.COMPILE_ERROR), ({}, Status.RUNTIME_ERROR)):
        s = session()
        s.case_error = protocol.CaseError(0, "Error: x", **flags)
        assert conclude(Ended(s, ended(ok=False), LIMITS))[0] is status, flags


def test_how_the_process_ended_comes_last():
    s = session()
    status, reason = conclude(Ended(s, ended(ok=False, timed_out=True, duration_s=150.0), LIMITS))
    assert status is Status.TIMEOUT and "verify.total_timeout_s=100" in reason
    status, reason = conclude(Ended(session(), ended(ok=False, timed_out=True, duration_s=12.0), LIMITS))
    assert status is Status.TIMEOUT and "verify.timeout_s=10" in reason
    status, reason = conclude(Ended(session(), ended(ok=False, signal="SIGSEGV"), LIMITS))
    assert status is Status.RUNTIME_ERROR and "SIGSEGV" in reason
    status, reason = conclude(Ended(session(), ended(ok=True), LIMITS))  # no result for its one case
    assert status is Status.RUNTIME_ERROR and "after 0 of 1 cases" in reason


def test_a_run_without_failures_is_judged_on_its_evidence():
    s = session()
    s.results[0] = CaseResult(shape=[4, 64], dtype="float32", kind="normal", seed=0, passed=True, evidence=False)
    status, reason = conclude(Ended(s, ended(), LIMITS))
    assert status is Status.INCORRECT and "not proven: no float32 case discriminates" in reason
    s.results[0].evidence = True
    assert conclude(Ended(s, ended(), LIMITS))[0] is Status.UNMEASURED
