"""The workload: the stream of requests the served model answers, from `cfg.workload` (conf/workload/).

Either sampled — `num_requests`; `prompt_len` and `output_len` each `{dist: fixed, value}`,
`{dist: uniform, low, high}` (inclusive) or `{dist: lognormal, median, sigma, max}`; `arrival`
`{mode: poisson, rate_per_s}` (rate 0 = all at once), `{mode: concurrency, concurrency: N}` (closed loop:
N users, each sending its next request when the previous one finishes) or `{mode: burst}` — or replayed:
`replay: PATH`, a JSONL file with one `{"arrival_s": 0.5, "prompt_len": 812, "output_len": 96}` per
request (recorded traffic; `num_requests` then keeps the first N lines, null keeps all). Prompt token
ids are seeded random (`seed`). A request whose prompt + output exceeds the model's max_seq_len is scaled
down to fit.

    requests = make_requests(compose(["workload=chat"]).workload, vocab_size=512, max_seq_len=512)
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from autotune.config import as_dict
from autotune.errors import UserError
from autotune.serve.engine import Request

log = logging.getLogger(__name__)

DISTS = {"fixed": ("value",), "uniform": ("low", "high"), "lognormal": ("median", "sigma", "max")}
ARRIVAL_MODES = ("poisson", "concurrency", "burst")
REPLAY_LINE = '{"arrival_s": 0.5, "prompt_len": 128, "output_len": 32}'


def make_requests(workload_cfg, vocab_size: int, max_seq_len: int) -> list[Request]:
    """The requests of this workload, reproducible from its seed; a UserError for a bad workload."""
    w = _as_dict(workload_cfg)
    rng = np.random.default_rng(w.get("seed") or 0)
    replay = w.get("replay")
    if replay == "???":
        raise UserError("workload.replay is not set (give workload.replay=path/to/requests.jsonl)")
    if replay:
        arrivals, prompt_lens, output_lens = read_replay(replay, w.get("num_requests"))
        after: list[int | None] = [None] * len(arrivals)
    else:
        n = _num_requests(w.get("num_requests"))
        prompt_lens = sample_lengths(w.get("prompt_len"), n, rng, "workload.prompt_len")
        output_lens = sample_lengths(w.get("output_len"), n, rng, "workload.output_len")
        arrivals, after = sample_arrivals(w.get("arrival"), n, rng)
    prompt_lens, output_lens = clip_lengths(prompt_lens, output_lens, max_seq_len)
    return [Request(i, tuple(rng.integers(0, vocab_size, p).tolist()), o, a, f)
            for i, (p, o, a, f) in enumerate(zip(prompt_lens, output_lens, arrivals, after))]


def _as_dict(cfg) -> dict[str, Any]:
    return as_dict(cfg)  # a missing value (???) stays the string "???"


def _num_requests(n) -> int:
    if n is None or int(n) <= 0:
        raise UserError("workload has no requests: set workload.num_requests > 0")
    return int(n)


def sample_lengths(spec: Any, n: int, rng: np.random.Generator, key: str) -> list[int]:
    """n token counts >= 1 drawn from a `{dist: ...}` spec."""
    if not isinstance(spec, dict) or "dist" not in spec:
        raise UserError(f"{key} must be a mapping with a dist (e.g. {{dist: uniform, low: 16, high: 96}})")
    dist = spec["dist"]
    if dist not in DISTS:
        raise UserError(f"unknown {key} dist '{dist}' (use {', '.join(DISTS)})")
    missing = [p for p in DISTS[dist] if spec.get(p) is None]
    if missing:
        raise UserError(f"{key}: dist {dist} needs {', '.join(DISTS[dist])} (missing {', '.join(missing)})")
    if dist == "fixed":
        values = np.full(n, int(spec["value"]))
    elif dist == "uniform":
        low, high = int(spec["low"]), int(spec["high"])
        if low > high:
            raise UserError(f"{key}: uniform low={low} is above high={high} (swap them)")
        values = rng.integers(low, high + 1, n)
    else:
        if spec["median"] <= 0 or spec["sigma"] < 0:
            raise UserError(f"{key}: lognormal needs median > 0 and sigma >= 0")
        values = np.rint(spec["median"] * np.exp(spec["sigma"] * rng.standard_normal(n)))
        values = np.minimum(values, int(spec["max"]))
    if values.min() < 1:
        raise UserError(f"{key}: {dist} gives lengths below 1 token (every prompt and output needs >= 1)")
    return [int(v) for v in values]


def sample_arrivals(spec: Any, n: int, rng: np.random.Generator) -> tuple[list[float], list[int | None]]:
    """(arrival_s, after) per request: Poisson arrival times, all at 0 (burst), or closed-loop chains."""
    mode = spec.get("mode") if isinstance(spec, dict) else None
    if mode not in ARRIVAL_MODES:
        raise UserError(f"unknown workload.arrival mode '{mode}' (use {', '.join(ARRIVAL_MODES)})")
    if mode == "concurrency":
        users = int(spec.get("concurrency") or 0)
        if users < 1:
            raise UserError("workload.arrival.concurrency must be >= 1 (the number of requests kept in flight)")
        return [0.0] * n, [i - users if i >= users else None for i in range(n)]
    rate = float(spec.get("rate_per_s") or 0.0) if mode == "poisson" else 0.0
    if rate < 0:
        raise UserError(f"workload.arrival.rate_per_s={rate} is negative (use > 0, or 0 for all at once)")
    if rate == 0 or not np.isfinite(rate):
        return [0.0] * n, [None] * n
    gaps = rng.exponential(1.0 / rate, n)
    return [0.0, *np.cumsum(gaps[:-1]).tolist()], [None] * n


def read_replay(path, num_requests) -> tuple[list[float], list[int], list[int]]:
    """(arrival_s, prompt_len, output_len) per line of a replay JSONL file; a UserError names a bad line."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise UserError(f"workload.replay: no file at {file} (give a JSONL file with one {REPLAY_LINE} per line)")
    arrivals: list[float] = []
    prompts: list[int] = []
    outputs: list[int] = []
    with file.open(encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            if num_requests is not None and len(arrivals) >= int(num_requests):
                break
            if not line.strip():
                continue
            arrival, prompt, output = _replay_line(line, f"workload.replay {file} line {number}")
            arrivals.append(arrival)
            prompts.append(prompt)
            outputs.append(output)
    if not arrivals:
        raise UserError(f"workload has no requests: {file} has no request lines"
                        if num_requests is None or int(num_requests) > 0 else
                        "workload has no requests: set workload.num_requests > 0 (or null for the whole file)")
    return arrivals, prompts, outputs


def _replay_line(line: str, where: str) -> tuple[float, int, int]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise UserError(f"{where}: not JSON ({e.msg}); each line is one object like {REPLAY_LINE}") from None
    if not isinstance(row, dict):
        raise UserError(f"{where}: a JSON {type(row).__name__}, not an object like {REPLAY_LINE}")
    for key in ("arrival_s", "prompt_len", "output_len"):
        value = row.get(key)
        if key not in row or isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"{where}: '{key}' is {'missing' if key not in row else repr(value)}; it must be a number")
    if row["arrival_s"] < 0 or not np.isfinite(row["arrival_s"]):
        raise UserError(f"{where}: arrival_s={row['arrival_s']} (must be a finite time >= 0 in seconds)")
    for key in ("prompt_len", "output_len"):
        if row[key] != int(row[key]) or row[key] < 1:
            raise UserError(f"{where}: {key}={row[key]} (must be a whole number of tokens >= 1)")
    return float(row["arrival_s"]), int(row["prompt_len"]), int(row["output_len"])


def clip_lengths(prompt_lens: list[int], output_lens: list[int], max_seq_len: int) -> tuple[list[int], list[int]]:
    """Shrink prompt and output of a too-long request by the same factor so that it fits max_seq_len.

    Proportional, so a chat workload on the tiny model keeps its prompt/output mix instead of
    becoming 511-token prompts with 1-token answers. Says once how many requests were clipped.
    """
    prompts, outputs, changed = [], [], 0
    for p, o in zip(prompt_lens, output_lens):
        if p + o > max_seq_len:
            changed += 1
            p = min(max(1, p * max_seq_len // (p + o)), max_seq_len - 1)
            o = max(1, min(o, max_seq_len - p))
        prompts.append(p)
        outputs.append(o)
    if changed:
        log.warning("%d of %d requests were clipped so that prompt + output fits model.max_seq_len=%d",
                    changed, len(prompt_lens), max_seq_len)
    return prompts, outputs
