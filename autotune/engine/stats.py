"""What a load run against a live engine measured, per request and in all, as `vllm bench serve` counts it.

Per request, from the client's side of a streamed response (all times in seconds from the start of the run):
- TTFT: from sending the request to the first streamed chunk that carries a choice;
- ITL: the gaps between consecutive chunks after the first (one per chunk, as vLLM's benchmark keeps them);
- TPOT: (end to end - TTFT) / (output tokens - 1), the output tokens being the server's usage count;
- end to end: from sending to the last chunk that carries a choice.
A request fails when the server answers other than 200, the stream breaks, or no chunk ever carries a choice;
failed requests count in the error rate and in no latency. Throughput: output tokens of the successful requests
over the run's duration (first send to last answer).

    report = LoadReport.of(results, duration_s=12.5)
    report.table()              # a rich Table: TTFT / TPOT / ITL / end to end p50 p95 p99 mean, tokens/s, errors
    LoadReport.from_dict(report.to_dict()) == report
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence
from typing import Any

from autotune.serve.report import Latency


@dataclasses.dataclass(frozen=True)
class RequestResult:
    """One request as the client saw it."""

    request_id: int
    sent_s: float
    prompt_tokens: int  # the server's usage count where it gave one, else what was sent
    output_tokens: int
    chunk_s: tuple[float, ...] = ()  # when each chunk with a choice arrived
    error: str | None = None  # None: answered in full
    text: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.chunk_s)

    @property
    def ttft_ms(self) -> float | None:
        return 1e3 * (self.chunk_s[0] - self.sent_s) if self.ok else None

    @property
    def e2e_ms(self) -> float | None:
        return 1e3 * (self.chunk_s[-1] - self.sent_s) if self.ok else None

    @property
    def tpot_ms(self) -> float | None:
        e2e_ms, ttft_ms = self.e2e_ms, self.ttft_ms
        if e2e_ms is None or ttft_ms is None or self.output_tokens < 2:  # None: not ok
            return None
        return (e2e_ms - ttft_ms) / (self.output_tokens - 1)

    @property
    def itl_ms(self) -> list[float]:
        return [1e3 * (b - a) for a, b in zip(self.chunk_s, self.chunk_s[1:])] if self.ok else []

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RequestResult:
        return cls(**{**d, "chunk_s": tuple(d.get("chunk_s") or ())})


@dataclasses.dataclass(frozen=True)
class LoadReport:
    num_requests: int
    failed: int
    duration_s: float
    prompt_tokens: int
    output_tokens: int  # of the successful requests
    output_tokens_per_s: float
    requests_per_s: float  # successful requests per second
    ttft_ms: Latency
    tpot_ms: Latency
    itl_ms: Latency
    e2e_ms: Latency
    errors: tuple[tuple[str, int], ...] = ()  # (first line of the error, how many), most frequent first
    requests: tuple[RequestResult, ...] = ()

    @property
    def error_rate(self) -> float:
        return self.failed / self.num_requests if self.num_requests else 0.0

    @classmethod
    def of(cls, results: Sequence[RequestResult], duration_s: float) -> LoadReport:
        results = tuple(sorted(results, key=lambda r: r.request_id))
        ok = [r for r in results if r.ok]
        out = sum(r.output_tokens for r in ok)
        errors = collections.Counter(_first_line(r.error or "no chunk with a choice") for r in results if not r.ok)
        rate = (lambda n: n / duration_s if duration_s > 0 else 0.0)
        return cls(num_requests=len(results), failed=len(results) - len(ok), duration_s=duration_s,
                   prompt_tokens=sum(r.prompt_tokens for r in results), output_tokens=out,
                   output_tokens_per_s=rate(out), requests_per_s=rate(len(ok)),
                   ttft_ms=Latency.of([r.ttft_ms for r in ok if r.ttft_ms is not None]),  # every one: ok
                   tpot_ms=Latency.of([r.tpot_ms for r in ok if r.tpot_ms is not None]),
                   itl_ms=Latency.of([x for r in ok for x in r.itl_ms]),
                   e2e_ms=Latency.of([r.e2e_ms for r in ok if r.e2e_ms is not None]),
                   errors=tuple(errors.most_common()), requests=results)

    def to_dict(self, *, with_requests: bool = True) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["error_rate"] = self.error_rate
        d["errors"] = [{"error": e, "count": n} for e, n in self.errors]
        if not with_requests:
            d.pop("requests")
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LoadReport:
        fields = {k: v for k, v in d.items() if k in {f.name for f in dataclasses.fields(cls)}}
        for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            fields[key] = Latency(**fields[key])
        fields["errors"] = tuple((e["error"], int(e["count"])) for e in fields.get("errors") or ())
        fields["requests"] = tuple(RequestResult.from_dict(r) for r in fields.get("requests") or ())
        return cls(**fields)

    def summary(self) -> str:
        return (f"{self.num_requests} requests ({self.failed} failed, {100 * self.error_rate:.1f}%), "
                f"{self.output_tokens} output tokens in {self.duration_s:.2f} s: {self.output_tokens_per_s:.1f} "
                f"output tokens/s, {self.requests_per_s:.2f} requests/s")

    def table(self, title: str = "serving latency (client side, streamed)"):
        """The figures as a rich Table."""
        from rich.table import Table

        table = Table(title=title, caption=self.summary())
        table.add_column("ms", style="bold")
        for name in ("p50", "p95", "p99", "mean"):
            table.add_column(name, justify="right")
        for label, latency in (("TTFT", self.ttft_ms), ("TPOT", self.tpot_ms), ("ITL", self.itl_ms),
                               ("end to end", self.e2e_ms)):
            table.add_row(label, *(_ms(getattr(latency, name)) for name in ("p50", "p95", "p99", "mean")))
        for error, n in self.errors[:3]:
            table.add_row(f"error ×{n}", error[:60], "", "", "")
        return table


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _first_line(text: str, limit: int = 200) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "error"
    return line[:limit]
