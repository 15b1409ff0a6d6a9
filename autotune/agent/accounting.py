"""What the agent costs: tokens, cached tokens, dollars and latency per request, and per kernel per run.

Per request, `Usage` holds what the server reported; cached prompt tokens come from
`usage.prompt_tokens_details.cached_tokens`, which vLLM and SGLang only send when enabled
(`--enable-prompt-tokens-details`, `--enable-cache-report`), so their absence is recorded as unknown
rather than as zero hits. `summarize(records)` turns a run's ledger into the numbers a team needs to
decide whether the loop pays: tokens and dollars per accepted kernel (per passing kernel when nothing
could be timed, and it says which), the share spent on candidates that failed, and the prompt cache
hit rate.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Mapping


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
    def from_dict(cls, d: Mapping[str, Any] | None) -> "Usage":
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
    def from_cfg(cls, price: Mapping[str, Any] | None) -> "Price":
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
    """The run's agent accounting from its ledger's `llm` and `candidate` records (see loop.py)."""
    records = list(ledger_records)
    llm = [r for r in records if r.get("kind") == "llm"]
    candidates = [r for r in records if r.get("kind") == "candidate"]
    summary = _totals(llm)
    summary.update(_per_kernel(summary, candidates))
    summary.update(_failed_share(llm, candidates))
    summary["targets"] = {t: _totals([r for r in llm if r.get("target") == t])
                          for t in sorted({r.get("target") for r in llm if r.get("target")})}
    return summary


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
        "tokens": prompt + sum(int(r.get("completion_tokens") or 0) for r in llm),
        "dollars": round(sum(float(r.get("cost_usd") or 0.0) for r in llm), 6),
        "llm_latency_s": round(sum(float(r.get("latency_s") or 0.0) for r in llm), 3),
        # Over the requests whose server reported cached tokens; None when none did.
        "cache_hit_rate": round(cached / known_prompt, 4) if known_prompt else None,
        "cache_reported_requests": len(known),
    }


def _per_kernel(totals: Mapping[str, Any], candidates: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Tokens and dollars per accepted kernel; per passing kernel when nothing was accepted (CPU)."""
    accepted = {(r.get("target"), r.get("index")) for r in candidates if r.get("status") == "accepted"}
    passing = {(r.get("target"), r.get("index")) for r in candidates if r.get("status") in ("accepted", "unmeasured")}
    basis, kernels = ("accepted", accepted) if accepted or not passing else ("passing (unmeasured)", passing)
    n = len(kernels)
    return {
        "kernels_accepted": len(accepted),
        "kernels_passing": len(passing),
        "per_kernel_basis": basis,
        "tokens_per_kernel": round(totals["tokens"] / n, 1) if n else None,
        "dollars_per_kernel": round(totals["dollars"] / n, 6) if n else None,
    }


def _failed_share(llm: list[Mapping[str, Any]], candidates: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Share of tokens and dollars spent on conversations that ended without a passing kernel."""
    passed = {(r.get("target"), r.get("index")) for r in candidates if r.get("status") in ("accepted", "unmeasured")}
    failed = [r for r in llm if (r.get("target"), r.get("index")) not in passed]
    tokens = sum(int(r.get("prompt_tokens") or 0) + int(r.get("completion_tokens") or 0) for r in llm)
    dollars = sum(float(r.get("cost_usd") or 0.0) for r in llm)
    failed_tokens = sum(int(r.get("prompt_tokens") or 0) + int(r.get("completion_tokens") or 0) for r in failed)
    failed_dollars = sum(float(r.get("cost_usd") or 0.0) for r in failed)
    return {
        "failed_candidates": len({(r.get("target"), r.get("index")) for r in candidates} - passed),
        "failed_token_share": round(failed_tokens / tokens, 4) if tokens else None,
        "failed_dollar_share": round(failed_dollars / dollars, 4) if dollars else None,
    }
