"""What the agent costs: tokens, cached tokens, dollars and latency per request, and per kernel per run.

Per request, `Usage` holds what the server reported; cached prompt tokens come from
`usage.prompt_tokens_details.cached_tokens`, which vLLM and SGLang only send when enabled
(`--enable-prompt-tokens-details`, `--enable-cache-report`), so their absence is recorded as unknown
rather than as zero hits. `summarize(records)` turns a run's ledger into the numbers a team needs to
decide whether the loop pays: tokens and dollars per accepted kernel (per passing kernel when nothing
could be timed, and it says which), the share of tokens, dollars and wall time spent on attempts that failed
and on retries (per attempt: a conversation that passes on its second turn paid for a failed first one), and
the prompt cache hit rate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from autotune.verify.verdict import Status, is_passed


@dataclasses.dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens the server answered from its prefix cache
    cached_known: bool = False  # False when the server did not report cached tokens
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> Usage:
        d = d or {}
        return cls(int(d.get("prompt_tokens") or 0), int(d.get("cached_tokens") or 0),
                   bool(d.get("cached_known")), int(d.get("completion_tokens") or 0))


@dataclasses.dataclass(frozen=True)
class Price:
    """USD per million tokens (agent.price)."""

    input_per_mtok: float = 0.0
    cached_input_per_mtok: float = 0.0
    output_per_mtok: float = 0.0

    @classmethod
    def from_cfg(cls, price: Mapping[str, Any] | None) -> Price:
        price = price or {}
        keys = ("input_per_mtok", "cached_input_per_mtok", "output_per_mtok")
        return cls(*(float(price.get(k) or 0.0) for k in keys))

    def cost_usd(self, usage: Usage) -> float:
        uncached = max(usage.prompt_tokens - usage.cached_tokens, 0)
        return (uncached * self.input_per_mtok + usage.cached_tokens * self.cached_input_per_mtok
                + usage.completion_tokens * self.output_per_mtok) / 1e6


def usage_from_response(usage: Any) -> Usage:
    """`Usage` from an openai `CompletionUsage` (or None when the server sent no usage)."""
    if usage is None:
        return Usage()
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    return Usage(prompt_tokens=int(usage.prompt_tokens or 0), cached_tokens=int(cached or 0),
                 cached_known=cached is not None, completion_tokens=int(usage.completion_tokens or 0))


def summarize(ledger_records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The run's agent accounting from its ledger's `llm` and `candidate` records (see loop.py): totals, per
    kernel, the cost of failed attempts and of retries, per run and per target."""
    records = list(ledger_records)
    llm = [r for r in records if r.get("kind") == "llm"]
    candidates = [r for r in records if r.get("kind") == "candidate"]
    summary = _totals(llm)
    summary.update(_per_kernel(summary, candidates))
    summary.update(failure_cost(llm, candidates))
    summary["targets"] = {t: {**_totals([r for r in llm if r.get("target") == t]),
                              **failure_cost([r for r in llm if r.get("target") == t],
                                             [r for r in candidates if r.get("target") == t])}
                          for t in sorted({str(r["target"]) for r in llm + candidates if r.get("target")})}
    return summary


def _tokens(r: Mapping[str, Any]) -> int:
    return int(r.get("prompt_tokens") or 0) + int(r.get("completion_tokens") or 0)


def _totals(llm: list[Mapping[str, Any]]) -> dict[str, Any]:
    prompt = sum(int(r.get("prompt_tokens") or 0) for r in llm)
    known = [r for r in llm if r.get("cached_known")]
    known_prompt = sum(int(r.get("prompt_tokens") or 0) for r in known)
    cached = sum(int(r.get("cached_tokens") or 0) for r in known)
    return {
        "requests": len(llm),
        "requests_replayed": sum(1 for r in llm if r.get("source") == "replay"),
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "completion_tokens": sum(int(r.get("completion_tokens") or 0) for r in llm),
        "tokens": sum(_tokens(r) for r in llm),
        "dollars": round(sum(float(r.get("cost_usd") or 0.0) for r in llm), 6),
        "llm_latency_s": round(sum(float(r.get("latency_s") or 0.0) for r in llm), 3),
        # Over the requests whose server reported cached tokens; None when none did.
        "cache_hit_rate": round(cached / known_prompt, 4) if known_prompt else None,
        "cache_reported_requests": len(known),
    }


