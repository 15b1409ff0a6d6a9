"""The refinement loop: N candidates per target in parallel, each refined for up to K turns.

Each candidate is a conversation: the task, a reply, the checker's verdict as feedback, a new reply, and
so on. A turn's file is saved as `<run_dir>/candidates/<target>/c<i>_t<turn>.py`, judged, and recorded
in the ledger (`llm` records per request, `candidate` records per file, one `agent_search` record per
target). A conversation ends when its candidate passes (on a CPU `unmeasured` is the best there is:
without timings there is nothing left to improve), when its turns run out, when a budget is spent, or
when any candidate is accepted and `agent.stop_on_accept` is set; with it set on a machine that cannot time
kernels, the first correct candidate ends the search too (candidates already being judged still finish).

Resuming on a run directory repeats nothing: requests already in the transcript are answered from it,
and files already judged (same candidate, turn and content) keep their recorded verdict.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from autotune.agent import clients, prompts
from autotune.agent.accounting import summarize
from autotune.agent.extract import Extraction, extract
from autotune.agent.records import NO_CODE, CandidateRecord, TargetSearch
from autotune.agent.slots import judge_slots
from autotune.ledger import Ledger
from autotune.targets.base import Target
from autotune.verify.verdict import Status, Verdict

if TYPE_CHECKING:
    from autotune.records import Hotspot

VerifyFn = Callable[[Target, Path], Verdict]
# Set by the thread that received Ctrl-C while searches run in other threads (targets side by side):
# every search stops at its next turn.
INTERRUPTED = threading.Event()
# The order of "best": a correct candidate that is faster > one that could not be timed > a slower one.
RANK = {Status.ACCEPTED: 3, Status.UNMEASURED: 2, Status.SLOWER: 1}


@dataclasses.dataclass(frozen=True)
class Settings:
    candidates: int
    turns: int
    stop_on_accept: bool
    workers: int
    budget_tokens: int | None
    budget_dollars: float | None
    budget_wall_s: float | None

    @classmethod
    def from_cfg(cls, agent: DictConfig) -> Settings:
        budget = agent.get("budget") or {}
        candidates = max(int(agent.get("candidates", 1)), 1)
        workers = agent.get("workers") or min(candidates, os.cpu_count() or 1)
        return cls(candidates=candidates, turns=max(int(agent.get("turns", 1)), 1),
                   stop_on_accept=bool(agent.get("stop_on_accept", True)), workers=max(int(workers), 1),
                   budget_tokens=_opt(budget.get("tokens"), int), budget_dollars=_opt(budget.get("dollars"), float),
                   budget_wall_s=_opt(budget.get("wall_s"), float))


def _opt(x: Any, kind: type) -> Any:
    return None if x is None else kind(x)


def search_target(target: Target, hotspot: Hotspot | None, cfg: DictConfig, run_dir: Path, ledger: Ledger, *,
                  rejections: Iterable[str] = (), verify_fn: VerifyFn | None = None,
                  incumbent: prompts.Incumbent | None = None) -> TargetSearch:
    """Search for kernels for one target; `incumbent` (optional) is the best kernel known before it (the one a
    reviewer merged), shown in every task as the one to beat."""
    run_dir = Path(run_dir)
    settings = Settings.from_cfg(cfg.agent)
    client = clients.make(cfg, run_dir, target.name)
    n, turns = client.plan(target.name, settings.candidates, settings.turns)
    settings = dataclasses.replace(settings, turns=turns)
    state = _Search(target, hotspot, cfg, run_dir, ledger, client, settings, n,
                    verify_fn or default_verify(cfg, hotspot), list(rejections), incumbent)
    _run_all(state, n, settings.workers)
    return state.finish()


def _run_all(state: _Search, n: int, workers: int) -> None:
    """The conversations on a thread pool; the first error (or Ctrl-C) stops the others at their next turn."""
    errors: list[BaseException] = []
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(min(workers, n), 1))
    try:
        for future in concurrent.futures.as_completed([pool.submit(_converse, state, i) for i in range(n)]):
            error = future.exception()
            if error is not None:
                state.halt(f"error: {error}")
                errors.append(error)
    except BaseException:
        state.halt("interrupted")
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    if errors:
        raise errors[0]  # a dead endpoint, say: everything judged so far is in the ledger already


def default_verify(cfg: DictConfig, hotspot: Hotspot | None) -> VerifyFn:
    """The real checker on the hot spot's shapes (verify.shapes decides when there is no hot spot)."""
    shapes = list(hotspot.shapes) if hotspot else []

    @functools.cache
    def environment():  # once per search, not per file: it runs git and asks torch
        from autotune.env import collect

        return collect(dict(cfg.get("labels") or {}))

    slots = judge_slots(cfg)  # verify.workers judges at once in this process, one GPU each on a GPU host

    def verify_fn(target: Target, path: Path) -> Verdict:
        from autotune.verify import verify

        with slots.hold():
            return verify(target, path, cfg, shapes=shapes or None, environment=environment())

    return verify_fn


