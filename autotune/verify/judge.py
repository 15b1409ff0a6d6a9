"""Judging one candidate: parse and scan it, run it isolated on every case, compare, time it on a GPU.

This process never imports the candidate. It makes the inputs, computes the reference and the fp64
golden itself, hands the inputs to a fresh worker process (`autotune.verify.worker`) and judges the
outputs that come back as each case finishes; the first failing case stops the worker. The verdict's
status follows the first thing that went wrong, in this order: the file does not parse
(compile_error), the static policy (policy_violation), the import fails (compile_error), the run-time
policy (no Triton launch, torch math at call time: policy_violation), a wrong answer (incorrect), an
exception while running (runtime_error), no answer in time (timeout), the process died or stopped early
(runtime_error). A correct candidate is `unmeasured` on CPU; on a GPU, timing decides between
`accepted` and `slower`.
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import tempfile
import threading
import time
from pathlib import Path

import torch

from autotune.errors import UserError
from autotune.records import ProfiledShape
from autotune.targets.base import Target, dtype_name
from autotune.verify import cases as case_plan
from autotune.verify import policy
from autotune.verify.compare import judge_case
from autotune.sandbox import Limits, SandboxResult, run_isolated
from autotune.sandbox.schema import ERROR_CHARS, DictOf, Either, Int, ListOf, Schema, Text
from autotune.verify.verdict import CaseResult, Status, Verdict
from autotune.verify.wire import Placement


class _Session:
    """The judge's state while the worker runs; `on_event` sees each frame as it arrives."""

    def __init__(self, target: Target, cases: list[case_plan.Case], data: dict[int, case_plan.CaseData]):
        self.target, self.cases, self.data = target, cases, data
        self.results: dict[int, CaseResult] = {}
        self.running: int | None = None
        self.compile_error = ""
        self.case_error: dict | None = None
        self.runtime_policy: list[str] = []
        self.protocol = ""
        self.setup_error = ""  # the worker could not set up (no GPU inside the sandbox): not the candidate's fault
        self.nondeterministic = False
        self.coverage: dict | None = None  # the device's account of the launches seen at served shapes
        self.dry_labels: dict[int, str] = {}  # dry call index -> the served shape it stands for
        self.uncovered: list[int] | None = None  # dry calls whose launches no planned case ran (the device's word)
        self.answered = threading.Event()  # set when the device answered a coverage check, or the run stopped
        self.host_isolation: dict = {}

    def on_event(self, frame: dict) -> bool:
        stop = self._on_event(frame)
        if stop or frame.get("kind") == "dry_uncovered":
            self.answered.set()
        return stop

    def _on_event(self, frame: dict) -> bool:
        kind = frame.get("kind")
        if kind == "dry_uncovered":
            self.uncovered = list(frame["dry_index"])
        elif kind == "case_start":
            self.running = frame.get("index") if isinstance(frame.get("index"), int) else None
        elif kind == "case_result":
            return self._on_result(frame)
        elif kind == "compile_error":
            self.compile_error = str(frame.get("error", ""))
            return True
        elif kind == "case_error":
            self.case_error = frame
            return True
        elif kind == "import_ops":  # recorded while the candidate's module was imported
            return self._on_import(frame)
        elif kind == "setup_error":
            self.setup_error = str(frame.get("error", ""))
            return True
        elif kind == "policy_error":  # the device refused to build a kernel (the kernel half of the allow-list)
            self.runtime_policy.append(f"{frame.get('error', '')} (a kernel may use only the allow-listed "
                                       "triton.language names)")
            return True
        elif kind in ("host_protocol", "host_gone"):
            self.protocol = str(frame.get("error") or "the candidate's process ended before it finished its cases")
            return True
        elif kind == "coverage":
            self.coverage = frame
        elif kind == "host_isolation":
            self.host_isolation = frame.get("report") if isinstance(frame.get("report"), dict) else {}
        return False

    def _on_import(self, frame: dict) -> bool:
        ops = frame.get("torch_ops")
        if not isinstance(ops, dict) or not all(isinstance(k, str) and isinstance(v, int) for k, v in ops.items()):
            self.protocol = "a malformed record of the import"
            return True
        torch_math = policy.runtime_violations(ops)
        if torch_math:
            self.runtime_policy.append(f"torch math while the candidate was imported: {', '.join(torch_math)} "
                                       "(a module may define kernels and constants, not compute answers)")
        return bool(torch_math)

    def _on_result(self, frame: dict) -> bool:
        i = frame.get("index")
        if not _well_formed(frame) or i != self.running or i in self.results or not 0 <= i < len(self.cases):
            self.protocol = f"an unexpected or malformed result for case {i!r}"
            return True
        case = self.cases[i]
        result, nondeterministic = judge_case(self.target, case, self.data.pop(i), frame,
                                              self.target.tolerances[case.dtype])  # its data is needed no more
        self.results[i] = result
        self.nondeterministic |= nondeterministic
        launches = frame["launches"]
        if not launches or launches[0] == 0:
            self.runtime_policy.append(f"no Triton kernel ran in case {case.label}: the entry function must "
                                       "launch a @triton.jit kernel that does the math")
        elif result.passed and 0 in launches[1:]:  # a cache that a refill did not expose (content-keyed)
            self.runtime_policy.append(f"a repeated call launched no Triton kernel in case {case.label} "
                                       "(results replayed from a cache?)")
        torch_math = policy.runtime_violations(frame["torch_ops"])
        if torch_math:
            self.runtime_policy.append(f"torch math at run time in case {case.label}: {', '.join(torch_math)} "
                                       "(outside kernels only allocation, views and copies may run)")
        return bool(self.runtime_policy) or not result.passed

    def running_label(self) -> str:
        """What the worker was doing when it last said: 'importing the candidate' or 'running case ...'."""
        if self.case_error is not None and self.case_error.get("dry"):  # before any case: a call at a served shape
            return f"calling it at {self.dry_labels.get(self.case_error.get('index'), 'a served shape')} (a dry call)"
        if self.running is None or not 0 <= self.running < len(self.cases):
            return "importing the candidate"
        return f"running case {self.cases[self.running].label}"

    def conclude(self, run: SandboxResult, limits: Limits) -> tuple[Status, str]:
        failed = next((r for _, r in sorted(self.results.items()) if not r.passed), None)
        denied = _denied(self.compile_error or str((self.case_error or {}).get("error", "")))
        if denied:
            return Status.POLICY_VIOLATION, f"{denied} (while {self.running_label()})"
        if self.compile_error:
            return Status.COMPILE_ERROR, f"the candidate failed to import: {one_line(self.compile_error)}"
        if self.runtime_policy:
            return Status.POLICY_VIOLATION, self.runtime_policy[0]
        if failed is not None:
            return Status.INCORRECT, f"case {_label(failed)}: {failed.note}"
        if self.case_error is not None and self.case_error.get("race"):  # found by autotune.verify.races
            return Status.INCORRECT, f"{one_line(str(self.case_error['race']))} ({self.running_label()})"
        if self.case_error is not None and (self.case_error.get("tampered") or self.case_error.get("refused")):
            error = one_line(str(self.case_error.get("error", "")))  # a defence switched off, or a rule broken
            return Status.POLICY_VIOLATION, f"{error} ({self.running_label()})"
        if self.case_error is not None and self.case_error.get("out_of_bounds"):
            return Status.INCORRECT, f"{one_line(str(self.case_error.get('error', '')))} ({self.running_label()})"
        if self.case_error is not None and self.case_error.get("dry"):
            error = one_line(str(self.case_error.get("error", "")))
            return Status.RUNTIME_ERROR, f"raised when called at a served shape (launches recorded, not run): {error}"
        if self.case_error is not None:
            error = one_line(str(self.case_error.get("error", "")))
            if self.case_error.get("compile"):
                return Status.COMPILE_ERROR, f"the kernel does not compile ({self.running_label()}): {error}"
            return Status.RUNTIME_ERROR, f"raised while {self.running_label()}: {error}"
        if run.timed_out:
            done = f"killed while {self.running_label()}, {len(self.results)} of {len(self.cases)} cases done"
            if run.duration_s >= limits.total_s:
                return Status.TIMEOUT, f"the run took over verify.total_timeout_s={limits.total_s:g} s ({done})"
            return Status.TIMEOUT, f"no case finished within verify.timeout_s={limits.timeout_s:g} s ({done})"
        if self.protocol or run.channel_error:
            return Status.RUNTIME_ERROR, f"{self.protocol or run.channel_error} (while {self.running_label()})"
        if run.signal:
            return Status.RUNTIME_ERROR, f"the candidate's process died with {run.signal} while {self.running_label()}"
        if len(self.results) < len(self.cases) or not run.ok:
            why = f": {one_line(run.error)}" if run.error else ""  # the worker's own failure, if it said
            return Status.RUNTIME_ERROR, (f"the candidate's process exited with status {run.returncode} after "
                                          f"{len(self.results)} of {len(self.cases)} cases{why}")
        return self._proven()

    def _proven(self) -> tuple[Status, str]:
        results = list(self.results.values())
        for dtype in dict.fromkeys(r.dtype for r in results):
            if not any(r.evidence for r in results if r.dtype == dtype):
                return Status.INCORRECT, (f"not proven: no {dtype} case discriminates (every reference output is "
                                          "degenerate or a null candidate passes it)")
        uncovered = self._uncovered()
        if uncovered:
            return Status.INCORRECT, uncovered
        shapes = len({c.requested_shape for c in self.cases})
        dtypes = ", ".join(dict.fromkeys(r.dtype for r in results))
        evidence = sum(r.evidence for r in results)
        return Status.UNMEASURED, (f"correct on all {len(results)} cases ({evidence} counted as evidence) over "
                                   f"{shapes} shapes in {dtypes}")


    def _uncovered(self) -> str:
        """'' when every launch signature seen at a served or preset shape and every autotune configuration ran in
        a compared case; else the first that did not, named."""
        coverage = self.coverage if isinstance(self.coverage, dict) else {}
        for item in coverage.get("uncovered") or []:
            where = self.dry_labels.get(item.get("dry_index"), "a served shape")
            return (f"not proven: the launch {item.get('signature')} that the launcher makes at {where} never ran in "
                    "a compared case (a code path only served sizes reach is not checked here)")
        for item in coverage.get("configs_not_run") or []:
            return (f"not proven: the autotune configuration {item.get('config')} of `{item.get('kernel')}` never ran "
                    "in a compared case (on a GPU the autotuner may pick it)")
        return ""


