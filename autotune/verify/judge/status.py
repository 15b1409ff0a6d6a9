"""Which failure wins: the verdict's status and reason follow the first rule of PRECEDENCE that applies to how the
run ended. A refusal of the run-time defence first (whatever the candidate died of, it tried that), then a
failed import, the run-time policy, a wrong answer, the device's error for the case under way (a race, a defence
switched off or a rule broken, an access out of bounds, a dry call, a kernel that does not compile, any other
exception), then how the process ended (timeout, a broken protocol, a signal, an early exit). A run none of them
applies to is judged on its evidence (`proven`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from autotune.sandbox import Limits, SandboxResult
from autotune.verify.judge.session import Session
from autotune.verify.verdict import CaseResult, Status, quoted


@dataclasses.dataclass(frozen=True)
class Ended:
    """How a run ended: the judge's session, the sandbox's result, the limits it ran under."""

    session: Session
    run: SandboxResult
    limits: Limits

    @property
    def error(self) -> str:
        """The case's error text, one line."""
        e = self.session.case_error
        return one_line(e.error) if e is not None else ""

    @property
    def failed(self) -> CaseResult | None:
        return next((r for _, r in sorted(self.session.results.items()) if not r.passed), None)

    @property
    def where(self) -> str:
        return self.session.running_label()


def _denied(e: Ended) -> str:
    """The run-time defence's own record of what it refused (never an exception's text: the candidate may catch
    the refusal, or raise one it wrote)."""
    refused = e.session.defence_refused
    return f"not allowed in the sandbox: {quoted(refused[0])} (while {e.where})" if refused else ""


def _import_failed(e: Ended) -> str:
    return f"the candidate failed to import: {one_line(e.session.compile_error)}" if e.session.compile_error else ""


def _runtime_policy(e: Ended) -> str:
    return e.session.runtime_policy[0] if e.session.runtime_policy else ""


def _wrong_answer(e: Ended) -> str:
    failed = e.failed
    return f"case {label(failed)}: {failed.note}" if failed is not None else ""


def _case_error(flag: str, reason: Callable[[Ended], str]) -> Callable[[Ended], str]:
    """A rule on the device's error for the case under way, when it carries `flag` ('' for any error)."""
    def rule(e: Ended) -> str:
        err = e.session.case_error
        return reason(e) if err is not None and (not flag or getattr(err, flag)) else ""
    return rule


def _timed_out(e: Ended) -> str:
    if not e.run.timed_out:
        return ""
    s = e.session
    done = f"killed while {e.where}, {len(s.results)} of {len(s.cases)} cases done"
    if e.run.duration_s >= e.limits.total_s:
        return f"the run took over verify.total_timeout_s={e.limits.total_s:g} s ({done})"
    return f"no case finished within verify.timeout_s={e.limits.timeout_s:g} s ({done})"


def _protocol(e: Ended) -> str:
    broken = e.session.protocol or e.run.channel_error
    return f"{broken} (while {e.where})" if broken else ""


def _signal(e: Ended) -> str:
    return f"the candidate's process died with {e.run.signal} while {e.where}" if e.run.signal else ""


def _incomplete(e: Ended) -> str:
    s = e.session
    if len(s.results) >= len(s.cases) and e.run.ok:
        return ""
    why = f": {one_line(e.run.error)}" if e.run.error else ""  # the worker's own failure, if it said
    return (f"the candidate's process exited with status {e.run.returncode} after {len(s.results)} of "
            f"{len(s.cases)} cases{why}")