def missing_from_trace(cfg: DictConfig, hotspot: Hotspot | None) -> str:
    """Why a target has no figures when a trace was given and it is not in it (the run says so too); "" else."""
    trace = OmegaConf.select(cfg, "trace", default=None)
    if not trace or hotspot is not None:
        return ""
    return (f"this target does not appear in the trace you gave ({Path(str(trace)).name}): its kernel was never "
            "called there, so nothing in it measured this op.")


def _converse(s: _Search, index: int) -> None:
    """One candidate's conversation, turn after turn, until it passes or is stopped."""
    convo = prompts.Conversation(s.system, s.task(index))
    for turn in range(1, s.settings.turns + 1):
        if s.halted():
            return
        slot = clients.Slot(s.target.name, index, turn, convo.outcomes)
        try:
            exchange = s.client.complete(convo.messages, slot)
        except clients.EndOfRecording:
            return
        s.account(exchange, slot)
        extraction = extract(exchange.text, s.target.name)
        record = s.judge(slot, exchange, extraction)
        if s.ends(record) or turn == s.settings.turns:
            return
        feedback = prompts.feedback_message(record.verdict, file=_file_name(slot), no_code=extraction.reason,
                                            target=s.target)
        convo.add_turn(exchange.text, feedback, record.status)


def _file_name(slot: clients.Slot) -> str:
    return f"c{slot.index}_t{slot.turn}.py"