# The worker's frames (autotune/verify/worker.py), as the Reader checks them before on_event sees one: a frame
# of another kind or shape is a protocol error (runtime_error), and only the first error of each kind is kept.
_TENSORS = ListOf(Either(None, torch.Tensor), max_len=64)
_PAIRS = ListOf(ListOf(int, max_len=2), max_len=4096)
_OPS = DictOf(Text(200), Int(0), max_len=10_000)
WORKER_FRAMES = [
    Schema("case_start", {"index": Int(0)}),
    Schema("case_result", {"index": Int(0), "outputs": _TENSORS, "output_types": ListOf(Text(100), max_len=64),
                           "launches": ListOf(Int(0), max_len=3), "output_strides": ListOf(Either(None, [int]), 64),
                           "aliased": _PAIRS, "reused": _PAIRS, "inputs_after": _TENSORS, "repeat_outputs": _TENSORS,
                           "repeat_inputs_after": _TENSORS, "refill_outputs": _TENSORS,
                           "refill_inputs_after": _TENSORS, "clobbered": bool, "guards_broken": [int], "torch_ops": _OPS,
                           "long_calls": Int(0), "long_differs": Either(None, Int(0)), "output_valid": _TENSORS,
                           "sampled": Text(500), "inputs_written": _TENSORS},
           optional=("repeat_outputs", "repeat_inputs_after", "refill_outputs", "refill_inputs_after", "output_valid",
                     "sampled", "inputs_written")),
    Schema("compile_error", {"error": Text(ERROR_CHARS)}, keep="first"),
    Schema("case_error", {"index": Either(None, Int(0)), "error": Text(ERROR_CHARS), "compile": bool,
                          "tampered": bool, "refused": bool, "out_of_bounds": bool, "dry": bool,
                          "race": Text(ERROR_CHARS)}, keep="first",
           optional=("compile", "tampered", "refused", "out_of_bounds", "dry", "race")),
    Schema("setup_error", {"error": Text(ERROR_CHARS)}, keep="first"),
    Schema("policy_error", {"error": Text(ERROR_CHARS)}, keep="first"),
    Schema("host_protocol", {"error": Text(ERROR_CHARS)}, keep="first"),
    Schema("host_gone", {}, keep="first"),
    Schema("host_isolation", {"report": DictOf(Text(40), Text(300), max_len=20)}, keep="first"),
    Schema("coverage", {"uncovered": ListOf(DictOf(Text(40), Either(Int(0), Text(500)), max_len=4), max_len=20),
                        "configs_not_run": ListOf(DictOf(Text(40), Text(500), max_len=4), max_len=20),
                        "signatures_run": Int(0)}, keep="first"),
    Schema("dry_uncovered", {"dry_index": ListOf(Int(0), max_len=20)}, keep="first"),
    Schema("import_ops", {"torch_ops": _OPS}, keep="first"),
    Schema("audit_log", {"denied": ListOf(Text(500), max_len=10_000)}, keep="first"),
    Schema("result", {"payload": DictOf(str, Int(0), max_len=4)}, keep="first"),
]


