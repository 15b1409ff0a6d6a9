"""The agent's LLM clients (`agent=openai|replay|search`) and the transcript of every exchange.

- `openai`: the official openai client against any OpenAI-compatible endpoint (a hosted API, vLLM,
  SGLang, llama.cpp, Ollama). It retries 429 and 5xx with backoff and honours Retry-After (up to the
  client's 120 s cap; a longer wait is reported, not slept). A dead or wrong endpoint is a `UserError`
  that names the URL and what came back.
- `replay`: sends nothing; answers each request from a transcript recorded by an earlier run, matched on
  its replay key (`replay_key`): the slot, the system and task messages and the model's replies byte for
  byte, and each feedback message by the checker's status alone, since the feedback quotes the checker's
  per-run salted case values and its timings, which no rerun reproduces.
- `search`: no LLM; candidate i of a target is the i-th template of `autotune.agent.search`.

Every exchange goes to `<run_dir>/transcript.jsonl` (messages, parameters, reply, usage, latency and the
request's hash). A request whose hash is already in the run's own transcript is answered from it, so a
resumed run never sends the same request twice. The API key is read once, from the environment variable
named by `agent.api_key_env`, and registered with `ledger.redact` so that no record can contain it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any, Protocol

from omegaconf import DictConfig, OmegaConf

from autotune import ledger as ledger_mod
from autotune.agent.accounting import Price, Usage, usage_from_response
from autotune.errors import UserError

TRANSCRIPT = "transcript.jsonl"


@dataclasses.dataclass(frozen=True)
class Slot:
    """Where a request belongs: target, candidate index, turn (1-based), and the checker's status on each
    earlier turn of the conversation (`incorrect`, `no_code`, ...): what replay matches feedback on."""

    target: str
    index: int
    turn: int
    outcomes: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Exchange:
    text: str
    usage: Usage
    cost_usd: float
    latency_s: float
    request_sha256: str
    model: str
    source: str  # live | transcript (answered from this run's transcript) | replay | search
    finish_reason: str | None = None


class Client(Protocol):
    name: str
    model: str

    def plan(self, target: str, candidates: int, turns: int) -> tuple[int, int]:
        """(candidates, turns) this client can serve for the configured ones."""

    def complete(self, messages: list[dict[str, str]], slot: Slot) -> Exchange: ...


class EndOfRecording(Exception):
    """Replay reached a turn the recorded run never asked for (it stopped there): the conversation ends."""


def request_sha256(messages: list[dict[str, str]]) -> str:
    """The request's identity: its messages, canonically encoded (model and parameters are checked apart)."""
    blob = json.dumps(messages, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def replay_key(messages: list[dict[str, str]], slot: Slot) -> str:
    """What replay matches a request on: what a rerun of the same conversation reproduces.

    The slot, the system and task messages and the model's replies count byte for byte; each feedback
    message (a user message after the task) counts by its turn's outcome in `slot.outcomes` alone, since
    its text quotes case values drawn with the checker's secret per-run salt, and timings. A feedback
    message without an outcome counts byte for byte.
    """
    outcomes = iter(slot.outcomes)
    stable = []
    for i, m in enumerate(messages):
        outcome = next(outcomes, None) if i >= 2 and m.get("role") == "user" else None
        stable.append({"role": "user", "outcome": outcome} if outcome is not None else m)
    blob = json.dumps({"slot": [slot.target, slot.index, slot.turn], "messages": stable}, ensure_ascii=False,
                      sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


class Transcript:
    """A run's exchanges, appended as JSON lines through a `Ledger` (which refuses secrets)."""

    def __init__(self, path: Path, *, writable: bool = True):
        self.path = Path(path)
        self._ledger = ledger_mod.Ledger(self.path) if writable else None
        self._lock = threading.Lock()
        self._by_hash: dict[str, list[dict[str, Any]]] = {}
        self._by_key: dict[str, dict[str, Any]] = {}
        for r in ledger_mod.read(self.path):
            if r.get("kind") == "exchange" and r.get("request_sha256"):
                self._index(r)

    def _index(self, rec: dict[str, Any]) -> None:
        self._by_hash.setdefault(rec["request_sha256"], []).append(rec)
        if rec.get("replay_key"):  # transcripts recorded before replay keys have none: matched by hash
            self._by_key.setdefault(rec["replay_key"], rec)

    def lookup(self, sha: str, model: str | None = None) -> dict[str, Any] | None:
        """The first recorded exchange of this request (answered by `model`, when given)."""
        with self._lock:
            return next((r for r in self._by_hash.get(sha, []) if model is None or r.get("model") == model), None)

    def lookup_key(self, key: str) -> dict[str, Any] | None:
        """The first recorded exchange with this replay key."""
        with self._lock:
            return self._by_key.get(key)

    def record(self, slot: Slot, messages: list[dict[str, str]], params: dict[str, Any], ex: Exchange) -> None:
        if self._ledger is None or self.lookup(ex.request_sha256, ex.model) is not None:
            return  # read-only, or recorded already (a resumed replay)
        rec = self._ledger.append(
            "exchange", target=slot.target, index=slot.index, turn=slot.turn, request_sha256=ex.request_sha256,
            replay_key=replay_key(messages, slot), outcomes=list(slot.outcomes), model=ex.model, params=params,
            messages=messages, response=ex.text, finish_reason=ex.finish_reason,
            usage=ex.usage.to_dict(), cost_usd=ex.cost_usd, latency_s=round(ex.latency_s, 3), source=ex.source)
        with self._lock:
            self._index(rec)


def exchange_from_record(rec: dict[str, Any], source: str) -> Exchange:
    return Exchange(text=rec.get("response") or "", usage=Usage.from_dict(rec.get("usage")),
                    cost_usd=float(rec.get("cost_usd") or 0.0), latency_s=float(rec.get("latency_s") or 0.0),
                    request_sha256=rec["request_sha256"], model=str(rec.get("model") or ""), source=source,
                    finish_reason=rec.get("finish_reason"))


def make(cfg: DictConfig, run_dir: Path, target: str) -> Client:
    """The client that `agent.name` selects, recording to the run's transcript."""
    agent = cfg.agent
    name = agent.get("name", "search")
    if name == "search":
        return SearchClient(target, int(agent.candidates))
    own = Transcript(_transcript_path(agent, run_dir))
    if name == "replay":
        return ReplayClient(_required(agent, "transcript"), own)
    if name == "openai":
        return OpenAIClient(agent, own)
    raise UserError(f"unknown agent '{name}' (use agent=openai, agent=replay or agent=search)")


# What each agent needs set, with the override that sets it (the openai preset leaves them ??? on purpose).
REQUIRED = {"openai": {"base_url": "agent.base_url=http://127.0.0.1:8000/v1",
                       "model": "agent.model=<a model the server serves>"},
            "replay": {"transcript": "agent.transcript=<a recorded run>/transcript.jsonl"}}


def settings_problems(agent: DictConfig, *, engine_serves: bool = False) -> list[str]:
    """What is missing or contradictory in the agent's settings, found before a run does any work (the clients
    raise the same errors later, for callers that build them directly). With `engine_serves` (a live engine serves
    the run) an unset agent.base_url and agent.model are the engine's, filled in when it is up."""
    name = agent.get("name", "search")
    if name not in ("search", *REQUIRED):
        return [f"unknown agent '{name}' (use agent=openai, agent=replay or agent=search)"]
    filled = ("base_url", "model") if engine_serves and name == "openai" else ()
    problems = [f"agent.{key} is not set (pass {example})" for key, example in REQUIRED.get(name, {}).items()
                if key not in filled and unset(agent, key)]
    if name == "replay" and not problems and not Path(str(agent.transcript)).is_file():
        problems.append(f"agent.transcript: no transcript at {agent.transcript} (point it at a recorded run's "
                        "transcript.jsonl)")
    for key in ("candidates", "turns"):
        value = agent.get(key, 1)
        if not isinstance(value, int) or value < 1:
            problems.append(f"agent.{key}={value!r}: give a whole number of at least 1")
    return problems


def endpoint_problem(agent: DictConfig) -> str:
    """For agent=openai: why its endpoint cannot serve the run, asked before any work
    (`OpenAIClient.endpoint_problem`); "" otherwise."""
    if agent.get("name") != "openai" or unset(agent, "base_url") or unset(agent, "model"):
        return ""
    return OpenAIClient(agent, Transcript(Path(os.devnull), writable=False)).endpoint_problem()


def _transcript_path(agent: DictConfig, run_dir: Path) -> Path:
    own = agent.get("transcript") if agent.get("name") == "openai" else None
    path = Path(own or TRANSCRIPT)
    return path if path.is_absolute() else Path(run_dir) / path


def unset(agent: DictConfig, key: str) -> bool:
    """Whether agent.<key> is absent, left ??? or empty."""
    return key not in agent or OmegaConf.is_missing(agent, key) or agent.get(key) in (None, "")


def _required(agent: DictConfig, key: str) -> str:
    if unset(agent, key):
        raise UserError(f"agent.{key} is not set (pass {REQUIRED[agent.name][key]} on the command line)")
    return str(agent.get(key))


class OpenAIClient:
    name = "openai"

    def __init__(self, agent: DictConfig, transcript: Transcript):
        self.base_url = _required(agent, "base_url")
        self.model = _required(agent, "model")
        self.key_env = str(agent.get("api_key_env") or "OPENAI_API_KEY")
        key = os.environ.get(self.key_env) or None  # the one read of the key; it stays in memory only
        ledger_mod.redact(key)
        self.timeout_s = float(agent.get("timeout_s") or 300)
        self.max_retries = int(agent.get("max_retries", 2))
        self.stream = bool(agent.get("stream", False))
        self.params = {k: agent.get(k) for k in ("temperature", "max_tokens") if agent.get(k) is not None}
        self.price = Price.from_cfg(agent.get("price"))
        self.transcript = transcript
        import openai

        for name in ("httpx", "httpx2"):  # a line per request under Hydra's INFO logging; openai's retries stay
            logging.getLogger(name).setLevel(logging.WARNING)
        # Local servers (vLLM, llama.cpp, Ollama) take any key; the client insists on one.
        self._client = openai.OpenAI(api_key=key or "no-key", base_url=self.base_url, timeout=self.timeout_s,
                                     max_retries=self.max_retries)

    def plan(self, target: str, candidates: int, turns: int) -> tuple[int, int]:
        return candidates, turns

    def complete(self, messages: list[dict[str, str]], slot: Slot) -> Exchange:
        sha = request_sha256(messages)
        seen = self.transcript.lookup(sha, self.model)
        if seen is not None:
            return exchange_from_record(seen, "transcript")
        start = time.monotonic()
        try:
            text, finish, usage = self._stream(messages) if self.stream else self._once(messages)
        except Exception as e:  # noqa: BLE001 (openai's errors are turned into one line that says what to do)
            raise self._explain(e) from None
        ex = Exchange(text=text, usage=usage, cost_usd=self.price.cost_usd(usage), latency_s=time.monotonic() - start,
                      request_sha256=sha, model=self.model, source="live", finish_reason=finish)
        self.transcript.record(slot, messages, {**self.params, "stream": self.stream}, ex)
        return ex

    def _once(self, messages) -> tuple[str, str | None, Usage]:
        resp = self._client.chat.completions.create(model=self.model, messages=messages, **self.params)
        choice = resp.choices[0] if resp.choices else None
        text = (choice.message.content or "") if choice else ""
        return text, choice.finish_reason if choice else None, usage_from_response(resp.usage)

    def _stream(self, messages) -> tuple[str, str | None, Usage]:
        parts, finish, usage = [], None, None
        stream = self._client.chat.completions.create(model=self.model, messages=messages, stream=True,
                                                      stream_options={"include_usage": True}, **self.params)
        for chunk in stream:
            usage = chunk.usage or usage  # the last chunk carries the usage, with no choices
            for choice in chunk.choices:
                if choice.delta is not None and choice.delta.content:
                    parts.append(choice.delta.content)
                finish = choice.finish_reason or finish
        return "".join(parts), finish, usage_from_response(usage)

    def endpoint_problem(self) -> str:
        """Why the endpoint cannot serve this run, found by asking it for its model list (no retries, at most 10 s):
        unreachable, no answer, a refused key, or a model list without agent.model; "" when it answers (a server
        without a model list answers too)."""
        import openai

        try:
            listed = self._client.with_options(timeout=min(self.timeout_s, 10.0), max_retries=0).models.list()
            served = [m.id for m in listed.data]
        except openai.APIStatusError as e:
            return self._status_message(e, _display_url(self.base_url)) if e.status_code in (401, 403) else ""
        except openai.APIError as e:
            return str(self._explain(e)).replace(f"after {self.max_retries} retries ", "")
        if served and self.model not in served:
            return (f"the LLM endpoint {_display_url(self.base_url)} does not serve agent.model={self.model} (it "
                    f"serves {', '.join(served[:10])}{' ...' if len(served) > 10 else ''})")
        return ""

    def _explain(self, e: Exception) -> Exception:
        import openai

        url = _display_url(self.base_url)
        if isinstance(e, openai.APITimeoutError):
            return UserError(f"no answer from the LLM endpoint {url} within agent.timeout_s={self.timeout_s:g} s "
                             f"after {self.max_retries} retries (check the server, or raise agent.timeout_s)")
        if isinstance(e, openai.APIConnectionError):
            cause = e.__cause__ or e.__context__ or e
            return UserError(f"cannot reach the LLM endpoint {url}: {type(cause).__name__}: {_one_line(cause)} "
                             f"(start the server or fix agent.base_url)")
        if isinstance(e, openai.APIStatusError):
            return UserError(self._status_message(e, url))
        return e  # anything else is a bug and keeps its traceback

    def _status_message(self, e, url: str) -> str:
        code, body = e.status_code, _body(e.response)
        said = f"the LLM endpoint {url} answered {code}: {body}"
        if code in (401, 403):
            return f"{said} (put the API key in the environment variable {self.key_env}, named by agent.api_key_env)"
        if code == 404:
            return (f"{said} (agent.base_url must be the API root, usually ending in /v1, "
                    f"and agent.model a model it serves)")
        if code == 429:
            wait = e.response.headers.get("retry-after")
            asked = f"; it asked to wait {wait} s" if wait else ""
            return (f"{said} after {self.max_retries} retries{asked} "
                    f"(wait and resume the run, or raise agent.max_retries)")
        if code >= 500:
            return f"{said} after {self.max_retries} retries (check the server's log, then resume the run)"
        return f"{said} (check agent.model, agent.max_tokens and agent.temperature for this server)"


def _display_url(url: str) -> str:
    """The URL without user:password or query, where some services take a key."""
    parts = urllib.parse.urlsplit(url)
    netloc = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _body(response) -> str:
    try:
        text = response.text
    except Exception:  # noqa: BLE001 (any failure to read the body: the message says empty)
        text = ""
    return _one_line(text) or "(empty body)"


def _one_line(x: Any, limit: int = 200) -> str:
    text = " ".join(str(x).split())
    return text if len(text) <= limit else text[:limit] + "..."


class ReplayClient:
    """Answers from a recorded transcript, matched by the request's replay key (`replay_key`); sends nothing."""

    name = "replay"

    def __init__(self, source: str, own: Transcript):
        self.source = Path(source)
        if not self.source.is_file():
            raise UserError(f"no transcript at {self.source} (agent.transcript must point at a recorded run's "
                            f"transcript.jsonl)")
        self.recorded = Transcript(self.source, writable=False)
        same = own.path.resolve() == self.source.resolve()
        self.own = Transcript(own.path, writable=False) if same else own
        self.model = "replay"
        self.slots = {(str(r["target"]), int(r["index"]), int(r["turn"])) for r in ledger_mod.read(self.source)
                      if r.get("kind") == "exchange"}  # Transcript.record writes all three

    def plan(self, target: str, candidates: int, turns: int) -> tuple[int, int]:
        """The recorded run's candidates and turns: its task messages say "candidate i of n"."""
        mine = [(i, t) for (name, i, t) in self.slots if name == target]
        if not mine:
            held = sorted({str(name) for (name, _, _) in self.slots})
            raise UserError(f"{self.source} holds no request for target {target} (it holds "
                            f"{', '.join(held) or 'none'}; replay the recorded run's targets, e.g. "
                            f"targets=[{','.join(held)}])")
        return max(i for i, _ in mine) + 1, max(t for _, t in mine)

    def complete(self, messages: list[dict[str, str]], slot: Slot) -> Exchange:
        sha = request_sha256(messages)
        # By key first; a transcript recorded before replay keys is matched on the request's bytes.
        rec = self.recorded.lookup_key(replay_key(messages, slot)) or self.recorded.lookup(sha)
        if rec is None and (slot.target, slot.index, slot.turn) not in self.slots:
            raise EndOfRecording(f"{slot.target} candidate {slot.index} turn {slot.turn}")
        if rec is None:
            raise UserError(f"{self.source} has no recorded answer for {slot.target} candidate {slot.index} turn "
                            f"{slot.turn}: {_difference(self.source, messages, slot)}")
        # This run's own hash: the new transcript stays consistent, and replayable in its turn.
        ex = dataclasses.replace(exchange_from_record(rec, "replay"), latency_s=0.0, request_sha256=sha)
        self.own.record(slot, messages, dict(rec.get("params") or {}), ex)
        return ex


_WHY_DIFFERENT = {0: ("the system prompt", "another version of prompts/"),
                  1: ("the task", "another profile, so pass the recorded run's trace=..., or other targets, "
                                  "candidates or incumbent")}
_TO_DO = "replay needs the recorded run's profile, prompts, config and checker"


def _difference(path: Path, messages: list[dict[str, str]], slot: Slot) -> str:
    """What differs between this request and the recorded one for the same slot, and what to do."""
    rec = next((r for r in ledger_mod.read(path) if r.get("kind") == "exchange"
                and (r.get("target"), r.get("index"), r.get("turn")) == (slot.target, slot.index, slot.turn)), None)
    if rec is None:
        return f"the recording has no request for this slot ({_TO_DO})"
    recorded, outcomes = rec.get("messages") or [], rec.get("outcomes")
    for i, (a, b) in enumerate(zip(recorded, messages)):
        turn = i // 2  # messages 3 and 4 (i = 2, 3) are turn 1's reply and its feedback
        if i < 2 and a != b:
            what, why = _WHY_DIFFERENT[i]
            return f"{what} differs at message {i + 1} ({why}; {_TO_DO})"
        if i >= 2 and a.get("role") == "assistant" and a != b:
            return f"the model's reply at turn {turn} differs at message {i + 1} ({_TO_DO})"
        if i >= 2 and a.get("role") == "user":
            why = _feedback_difference(a, b, i + 1, outcomes, slot.outcomes)
            if why:
                return why
    if len(recorded) != len(messages):
        return f"the recorded request has {len(recorded)} messages, this one {len(messages)} ({_TO_DO})"
    return "the recorded request was keyed otherwise (recorded by another version of autotune: replay it with that one)"


def _feedback_difference(a: dict, b: dict, at: int, recorded: list | None, now: tuple[str, ...]) -> str:
    """Why the feedback at message `at` (1-based) does not match: its turn's outcome or, without one, its text."""
    turn = (at - 1) // 2
    if recorded is not None and len(recorded) >= turn and len(now) >= turn:
        if recorded[turn - 1] != now[turn - 1]:
            return (f"the checker judged turn {turn}'s file {now[turn - 1]}, the recorded run's checker "
                    f"{recorded[turn - 1]}, at message {at} (another checker version or verify.* settings; {_TO_DO})")
        return ""
    if a == b:
        return ""
    if recorded is None:
        return (f"the feedback on turn {turn} differs at message {at} (the transcript predates replay keys, so its "
                f"feedback must match byte for byte: replay it with the checker version that recorded it)")
    return (f"the feedback on turn {turn} differs at message {at} and the request gives no checker status to "
            f"match it on (a client bug: the loop passes each turn's status in Slot.outcomes)")


class SearchClient:
    """The no-LLM baseline: 'replies' with the target's i-th template, at no cost."""

    name = "search"

    def __init__(self, target: str, n: int):
        from autotune.agent import search

        self.model = "templates"
        self._candidates = search.candidates(target, n)

    def plan(self, target: str, candidates: int, turns: int) -> tuple[int, int]:
        return len(self._candidates), 1  # a template does not learn from feedback

    def complete(self, messages: list[dict[str, str]], slot: Slot) -> Exchange:
        label, source = self._candidates[slot.index]
        text = f"Template configuration {label}.\n\n```python\n{source.rstrip()}\n```\n"
        return Exchange(text=text, usage=Usage(), cost_usd=0.0, latency_s=0.0, request_sha256=request_sha256(messages),
                        model=f"templates:{label}", source="search", finish_reason="stop")