PRECEDENCE: tuple[tuple[str, Status, Callable[[Ended], str]], ...] = (
    ("the run-time defence refused it", Status.POLICY_VIOLATION, _denied),
    ("the import failed", Status.COMPILE_ERROR, _import_failed),
    ("the run-time policy (no launch, torch math)", Status.POLICY_VIOLATION, _runtime_policy),
    ("a case's answer is wrong", Status.INCORRECT, _wrong_answer),
    ("a race between programs", Status.INCORRECT,
     _case_error("race", lambda e: f"{one_line(e.session.case_error.race)} ({e.where})")),  # type: ignore[union-attr]
    ("a defence switched off", Status.POLICY_VIOLATION, _case_error("tampered", lambda e: f"{e.error} ({e.where})")),
    ("a rule of the checker broken", Status.POLICY_VIOLATION,
     _case_error("refused", lambda e: f"{e.error} ({e.where})")),
    ("an access outside the launch's tensors, or of memory nothing wrote", Status.INCORRECT,
     _case_error("out_of_bounds", lambda e: f"{e.error} ({e.where})")),
    ("a dry call at a served shape raised", Status.RUNTIME_ERROR,
     _case_error("dry", lambda e: f"raised when called at a served shape (launches recorded, not run): {e.error}")),
    ("a kernel does not compile", Status.COMPILE_ERROR,
     _case_error("compile", lambda e: f"the kernel does not compile ({e.where}): {e.error}")),
    ("a case raised", Status.RUNTIME_ERROR, _case_error("", lambda e: f"raised while {e.where}: {e.error}")),
    ("no answer in time", Status.TIMEOUT, _timed_out),
    ("the protocol broken", Status.RUNTIME_ERROR, _protocol),
    ("the process died of a signal", Status.RUNTIME_ERROR, _signal),
    ("the process stopped early", Status.RUNTIME_ERROR, _incomplete),
)


def conclude(e: Ended) -> tuple[Status, str]:
    for _, status, reason in PRECEDENCE:
        why = reason(e)
        if why:
            return status, why
    return proven(e)


def proven(e: Ended) -> tuple[Status, str]:
    """Every case passed: correct if every dtype has a case that counts as evidence and every launch seen at a
    served shape ran in a compared case."""
    s = e.session
    results = list(s.results.values())
    for dtype in dict.fromkeys(r.dtype for r in results):
        if not any(r.evidence for r in results if r.dtype == dtype):
            return Status.INCORRECT, (f"not proven: no {dtype} case discriminates (every reference output is "
                                      "degenerate or a null candidate passes it)")
    uncovered = _uncovered(s)
    if uncovered:
        return Status.INCORRECT, uncovered
    shapes = len({c.requested_shape for c in s.cases})
    dtypes = ", ".join(dict.fromkeys(r.dtype for r in results))
    counted = sum(r.evidence for r in results)
    return Status.UNMEASURED, (f"correct on all {len(results)} cases ({counted} counted as evidence) over "
                               f"{shapes} shapes in {dtypes}")


def _uncovered(s: Session) -> str:
    """'' when every launch signature seen at a served or preset shape and every autotune configuration ran in
    a compared case; else the first that did not, named."""
    coverage = s.coverage
    if coverage is None:
        return ""
    for item in coverage.uncovered:
        at = item.get("dry_index")
        where = s.dry_labels.get(at, "a served shape") if isinstance(at, int) else "a served shape"
        return (f"not proven: the launch {quoted(str(item.get('signature')))} that the launcher makes at {where} "
                "never ran in a compared case: neither that shape's range cases nor any smaller shape with one size "
                "raised alone toward it make it, and the CPU cannot run it whole (a specialisation keyed on one size "
                "at a time, or one that smaller sizes also make, gets a case that runs it)")
    for item in coverage.configs_not_run:  # the candidate's own values, quoted
        return (f"not proven: the autotune configuration {quoted(str(item.get('config')))} of "
                f"{quoted(str(item.get('kernel')))} never ran in a compared case (on a GPU the autotuner may pick it)")
    return ""


def label(r: CaseResult) -> str:
    extra = "".join(f" {k}={v:g}" for k, v in r.scalars.items())
    extra += f" {r.layout}" if r.layout != "contiguous" else ""
    return f"{r.shape} {r.dtype} {r.kind} seed {r.seed}{extra}"


def one_line(error: str) -> str:
    """The last line of an error the candidate's processes wrote, quoted (`quoted`: it never reads as the checker's
    words), with the candidate's line number when the traceback names it."""
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    if not lines:
        return "(no message)"
    where = next((line for line in reversed(lines) if line.startswith("File ") and "candidate.py" in line), "")
    number = where.split(", line ")[1].split(",")[0] if ", line " in where else ""
    return quoted(lines[-1]) + (f" (candidate line {number})" if number.isdigit() else "")