def _well_formed(frame: dict) -> bool:
    lists = ("outputs", "repeat_outputs", "refill_outputs", "inputs_after", "repeat_inputs_after",
             "refill_inputs_after", "aliased", "reused", "output_strides", "launches", "guards_broken")
    if not isinstance(frame.get("index"), int) or not isinstance(frame.get("torch_ops"), dict):
        return False
    if not all(frame.get(k) is None or isinstance(frame.get(k), list) for k in lists):
        return False
    pairs_ok = all(isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(v, int) for v in p)
                   for p in (frame.get("aliased") or []) + (frame.get("reused") or []))
    counts_ok = all(isinstance(k, str) and isinstance(v, int) for k, v in frame["torch_ops"].items())
    launches = frame.get("launches")
    return pairs_ok and counts_ok and isinstance(launches, list) and all(isinstance(n, int) for n in launches)


def _denied(error: str) -> str:
    """The run-time defence's refusal (autotune.sandbox.audit) if that is what the candidate died of."""
    last = one_line(error) if error.strip() else ""
    return last if "not allowed in the sandbox" in last else ""


def _label(r: CaseResult) -> str:
    extra = "".join(f" {k}={v:g}" for k, v in r.scalars.items())
    extra += f" {r.layout}" if r.layout != "contiguous" else ""
    return f"{r.shape} {r.dtype} {r.kind} seed {r.seed}{extra}"