def _per_kernel(totals: Mapping[str, Any], candidates: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Tokens and dollars per accepted kernel; per passing kernel when nothing was accepted (CPU). Everything
    spent counts, failed attempts included: the cost of a kernel is the cost of the search that found it."""
    accepted = {_conversation(r) for r in candidates if r.get("status") == Status.ACCEPTED}
    passing = {_conversation(r) for r in candidates if is_passed(r.get("status"))}
    basis, kernels = ("accepted", accepted) if accepted or not passing else ("passing (unmeasured)", passing)
    n = len(kernels)
    return {
        "kernels_accepted": len(accepted),
        "kernels_passing": len(passing),
        "per_kernel_basis": basis,
        "tokens_per_kernel": round(totals["tokens"] / n, 1) if n else None,
        "dollars_per_kernel": round(totals["dollars"] / n, 6) if n else None,
    }


def _conversation(r: Mapping[str, Any]) -> tuple:
    return r.get("target"), r.get("index")


def _attempt(r: Mapping[str, Any]) -> tuple:
    return r.get("target"), r.get("index"), r.get("turn")


def attempt_seconds(candidate: Mapping[str, Any]) -> float:
    """An attempt's wall time: the model's answer and the checker's judgement of it."""
    verdict = candidate.get("verdict") or {}
    return float(candidate.get("llm_latency_s") or 0.0) + float(verdict.get("duration_s") or 0.0)


def failure_cost(llm: list[Mapping[str, Any]], candidates: list[Mapping[str, Any]]) -> dict[str, Any]:
    """What went to attempts that failed (a turn whose file did not pass: incorrect, a crash, no code, slower)
    and to retries (every turn after a conversation's first), as counts and as shares of tokens, dollars and
    wall time. Per attempt, not per conversation: a conversation that passes on turn 2 still paid for turn 1.
    A request with no judged attempt (the run died before the verdict) counts as failed."""
    status = {_attempt(r): r.get("status") for r in candidates}
    failed = [r for r in llm if not is_passed(status.get(_attempt(r)))]
    retries = [r for r in llm if int(r.get("turn") or 1) > 1]
    wall = sum(attempt_seconds(c) for c in candidates)
    failed_wall = sum(attempt_seconds(c) for c in candidates if not is_passed(c.get("status")))
    tokens, dollars = sum(_tokens(r) for r in llm), sum(float(r.get("cost_usd") or 0.0) for r in llm)

    def share(part: float, whole: float) -> float | None:
        return round(part / whole, 4) if whole else None

    return {
        "attempts": len(candidates),
        "failed_attempts": sum(not is_passed(c.get("status")) for c in candidates),
        "retries": sum(int(c.get("turn") or 1) > 1 for c in candidates),
        "failed_candidates": len({_conversation(c) for c in candidates}
                                 - {_conversation(c) for c in candidates if is_passed(c.get("status"))}),
        "failed_tokens": sum(_tokens(r) for r in failed),
        "failed_dollars": round(sum(float(r.get("cost_usd") or 0.0) for r in failed), 6),
        "failed_wall_s": round(failed_wall, 3),
        "attempts_wall_s": round(wall, 3),
        "failed_token_share": share(sum(_tokens(r) for r in failed), tokens),
        "failed_dollar_share": share(sum(float(r.get("cost_usd") or 0.0) for r in failed), dollars),
        "failed_wall_share": share(failed_wall, wall),
        "retry_token_share": share(sum(_tokens(r) for r in retries), tokens),
        "retry_dollar_share": share(sum(float(r.get("cost_usd") or 0.0) for r in retries), dollars),
    }
