"""The requests a live engine is sent: the configured workload (conf/workload/), or an agent run's own traffic.

- The sampled and replayed workloads (`workload=mixed|chat|replay`) are the built-in engine's own
  (autotune/serve/workload.py: lengths, Poisson arrivals or fixed concurrency, replay files), sent to
  `/v1/completions` as token ids, `max_tokens` the output length and `ignore_eos` so that every request
  produces that many tokens (as `vllm bench serve` does with random prompts). Token ids are drawn below the
  model's vocabulary size (engine.vocab_size, or the config.json of the model folder: engine.model's, or the one
  a running server names at /v1/models).
- `workload=agent workload.transcript=PATH` replays the requests of an agent run (`transcript.jsonl`): each
  exchange's messages to `/v1/chat/completions`, with its max_tokens; by default as many output tokens as the
  recorded reply had (`workload.output_tokens=recorded`, with ignore_eos; `limit`: up to max_tokens, the
  model deciding). Arrivals: `chains` (each conversation's turns one after another, the conversations side by
  side: the agent's pattern without the checker's pauses) or `recorded` (at the recorded start times, divided
  by `serve.time_scale`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from autotune import ledger as ledger_mod
from autotune.config import as_dict
from autotune.errors import UserError


@dataclasses.dataclass(frozen=True)
class EngineRequest:
    request_id: int
    max_tokens: int
    arrival_s: float = 0.0
    after: int | None = None  # closed loop: sent when this request has been answered
    prompt_ids: tuple[int, ...] = ()  # /v1/completions
    messages: tuple[dict, ...] = ()  # /v1/chat/completions
    ignore_eos: bool = True

    @property
    def chat(self) -> bool:
        return bool(self.messages)


def engine_requests(workload: DictConfig, vocab_size: int | None, max_model_len: int | None,
                    time_scale: float = 1.0) -> list[EngineRequest]:
    """The workload's requests for a live engine; a UserError says what is missing."""
    w = as_dict(workload)
    if w.get("name") == "agent" or "transcript" in w:
        return agent_requests(w, time_scale)
    if not vocab_size:
        raise UserError("the prompts' token ids need the model's vocabulary size, and the server did not name a "
                        "model folder on this machine at /v1/models (vLLM's \"root\"): set engine.vocab_size=N, or "
                        "engine.model=<the model folder> (its config.json has it)")
    from autotune.serve.workload import make_requests

    made = make_requests(workload, int(vocab_size), int(max_model_len or 1 << 30))
    return [EngineRequest(r.request_id, r.output_len, r.arrival_s / time_scale, r.after, tuple(r.prompt))
            for r in made]


def agent_requests(w: dict[str, Any], time_scale: float = 1.0) -> list[EngineRequest]:
    """The exchanges of an agent run's transcript as requests (see the module doc)."""
    path = w.get("transcript")
    if path in (None, "", "???"):
        raise UserError("workload=agent needs workload.transcript=<a run directory>/transcript.jsonl")
    path = Path(str(path)).expanduser()
    if path.is_dir():
        path = path / "transcript.jsonl"
    if not path.is_file():
        raise UserError(f"workload.transcript={path}: no such file (an agent run's transcript.jsonl)")
    exchanges = [r for r in ledger_mod.read(path) if r.get("kind") == "exchange" and r.get("messages")]
    if w.get("num_requests"):
        exchanges = exchanges[: int(w["num_requests"])]
    if not exchanges:
        raise UserError(f"workload.transcript={path} holds no exchange with messages (was it an agent=openai run?)")
    recorded = str(w.get("output_tokens") or "recorded")
    if recorded not in ("recorded", "limit"):
        raise UserError(f"workload.output_tokens={recorded} (use recorded or limit)")
    mode = str((w.get("arrival") or {}).get("mode") or "chains")
    if mode not in ("chains", "recorded"):
        raise UserError(f"workload.arrival.mode={mode} for workload=agent (use chains or recorded)")
    starts = _start_times(exchanges)
    last: dict[tuple, int] = {}
    requests = []
    for i, r in enumerate(exchanges):
        conversation = (r.get("target"), r.get("index"))
        limit = int((r.get("params") or {}).get("max_tokens") or 1024)
        out = int((r.get("usage") or {}).get("completion_tokens") or 0)
        max_tokens = max(1, min(out, limit) if recorded == "recorded" and out else limit)
        chained = mode == "chains"
        requests.append(EngineRequest(i, max_tokens, 0.0 if chained else starts[i] / time_scale,
                                      last.get(conversation) if chained else None,
                                      messages=tuple(dict(m) for m in r["messages"]),
                                      ignore_eos=recorded == "recorded" and bool(out)))
        last[conversation] = i
    return requests


def _start_times(exchanges: list[dict]) -> list[float]:
    """Each exchange's start (its record's time less its latency) in seconds from the first one's."""
    starts = []
    for r in exchanges:
        try:
            at = dt.datetime.fromisoformat(str(r["ts"])).timestamp() - float(r.get("latency_s") or 0.0)
        except (KeyError, ValueError):
            at = 0.0
        starts.append(at)
    first = min(starts)
    return [max(0.0, s - first) for s in starts]


def model_vocab_size(model: str | None) -> int | None:
    """vocab_size from a local model folder's config.json, None when it is not one."""
    config = Path(model).expanduser() / "config.json" if model else None
    if config is None or not config.is_file():
        return None
    try:
        data = json.loads(config.read_text())
        return int(data.get("vocab_size") or data.get("text_config", {}).get("vocab_size"))
    except (OSError, ValueError, TypeError, json.JSONDecodeError):
        return None