def one_line(error: str) -> str:
    """The last line of a traceback, with the candidate's line number when the traceback names it."""
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    if not lines:
        return "(no message)"
    where = next((line for line in reversed(lines) if line.startswith("File ") and "candidate.py" in line), "")
    at = ""
    if ", line " in where:
        at = f" (candidate line {where.split(', line ')[1].split(',')[0]})"
    return lines[-1][:300] + at


def judge(target: Target, source: str, path: str, cfg_verify, *, shapes=None, device: str = "cpu",
          environment: dict | None = None, scan: bool = True, salt: bytes | None = None) -> Verdict:
    """The whole judgement of one candidate. shapes: the profile's `ProfiledShape`s (or `(shape, dtype, calls)`
    tuples), None for the target's defaults. `scan=False` skips the static policy (tests of the deeper
    defences use it; the CLI and the loop never do). `salt`: the secret the case inputs and the run's random
    sizes are drawn with, new for every run unless given (to replay a verdict's `inputs_salt`)."""
    started = time.monotonic()
    shapes = [ProfiledShape.of(s) for s in shapes] if shapes else None
    verdict = Verdict(status=Status.RUNTIME_ERROR, reason="", target=target.name, candidate=str(path),
                      candidate_sha256=hashlib.sha256(source.encode()).hexdigest(), environment=environment or {})
    try:
        tree = policy.parse(source, filename=str(path))
    except SyntaxError as e:
        return _finish(verdict, Status.COMPILE_ERROR, f"does not parse: {e.msg} (line {e.lineno})", started)
    if scan:
        verdict.policy = policy.scan(tree, target)
        if verdict.policy:
            return _finish(verdict, Status.POLICY_VIOLATION, verdict.policy[0], started)
    on_gpu = device == "cuda"
    limits = Limits.from_config(cfg_verify)
    salt = salt or secrets.token_bytes(16)  # never sent to the candidate's process: it gets tensors, not seeds
    plan = case_plan.plan(target, shapes, cfg_verify, on_gpu, salt)
    with _one_thread():
        session = _Session(target, plan, {})
        reach = [] if on_gpu else case_plan.coverage_cases(target, case_plan.served_calls(target, shapes, cfg_verify),
                                                          cfg_verify, len(plan))  # what may follow the plan
        run = _run_worker(target, source, plan, limits, device, session, salt,
                          [] if on_gpu else case_plan.dry_calls(target, shapes, cfg_verify), cfg_verify,
                          _largest_frame(target, plan + reach))
        session.answered.set()  # a stream still waiting for the device's answer (the worker died first) ends
    if session.setup_error:
        raise UserError(f"the isolated worker could not start its work: {session.setup_error}")
    status, reason = session.conclude(run, limits)
    # Recorded only now that the candidate's process is gone: a salt is drawn for one run and useless for the
    # next, and with it a failing case can be made again (judge(..., salt=bytes.fromhex(inputs_salt))).
    verdict.inputs_salt = salt.hex()
    _record(verdict, session, run, case_plan.cut_note(target, shapes, cfg_verify, on_gpu, salt),
            bool(cfg_verify.nsight))
    if status is Status.UNMEASURED and on_gpu:
        from autotune.verify.timing import measure

        return _finish(verdict, *measure(target, source, shapes, cfg_verify, verdict), started)
    if status is Status.UNMEASURED:
        reason += "; timing: not measured (no GPU)"
    return _finish(verdict, status, reason, started)


