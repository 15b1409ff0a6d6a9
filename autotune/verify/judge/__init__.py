"""The judging process: parse and scan a candidate, run it isolated on every case, compare, time it on a GPU.

It never imports the candidate. It makes the inputs, the reference and the fp64 golden itself, streams the cases
to a fresh worker (`autotune.verify.worker`) and judges each case's evidence as it comes back (judge.session,
judge.compare); the first failing case stops the worker. Which failure wins is one table (judge.status). A
correct candidate is `unmeasured` on the interpreter; on a GPU, timing decides between `accepted` and `slower`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import queue
import secrets
import tempfile
import threading
import time
from pathlib import Path

import torch

from autotune import accel, config
from autotune.accel import queries
from autotune.errors import UserError
from autotune.records import ProfiledShape
from autotune.sandbox import Limits, SandboxResult, run_isolated
from autotune.targets.base import Target, dtype_name
from autotune.verify import WORKER, protocol
from autotune.verify.heap import reuse_freed_memory
from autotune.verify.judge.session import Session
from autotune.verify.judge.status import Ended, conclude
from autotune.verify.plan import cases as case_plan
from autotune.verify.plan import dry as dry_plan
from autotune.verify.plan import followup
from autotune.verify.plan import notes as case_notes
from autotune.verify.plan.config import PlanConfig
from autotune.verify.plan.data import make_data
from autotune.verify.protocol import Placement
from autotune.verify.static import policy, size
from autotune.verify.verdict import Status, Verdict


def judge(target: Target, source: str, path: str, cfg_verify, *, shapes=None, device: str = "cpu",
          environment: dict | None = None, scan: bool = True, salt: bytes | None = None,
          whole: bool | None = None, digest: str | None = None, served_rows: int | None = None) -> Verdict:
    """The whole judgement of one candidate. shapes: the profile's `ProfiledShape`s (or `(shape, dtype, calls)`
    tuples), None for the target's defaults. `scan=False` skips the static policy (tests of the deeper
    defences use it; the CLI and the loop never do). `salt`: the secret the case inputs and the run's random
    sizes are drawn with, new for every run unless given (to replay a verdict's `inputs_salt`). `whole`: the
    GPU's plan (shapes whole, no range cases, no sampling, no dry calls); None: on a GPU only. With
    device="cpu" and whole=True the GPU's plan runs on the interpreter (tests do, on small served shapes).
    `digest`: the file's sha256 when `source` is only its first bytes (a file over the size bound, not read
    whole: autotune.verify._source). `served_rows`: the most tokens the engine serves in a step (the run's
    `serve.max_batched_tokens`; None: conf/config.yaml's), the rows every preset's shapes are checked at."""
    started = time.monotonic()
    reuse_freed_memory()
    verdict = Verdict(status=Status.RUNTIME_ERROR, reason="", target=target.name, candidate=str(path),
                      candidate_sha256=digest or hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest(),
                      environment=environment or {})
    stage = ["checking its size"]  # what the judge was doing, for the verdict if its own code fails
    try:
        return _judge(target, source, path, cfg_verify, verdict, started, stage, shapes=shapes, device=device,
                      scan=scan, salt=salt, whole=whole, served_rows=served_rows or config.served_rows())
    except UserError:  # the user's settings, not the candidate: said as such, before any verdict
        raise
    except Exception as e:  # noqa: BLE001 - fail closed: any failure of the checker on a file is a verdict
        status = _FAILED_WHILE.get(stage[0], Status.RUNTIME_ERROR)
        return _finish(verdict, status, f"the checker failed while {stage[0]} ({type(e).__name__}), so the file "
                       "is refused; a file an honest kernel writes never does this (if yours does, report it with "
                       "the file)", started)


# the status of a verdict when the checker's own code fails on a file, by what it was doing
_FAILED_WHILE = {"parsing it": Status.COMPILE_ERROR, "checking its size": Status.POLICY_VIOLATION,
                 "scanning it": Status.POLICY_VIOLATION}


def _judge(target: Target, source: str, path: str, cfg_verify, verdict: Verdict, started: float, stage: list[str],
           *, shapes, device: str, scan: bool, salt: bytes | None, whole: bool | None, served_rows: int) -> Verdict:
    limits_of_source = size.SourceLimits.from_config(cfg_verify)
    problem = size.source_problem(source, limits_of_source)
    if problem:
        return _finish(verdict, Status.POLICY_VIOLATION, problem, started)
    stage[0] = "parsing it"
    try:
        tree = policy.parse(source, filename=str(path))
    except SyntaxError as e:
        return _finish(verdict, Status.COMPILE_ERROR, f"does not parse: {e.msg} (line {e.lineno})", started)
    except (RecursionError, MemoryError):  # CPython's parser gives up on deep nesting before any bound of ours
        return _finish(verdict, Status.COMPILE_ERROR, "does not parse: nested too deeply for Python's parser "
                       f"(verify.max_tree_depth is {limits_of_source.max_depth})", started)
    stage[0] = "checking its size"
    problem = size.tree_problem(tree, limits_of_source)
    if problem:
        return _finish(verdict, Status.POLICY_VIOLATION, problem, started)
    if scan:
        stage[0] = "scanning it"
        verdict.policy = policy.scan(tree, target)
        if verdict.policy:
            return _finish(verdict, Status.POLICY_VIOLATION, verdict.policy[0], started)
    stage[0] = "planning its cases"
    shapes = [ProfiledShape.of(s) for s in shapes] if shapes else None
    on_gpu = device == "cuda"
    presets = config.chosen_presets(cfg_verify.get("models", "all"))
    plan_config = PlanConfig.from_config(cfg_verify, presets=presets, served_rows=served_rows,
                                         whole=on_gpu if whole is None else whole)
    limits = Limits.from_config(cfg_verify)
    salt = salt or secrets.token_bytes(16)  # never sent to the candidate's process: it gets tensors, not seeds
    plan = case_plan.plan(target, shapes, plan_config, salt)
    stage[0] = "running its cases"
    with _one_thread():
        # verify.bitwise_repeats: no atomic-reduction bound excuses two calls that differ
        judged = dataclasses.replace(target, atomic_tolerance=None) if cfg_verify.get("bitwise_repeats") else target
        fp32_dot = str(cfg_verify.get("fp32_dot", "tf32"))
        if fp32_dot not in ("tf32", "ieee"):
            raise UserError(f"verify.fp32_dot={fp32_dot!r}: tf32 (accept fp32 tl.dot at TF32, held to a TF32 "
                            "reference) or ieee (demand IEEE fp32 products)")
        session = Session(judged, plan, {}, fp32_dot)
        interpreted = not plan_config.whole
        served = case_plan.served_calls(target, shapes, plan_config) if interpreted else []
        reach = followup.coverage_cases(target, served, plan_config, len(plan))  # what may follow the plan
        probes = [(probe, dtype) for shape, dtype in served for probe in followup.probe_shapes(target, shape,
                                                                                                plan_config)]
        run = _run_worker(target, source, plan, limits, device, session, salt,
                          dry_plan.dry_calls(target, shapes, plan_config) if interpreted else [], plan_config,
                          _largest_frame(target, [(c.shape, c.dtype) for c in plan + reach] + probes), limits_of_source)
        session.coverage_answers.put(None)  # a stream still waiting for the device's answer (the worker died) ends
    if session.setup_error:
        raise UserError(f"the isolated worker could not start its work: {session.setup_error}")
    stage[0] = "weighing its evidence"
    status, reason = conclude(Ended(session, run, limits))
    # Recorded only now that the candidate's process is gone: a salt is drawn for one run and useless for the
    # next, and with it a failing case can be made again (judge(..., salt=bytes.fromhex(inputs_salt))).
    verdict.inputs_salt = salt.hex()
    narrowed = "" if len(presets) == len(config.model_presets()) else (
        f"model presets covered: {', '.join(p['name'] for p in presets)} of {len(config.model_presets())} "
        "(verify.models); other models' shapes and scalars were not checked")
    plan_notes = [narrowed, case_notes.beyond_note(target, plan_config),
                  case_notes.cut_note(target, shapes, plan_config, salt), case_notes.probe_note(plan),
                  case_notes.rerun_note(target, plan, session.too_slow, session.smaller)]
    if not plan_config.whole:  # what the CPU plan never ran whole, or together
        plan_notes += [case_notes.whole_note(target, session.as_run(), case_plan.served_shapes(target, shapes,
                                                                                                plan_config)),
                       case_notes.together_note(target, shapes, plan_config)]
    _record(verdict, session, run, [n for n in plan_notes if n], bool(cfg_verify.nsight))
    if status is Status.UNMEASURED and plan_config.whole:  # the GPU's plan: time it (on the CPU, a stand-in)
        stage[0] = "timing it"
        from autotune.verify.timing import measure

        return _finish(verdict, *measure(target, source, shapes, cfg_verify, verdict, accel=accel.get(device)),
                       started)
    if status is Status.UNMEASURED:
        reason += "; timing: not measured (no GPU)"
    return _finish(verdict, status, reason, started)


def _record(verdict: Verdict, session: Session, run: SandboxResult, plan_notes: list[str], nsight: bool) -> None:
    """The evidence of the isolated run, into the verdict."""
    verdict.cases = [session.results[i] for i in sorted(session.results)]
    verdict.nondeterministic = session.nondeterministic
    verdict.fp32_dots = sorted(session.fp32_dots)
    verdict.sandbox = run.isolation
    verdict.stderr_tail = (session.compile_error or (session.case_error.error if session.case_error else "")
                           or run.stderr_tail)
    verdict.notes = plan_notes + (["non-deterministic (atomics): two calls on the same inputs differed bitwise, "
                                   "within the target's atomic-reduction bound"] if session.nondeterministic else [])
    if nsight:
        verdict.notes.append("verify.nsight: Nsight Compute metrics of candidates are not collected yet (the "
                             "candidate runs unprivileged and ncu needs counter access); `autotune profile` has them "
                             "for the references")


def _run_worker(target: Target, source: str, plan: list[case_plan.Case], limits: Limits, device: str,
                session: Session, salt: bytes, dry, plan_config: PlanConfig, frame_bytes: int,
                limits_of_source: size.SourceLimits) -> SandboxResult:
    """The worker's two processes (autotune.verify.worker). First the dry calls (`dry`: (shape, dtype, arguments
    without values) at every served shape: the launches they make must each run in some case), then each case
    goes to the device as it is made (the pipe keeps this process a case or two ahead, so neither side holds
    every case's data): its data for the device, and where each input sits, without its values, for the host.
    Last, the device names the served shapes whose launches no case ran: the cut of each of those shapes follows,
    then the range cases of those whose launches it did not make; for a launch still not run, the cheapest of the
    smaller shapes that make it too (probes: a size raised alone toward its served value), found by dry calls
    (`plan` grows by them)."""
    served: list[tuple] = []  # dry call index -> (shape, dtype)

    def dry_item(i: int, args, probe: bool = False) -> dict:
        return protocol.DryItem(i, protocol.HostCase(i, 1, [
            {"place": Placement.of(a, True).to_wire()} if isinstance(a, torch.Tensor) else a for a in args],
            dry=True), probe=probe).to_wire()

    def left_out():  # -> the device's DryUncovered, or None once the run stopped
        yield protocol.CoverageCheck().to_wire()
        try:
            return session.coverage_answers.get(timeout=limits.total_s)
        except queue.Empty:
            return None

    def more(extra: list[case_plan.Case]):
        plan.extend(extra)
        yield from map(frame, extra)

    def cases():
        for i, (shape, dtype, args) in enumerate(dry):  # the launcher at served shapes: launches noted, not run
            served.append((shape, dtype))
            session.dry_labels[i] = f"the served shape {list(shape)} in {dtype_name(dtype)}"
            yield dry_item(i, args)
        yield from map(frame, plan)
        if not served:
            return
        answer = yield from left_out()  # the device answers after every case before it was judged
        if answer is None:
            return
        # a sample too slow to run again whole runs whole at a smaller size
        for i, seconds in list(session.too_slow.items()):
            smaller = followup.smaller_whole_case(target, plan[i], seconds, plan_config, len(plan))
            session.smaller[i] = smaller.index if smaller else None
            yield from more([smaller] if smaller else [])
        # a launch only some served shapes make: the cut of each of those shapes (in rounds: an answer names at most
        # 20), then the range cases of those whose launches the cuts did not make either
        cut_of: set[int] = set()
        while True:
            if not answer.dry_index:
                return
            named = [i for i in answer.dry_index if 0 <= i < len(served)]
            fresh = [i for i in named if i not in cut_of]
            cut_of.update(fresh)
            yield from more(followup.coverage_cases(target, [served[i] for i in fresh or named], plan_config,
                                                     len(plan), cut=bool(fresh)))
            if not fresh:
                break
            answer = yield from left_out()
            if answer is None:
                return
        # still not run (a specialisation that follows a served size, as a block from next_power_of_2(tokens)): the
        # cheapest probe that makes the launch too; a device answer names at most 20 launches, so rounds follow
        # while each runs a probe case no round ran
        probed: list[tuple] = []  # probe dry index - len(served) -> (shape, dtype)
        ran: set[tuple] = set()
        for _ in range(PROBE_ROUNDS):
            answer = yield from left_out()
            if answer is None or not answer.dry_index:
                return
            for shape, dtype, args in dry_plan.probe_calls(
                    target, [served[i] for i in answer.dry_index if 0 <= i < len(served)], plan_config):
                if (shape, dtype) not in probed:
                    probed.append((shape, dtype))
                    yield dry_item(len(served) + len(probed) - 1, args, probe=True)
            answer = yield from left_out()
            if answer is None:
                return
            made = [[probed[j - len(served)] for j in alike if 0 <= j - len(served) < len(probed)]
                    for alike in answer.alike]
            extra = [c for c in followup.probe_cases(target, made, plan_config, len(plan))
                     if (c.shape, c.dtype) not in ran]
            if not extra:
                return
            ran.update((c.shape, c.dtype) for c in extra)
            yield from more([dataclasses.replace(c, index=len(plan) + i) for i, c in enumerate(extra)])

    mutates = [i for i, name in enumerate(target.arg_names) if name in target.mutates]  # inputs written in place

    def frame(c: case_plan.Case) -> dict:
        d = session.data[c.index] = make_data(target, c, salt)
        host = protocol.HostCase(c.index, len(_calls(c)) + c.long, [
            {"place": Placement.of(a, c.front_guard).to_wire()} if isinstance(a, torch.Tensor) else a
            for a in d.args])
        return protocol.CaseItem(c.index, list(d.args), c.front_guard, _calls(c), len(_calls(c)) + c.long, host,
                                 long=c.long, sample=c.sample, mutates=mutates,
                                 whole_within_ms=round(1000 * plan_config.whole_within_s) if c.sample else 0,
                                 rerun_within_ms=round(1000 * plan_config.rerun_within_s) if c.sample else 0,
                                 widen_within_ms=round(1000 * plan_config.widen_within_s) if c.sample else 0,
                                 refill_args=list(d.refill_args) if d.refill_args is not None else None).to_wire()

    # the device the launcher's queries are answered as (the host process sees no GPU): this machine's, or SM90's
    host = {"source": source, "entry": target.name, "autotune_turn": secrets.randbelow(1 << 16),
            "device_facts": queries.of_device().to_dict()}
    with tempfile.TemporaryDirectory(prefix="autotune-verify-", ignore_cleanup_errors=True) as tmp:
        return run_isolated(WORKER, {"source": source, "device": device, "source_limits": limits_of_source.to_wire()},
                            limits=limits,
                            host=host, stream=cases, workdir=Path(tmp) / "work", gpu=accel.get(device).sandbox_gpu,
                            on_event=session.on_frame, max_frame_bytes=frame_bytes,
                            schemas=protocol.device_schemas(),
                            progress=lambda frame: frame.get("kind") == "case_result")


PROBE_ROUNDS = 4  # rounds of probes after the range cases: each answers the first 20 launches still not run


def _calls(case: case_plan.Case) -> list[str]:
    """The calls of a case, in order: the first, a repeat on the same inputs, one after a refill (and then
    `case.long` more on the first inputs, which the device compares with the first rather than runs)."""
    return ["first", *["repeat"] * case.repeat, *["refill"] * case.refill]


def _largest_frame(target: Target, calls: list[tuple]) -> int:
    """A bound on an honest case_result frame of any of `calls` ((shape, dtype) of every case that may run): the
    inputs as each of three calls left them and three calls' outputs (each bounded by the target's declared
    `Target.io_elements`), twice over, plus room for the framing."""
    def frame_bytes(shape, dtype) -> int:
        inputs, outputs = target.io_elements(shape)
        return 3 * (inputs + outputs) * torch.empty((), dtype=dtype).element_size()

    return 2 * max(frame_bytes(shape, dtype) for shape, dtype in calls) + (1 << 20)


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

