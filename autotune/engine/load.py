"""The load generator: sends a workload's requests to an OpenAI-compatible server, streamed, and times them.

Each request is sent at its arrival time (Poisson or all at once), or, in a closed loop, when the request it
follows has been answered (`EngineRequest.after`: N users each sending their next request on an answer); every
response is streamed (`stream_options.include_usage`), so the client sees each chunk arrive. The openai client
does the HTTP, with retries off: a failed request is counted, never silently re-sent.

    endpoint = Endpoint("http://127.0.0.1:8000", "model")
    results, duration_s = run_load(endpoint, requests)
    report = LoadReport.of(results, duration_s)                    # autotune/engine/stats.py
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from autotune.engine.stats import RequestResult
from autotune.engine.workload import EngineRequest


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """A server's OpenAI API: its root URL (no /v1), the model name requests carry, and the key (never shown)."""

    url: str
    model: str
    api_key: str | None = dataclasses.field(default=None, repr=False)
    timeout_s: float = 600.0

    def client(self):
        """An async openai client for the server's /v1 API, no retries (a failure is a figure, not a retry)."""
        import openai

        return openai.AsyncOpenAI(base_url=self.url.rstrip("/") + "/v1", api_key=self.api_key or "no-key",
                                  timeout=self.timeout_s, max_retries=0)


def run_load(endpoint: Endpoint, requests: Sequence[EngineRequest], *, extra_body: dict | None = None,
             temperature: float = 0.0) -> tuple[list[RequestResult], float]:
    """Send every request as the workload says; (one result per request, seconds from first send to last answer)."""
    return asyncio.run(_run(endpoint, list(requests), extra_body or {}, temperature))


async def _run(endpoint: Endpoint, requests: list[EngineRequest], extra_body: dict,
               temperature: float) -> tuple[list[RequestResult], float]:
    client, model = endpoint.client(), endpoint.model
    done = {r.request_id: asyncio.Event() for r in requests}
    start = time.perf_counter()

    async def one(r: EngineRequest) -> RequestResult:
        if r.after is not None and r.after in done:
            await done[r.after].wait()
        else:
            await asyncio.sleep(max(0.0, r.arrival_s - (time.perf_counter() - start)))
        try:
            return await send(client, model, r, start, extra_body, temperature)
        finally:
            done[r.request_id].set()

    try:
        results = await asyncio.gather(*(one(r) for r in requests))
    finally:
        await client.close()
    ends = [r.chunk_s[-1] for r in results if r.chunk_s] + [r.sent_s for r in results]
    first = min((r.sent_s for r in results), default=0.0)
    return list(results), (max(ends) - first) if ends else 0.0


async def send(client, model: str, r: EngineRequest, start: float, extra_body: dict,
               temperature: float) -> RequestResult:
    """One streamed request; every failure becomes the result's error, never an exception."""
    body = {**extra_body, **({"ignore_eos": True} if r.ignore_eos else {})}
    common: dict[str, Any] = dict(model=model, max_tokens=r.max_tokens, temperature=temperature, stream=True,
                                  stream_options={"include_usage": True}, extra_body=body or None)
    sent = time.perf_counter() - start
    chunks: list[float] = []
    parts: list[str] = []
    usage, finished = None, False
    try:
        if r.chat:
            stream = await client.chat.completions.create(messages=list(r.messages), **common)
        else:
            stream = await client.completions.create(prompt=list(r.prompt_ids), **common)
        async for chunk in stream:
            now = time.perf_counter() - start
            usage = chunk.usage or usage
            if chunk.choices:  # the last chunk carries the usage and no choice
                chunks.append(now)
                parts.append(_text(chunk.choices[0], r.chat))
                finished = finished or chunk.choices[0].finish_reason is not None
    except Exception as e:  # noqa: BLE001 (the server's error or a broken stream: a failed request, with what came back)
        return RequestResult(r.request_id, sent, len(r.prompt_ids), 0, tuple(chunks), error=_describe(e))
    prompt = int(getattr(usage, "prompt_tokens", 0) or len(r.prompt_ids))
    output = int(getattr(usage, "completion_tokens", 0) or len(chunks))
    # a stream cut short ends like a whole one for the SSE reader: without the usage or a finish reason it is not
    error = (None if chunks and (usage is not None or finished) else
             "the stream ended without a chunk carrying a choice" if not chunks else
             f"the stream ended after {len(chunks)} chunks, before the server finished the reply")
    return RequestResult(r.request_id, sent, prompt, output, tuple(chunks), error=error, text="".join(parts))


def _text(choice, chat: bool) -> str:
    if chat:
        return (choice.delta.content or "") if choice.delta is not None else ""
    return choice.text or ""


def _describe(e: Exception) -> str:
    """One line: the HTTP status and the server's message, or the exception."""
    status = getattr(e, "status_code", None)
    if status is not None:
        body = getattr(e, "message", None) or str(e)
        return f"HTTP {status}: {' '.join(str(body).split())[:300]}"
    return f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