def _record(verdict: Verdict, session: _Session, run: SandboxResult, cut_note: str, nsight: bool) -> None:
    """The evidence of the isolated run, into the verdict."""
    verdict.cases = [session.results[i] for i in sorted(session.results)]
    verdict.nondeterministic = session.nondeterministic
    verdict.sandbox = run.isolation
    verdict.stderr_tail = (session.compile_error or str((session.case_error or {}).get("error", ""))
                           or run.stderr_tail)
    verdict.notes = [n for n in (cut_note, "non-deterministic: two calls on the same inputs differed bitwise"
                                 if session.nondeterministic else "") if n]
    if nsight:
        verdict.notes.append("verify.nsight: Nsight Compute metrics of candidates are not collected yet (the "
                             "candidate runs unprivileged and ncu needs counter access); `autotune profile` has them "
                             "for the references")


def _run_worker(target, source, plan, limits: Limits, device, session: _Session, salt: bytes,
                dry, cfg_verify, frame_bytes: int) -> SandboxResult:
    """The worker's two processes (autotune.verify.worker). First the dry calls (`dry`: (shape, dtype, arguments
    without values) at every served shape: the launches they make must each run in some case), then each case
    goes to the device as it is made (the pipe keeps this process a case or two ahead, so neither side holds
    every case's data): its data for the device, and where each input sits, without its values, for the host.
    Last, the device names the served shapes whose launches no case ran, and a range case at each of those
    shapes follows (`plan` grows by them)."""
    served: list[tuple] = []  # dry call index -> (shape, dtype)

    def cases():
        for i, (shape, dtype, args) in enumerate(dry):  # the launcher at served shapes: launches noted, not run
            served.append((shape, dtype))
            session.dry_labels[i] = f"the served shape {list(shape)} in {dtype_name(dtype)}"
            yield {"dry": {"index": i, "host": {"index": i, "calls": 1, "dry": True, "args": [
                {"place": Placement.of(a, True).to_wire()} if isinstance(a, torch.Tensor) else a for a in args]}}}
        yield from map(frame, plan)
        if not served:
            return
        yield {"coverage_check": {}}  # a launch only some served shapes make: a range case at one of those shapes
        if session.answered.wait(limits.total_s) and session.uncovered:
            extra = case_plan.coverage_cases(target, [served[i] for i in session.uncovered if 0 <= i < len(served)],
                                             cfg_verify, len(plan))
            plan.extend(extra)
            yield from map(frame, extra)

    mutates = [i for i, name in enumerate(target.arg_names) if name in target.mutates]  # inputs written in place

    def frame(c: case_plan.Case) -> dict:
        d = session.data[c.index] = case_plan.make_data(target, c, salt)
        host = {"index": c.index, "calls": len(_calls(c)) + c.long, "args": [
            {"place": Placement.of(a, c.front_guard).to_wire()} if isinstance(a, torch.Tensor) else a
            for a in d.args]}
        return {"case": {"index": c.index, "args": list(d.args), "front_guard": c.front_guard,
                         "sequence": _calls(c), "calls": len(_calls(c)) + c.long, "long": c.long, "sample": c.sample,
                         "mutates": mutates,
                         "refill_args": list(d.refill_args) if d.refill_args is not None else None, "host": host}}

    host = {"source": source, "entry": target.name, "autotune_turn": secrets.randbelow(1 << 16)}
    with tempfile.TemporaryDirectory(prefix="autotune-verify-", ignore_cleanup_errors=True) as tmp:
        return run_isolated("autotune.verify.worker", {"source": source, "device": device}, limits=limits,
                            host=host, stream=cases, workdir=Path(tmp) / "work", gpu=device == "cuda",
                            on_event=session.on_event, max_frame_bytes=frame_bytes,
                            schemas=WORKER_FRAMES,
                            progress=lambda frame: frame.get("kind") == "case_result")


