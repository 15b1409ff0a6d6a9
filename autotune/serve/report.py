"""What a serving run measured: per-request timings and the latency figures derived from them.

All times are wall-clock seconds from the start of serving, in the scaled time the engine ran in
(arrival times divided by `serve.time_scale`). TTFT counts from a request's arrival, so time spent
queued behind a full batch is included; time per output token (TPOT) is per request, over the tokens
after the first: (finish - first token) / (output tokens - 1).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class Latency:
    """Percentiles over requests, in milliseconds; None where no request had a value."""

    p50: float | None
    p95: float | None
    p99: float | None
    mean: float | None

    @classmethod
    def of(cls, values_ms: Sequence[float]) -> Latency:
        if len(values_ms) == 0:
            return cls(None, None, None, None)
        p50, p95, p99 = np.percentile(np.asarray(values_ms, dtype=float), [50, 95, 99])
        return cls(float(p50), float(p95), float(p99), float(np.mean(values_ms)))


@dataclasses.dataclass(frozen=True)
class RequestStats:
    request_id: int
    prompt_tokens: int
    output_tokens: int
    arrival_s: float
    first_token_s: float
    finish_s: float
    token_times_s: tuple[float, ...]  # when each output token was sampled
    tokens: tuple[int, ...] = ()  # the generated token ids

    @property
    def ttft_ms(self) -> float:
        return 1e3 * (self.first_token_s - self.arrival_s)

    @property
    def tpot_ms(self) -> float | None:
        if self.output_tokens < 2:
            return None
        return 1e3 * (self.finish_s - self.first_token_s) / (self.output_tokens - 1)

    @property
    def e2e_ms(self) -> float:
        return 1e3 * (self.finish_s - self.arrival_s)


@dataclasses.dataclass(frozen=True)
class ServeReport:
    num_requests: int
    prompt_tokens: int
    output_tokens: int
    wall_s: float
    steps: int  # engine iterations (one model forward each)
    ttft_ms: Latency
    tpot_ms: Latency
    e2e_ms: Latency
    output_tokens_per_s: float
    requests: tuple[RequestStats, ...]

    @classmethod
    def from_requests(cls, stats: Sequence[RequestStats], wall_s: float, steps: int) -> ServeReport:
        stats = tuple(sorted(stats, key=lambda r: r.request_id))
        output_tokens = sum(r.output_tokens for r in stats)
        return cls(
            num_requests=len(stats),
            prompt_tokens=sum(r.prompt_tokens for r in stats),
            output_tokens=output_tokens,
            wall_s=wall_s,
            steps=steps,
            ttft_ms=Latency.of([r.ttft_ms for r in stats]),
            tpot_ms=Latency.of([r.tpot_ms for r in stats if r.tpot_ms is not None]),
            e2e_ms=Latency.of([r.e2e_ms for r in stats]),
            output_tokens_per_s=output_tokens / wall_s if wall_s > 0 else 0.0,
            requests=stats,
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ServeReport:
        fields = dict(d)
        for key in ("ttft_ms", "tpot_ms", "e2e_ms"):
            fields[key] = Latency(**fields[key])
        fields["requests"] = tuple(RequestStats(**{**r, "token_times_s": tuple(r["token_times_s"]),
                                                      "tokens": tuple(r.get("tokens", ()))})
                                   for r in fields["requests"])
        return cls(**fields)

    def requests_frame(self):
        """One row per request: ids, token counts, times (s) and ttft_ms, tpot_ms, e2e_ms."""
        import pandas as pd

        rows = [{**{k: v for k, v in dataclasses.asdict(r).items() if k not in ("token_times_s", "tokens")},
                 "ttft_ms": r.ttft_ms, "tpot_ms": r.tpot_ms, "e2e_ms": r.e2e_ms} for r in self.requests]
        return pd.DataFrame(rows)

    def summary(self) -> str:
        return (f"{self.num_requests} requests, {self.prompt_tokens} prompt + {self.output_tokens} output tokens "
                f"in {self.wall_s:.2f} s ({self.steps} steps): {self.output_tokens_per_s:.1f} output tokens/s")

    def table(self):
        """The latency figures as a rich Table (print it with rich.console.Console().print)."""
        from rich.table import Table

        table = Table(title="serving latency", caption=self.summary())
        table.add_column("ms", style="bold")
        for name in ("p50", "p95", "p99", "mean"):
            table.add_column(name, justify="right")
        for label, latency in (("TTFT", self.ttft_ms), ("TPOT", self.tpot_ms), ("end to end", self.e2e_ms)):
            table.add_row(label, *(_ms(getattr(latency, name)) for name in ("p50", "p95", "p99", "mean")))
        return table


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def print_report(report: ServeReport, console=None) -> None:
    from rich.console import Console

    (console or Console()).print(report.table())