class _Search:
    """The state of one target's search, shared by its candidate threads (each method takes the lock)."""

    def __init__(self, target, hotspot, cfg, run_dir, ledger, client, settings, n, verify_fn, rejections, incumbent):
        self.target, self.hotspot, self.run_dir, self.ledger = target, hotspot, run_dir, ledger
        self.client, self.settings, self.n, self.verify_fn = client, settings, n, verify_fn
        self.rejections = rejections
        self.incumbent = incumbent
        self.system = prompts.system_message(cfg=cfg)
        self.roofline = prompts.roofline(cfg)
        self.missing = missing_from_trace(cfg, hotspot)
        self.prior = {(r["index"], r["turn"]): r for r in ledger.read("candidate") if r.get("target") == target.name}
        self.logged = {r.get("request_sha256") for r in ledger.read("llm")}
        self.requests: list[dict[str, Any]] = []
        self.records: list[CandidateRecord] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.stopped = ""
        self.start = time.monotonic()

    def task(self, index: int) -> str:
        return prompts.task_message(self.target, self.hotspot, self.roofline, index=index, candidates=self.n,
                                    incumbent=self.incumbent, rejections=self.rejections, missing=self.missing)

    def halt(self, why: str) -> None:
        with self.lock:
            self.stopped = self.stopped or why
        self.stop.set()

    def halted(self) -> bool:
        if INTERRUPTED.is_set():  # Ctrl-C reaches the run's main thread, not the search threads
            self.halt("interrupted")
        if not self.stop.is_set():
            over = self._over_budget()
            if over:
                self.halt(over)
        return self.stop.is_set()

    def _over_budget(self) -> str | None:
        b = self.settings
        with self.lock:
            tokens = sum(r["prompt_tokens"] + r["completion_tokens"] for r in self.requests)
            dollars = sum(r["cost_usd"] for r in self.requests)
        wall_s = time.monotonic() - self.start
        if b.budget_tokens is not None and tokens >= b.budget_tokens:
            return f"budget: {tokens:,} tokens spent of agent.budget.tokens={b.budget_tokens:,}"
        if b.budget_dollars is not None and dollars >= b.budget_dollars:
            return f"budget: ${dollars:.4f} spent of agent.budget.dollars={b.budget_dollars:g}"
        if b.budget_wall_s is not None and wall_s >= b.budget_wall_s:
            return f"budget: {wall_s:.0f} s spent of agent.budget.wall_s={b.budget_wall_s:g}"
        return None

    def account(self, ex: clients.Exchange, slot: clients.Slot) -> None:
        """The request's `llm` record: in the ledger once, whether answered live, replayed or resumed."""
        if ex.source == "search":
            return  # no LLM was asked
        rec = {"target": slot.target, "index": slot.index, "turn": slot.turn, "agent": self.client.name,
               "model": ex.model, "source": ex.source, "request_sha256": ex.request_sha256,
               **ex.usage.to_dict(), "cost_usd": ex.cost_usd, "latency_s": round(ex.latency_s, 3),
               "finish_reason": ex.finish_reason}
        with self.lock:
            self.requests.append({"kind": "llm", **rec})
            fresh = ex.request_sha256 not in self.logged
            self.logged.add(ex.request_sha256)
        if fresh:
            self.ledger.append("llm", **rec)

    def judge(self, slot: clients.Slot, ex: clients.Exchange, extraction: Extraction) -> CandidateRecord:
        """Save the turn's file, judge it (or take the recorded verdict on resume), record it."""
        path, sha, verdict = None, "", None
        if extraction.code is not None:
            path = self.run_dir / "candidates" / slot.target / _file_name(slot)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(extraction.code)
            sha = hashlib.sha256(extraction.code.encode()).hexdigest()
        prior = self.prior.get((slot.index, slot.turn)) or {}
        resumed = bool(prior) and prior.get("sha256", "") == sha
        if path is not None and resumed and prior.get("verdict"):
            verdict = Verdict.from_dict(prior["verdict"])  # judged before the interruption
        elif path is not None:
            verdict = self.verify_fn(self.target, path)
        record = CandidateRecord(
            id=f"{slot.target}-c{slot.index}-t{slot.turn}", target=slot.target, agent=self.client.name,
            model=ex.model, index=slot.index, turn=slot.turn, path=path, sha256=sha,
            status=verdict.status.value if verdict else NO_CODE, verdict=verdict,
            prompt_tokens=ex.usage.prompt_tokens, cached_tokens=ex.usage.cached_tokens,
            completion_tokens=ex.usage.completion_tokens, cost_usd=ex.cost_usd, llm_latency_s=round(ex.latency_s, 3))
        with self.lock:
            self.records.append(record)
        if not resumed:
            self.ledger.append("candidate", **record.to_ledger(self.run_dir))
        return record

    def ends(self, record: CandidateRecord) -> bool:
        """Whether this conversation is over after this turn (and the whole search, on an accept)."""
        if record.status == Status.ACCEPTED.value:
            if self.settings.stop_on_accept:
                self.halt(f"accepted: {record.id}")
                return True
            return False  # with timings there is still something to improve
        if record.status == Status.UNMEASURED.value:
            # correct, and nothing here can time it (no GPU): no later candidate can rank above it, so with
            # stop_on_accept the search ends as at an accept; candidates already being judged finish
            if self.settings.stop_on_accept:
                self.halt(f"correct (not timed: no GPU): {record.id}")
            return True
        return False

    def finish(self) -> TargetSearch:
        records = sorted(self.records, key=lambda r: (r.index, r.turn))
        best = best_of(records)
        stopped = self.stopped or (f"done: every candidate passed or used its {self.settings.turns} turn(s)")
        usage = summarize(self.requests + [{"kind": "candidate", **r.to_ledger(self.run_dir)} for r in records])
        usage.pop("targets", None)
        self.ledger.append("agent_search", target=self.target.name, agent=self.client.name, candidates=self.n,
                           turns=self.settings.turns, best=best.id if best else None,
                           best_status=best.status if best else None, stopped=stopped, usage=usage)
        return TargetSearch(target=self.target.name, best=best, candidates=records, usage=usage, stopped=stopped)


def best_of(records: Iterable[CandidateRecord]) -> CandidateRecord | None:
    """accepted > unmeasured > slower, then by weighted speedup; the earliest wins a tie."""
    correct = [(r, r.verdict) for r in records if r.verdict is not None and r.verdict.status in RANK]
    if not correct:
        return None
    return max(correct, key=lambda rv: (RANK[rv[1].status], rv[1].speedup_geomean or 0.0, -rv[0].index, -rv[0].turn))[0]