def _calls(case: case_plan.Case) -> list[str]:
    """The calls of a case, in order: the first, a repeat on the same inputs, one after a refill (and then
    `case.long` more on the first inputs, which the device compares with the first rather than runs)."""
    return ["first", *["repeat"] * case.repeat, *["refill"] * case.refill]


def _largest_frame(target: Target, plan) -> int:
    """A bound on an honest case_result frame: the inputs as each of three calls left them and three calls'
    outputs (each bounded by the target's declared `Target.io_elements`), twice over, plus room for the
    framing."""
    def frame_bytes(case) -> int:
        inputs, outputs = target.io_elements(case.shape)
        return 3 * (inputs + outputs) * torch.empty((), dtype=case.dtype).element_size()

    return 2 * max(frame_bytes(c) for c in plan) + (1 << 20)


_threads_lock = threading.Lock()
_threads_users = [0, 0]  # [judges inside _one_thread, torch's thread count before the first of them]


@contextlib.contextmanager
def _one_thread():
    """torch on one thread while judging: the comparisons are small, and with two threads on a busy 2-core
    machine each op waits on the other thread (measured: isnan().any() on 1M fp64, 49 ms vs 3.5 ms).
    Counted, so that judges running in parallel threads restore the setting once, when the last leaves."""
    with _threads_lock:
        if _threads_users[0] == 0:
            _threads_users[1] = torch.get_num_threads()
            torch.set_num_threads(1)
        _threads_users[0] += 1
    try:
        yield
    finally:
        with _threads_lock:
            _threads_users[0] -= 1
            if _threads_users[0] == 0:
                torch.set_num_threads(_threads_users[1])


def _finish(verdict: Verdict, status: Status, reason: str, started: float) -> Verdict:
    verdict.status, verdict.reason = status, reason
    verdict.seal()
    verdict.duration_s = round(time.monotonic() - started, 3)
    return verdict

