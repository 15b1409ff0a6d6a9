"""A real OpenAI-compatible chat-completions server on 127.0.0.1 for the agent's tests, and kernel replies.

The server speaks the wire format the openai client reads (JSON, and SSE when `stream` is set), checks
the bearer key when given one, and simulates a serving engine's prefix cache: a prompt's cached tokens
are the whole 16-token blocks it shares with the longest prefix seen before (vLLM's block size), with
one token per 4 characters of "role: content" text. Replies come from a `responder(body) -> Reply`
that each test sets, so that parallel candidates get answers by what they asked, not by arrival order.
"""

from __future__ import annotations

import dataclasses
import http.server
import json
import threading
import time
from pathlib import Path
from typing import Callable

import pytest

from tests.quick import PIPELINE_CHECK

BLOCK_TOKENS = 16
CHARS_PER_TOKEN = 4


@dataclasses.dataclass
class Reply:
    text: str = ""
    status: int = 200
    headers: dict = dataclasses.field(default_factory=dict)
    body: str | None = None  # raw body for errors


@dataclasses.dataclass
class Request:
    path: str
    body: dict
    headers: dict
    at: float


class FakeLLM:
    """The server's state: requests seen, the prefix cache, and the responder tests set."""

    def __init__(self, api_key: str | None = None, report_cached: bool = True):
        self.api_key = api_key
        self.report_cached = report_cached
        self.requests: list[Request] = []
        self.responder: Callable[[dict], Reply] = lambda body: Reply("no responder set")
        self._prompts: list[str] = []
        self._lock = threading.Lock()
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> "FakeLLM":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def chat_requests(self) -> list[Request]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def usage(self, messages: list[dict], completion: str) -> dict:
        prompt = "".join(f"{m['role']}: {m['content']}\n" for m in messages)
        with self._lock:
            shared = max((_common_prefix(prompt, p) for p in self._prompts), default=0)
            self._prompts.append(prompt)
        tokens = len(prompt) // CHARS_PER_TOKEN
        cached = (shared // CHARS_PER_TOKEN) // BLOCK_TOKENS * BLOCK_TOKENS
        usage = {"prompt_tokens": tokens, "completion_tokens": max(len(completion) // CHARS_PER_TOKEN, 1),
                 "total_tokens": tokens + max(len(completion) // CHARS_PER_TOKEN, 1)}
        if self.report_cached:
            usage["prompt_tokens_details"] = {"cached_tokens": min(cached, tokens)}
        return usage


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _handler(llm: FakeLLM):
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):  # keep pytest's output clean
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
            llm.requests.append(Request(self.path, body, dict(self.headers), time.monotonic()))
            if not self.path.endswith("/v1/chat/completions"):
                return self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            if llm.api_key and self.headers.get("authorization") != f"Bearer {llm.api_key}":
                return self._json(401, {"error": {"message": "invalid api key", "type": "auth"}})
            reply = llm.responder(body)
            if reply.status != 200:
                return self._raw(reply.status, reply.body or json.dumps({"error": {"message": "busy"}}), reply.headers)
            usage = llm.usage(body["messages"], reply.text)
            if body.get("stream"):
                return self._sse(body, reply.text, usage)
            self._json(200, {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
                             "choices": [{"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": reply.text}}],
                             "usage": usage})

        def _json(self, status, obj):
            self._raw(status, json.dumps(obj), {})

        def _raw(self, status, text, headers):
            data = text.encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def _sse(self, body, text, usage):
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": body["model"]}
            pieces = [text[i:i + 64] for i in range(0, len(text), 64)] or [""]
            for i, piece in enumerate(pieces):
                delta = {"role": "assistant", "content": piece} if i == 0 else {"content": piece}
                self._event({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
            self._event({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            if (body.get("stream_options") or {}).get("include_usage"):
                self._event({**base, "choices": [], "usage": usage})
            self.wfile.write(b"data: [DONE]\n\n")

        def _event(self, obj):
            self.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())
            self.wfile.flush()

    return Handler


@pytest.fixture
def llm():
    server = FakeLLM().start()
    yield server
    server.stop()


@pytest.fixture
def reply_cls():
    return Reply


@pytest.fixture
def fake_llm_cls():
    return FakeLLM


# A correct rms_norm: two passes over the row in chunks, fp32 sums, masks for any width (the checker's own).
GOOD_RMS_NORM = (Path(__file__).resolve().parents[1] / "verify" / "candidates" / "rms_norm_chunked.py").read_text()

# The same kernel with a classic bug: the mean divides by the block width, not the row width, so every
# width that is not a power of two (1000, 5120) comes out wrong.
BROKEN_RMS_NORM = GOOD_RMS_NORM.replace("tl.sum(acc, axis=0) / n_cols", "tl.sum(acc, axis=0) / BLOCK")


@pytest.fixture
def kernels():
    return {"good": GOOD_RMS_NORM, "broken": BROKEN_RMS_NORM}


def fenced(source: str, prose: str = "Here is the kernel.") -> str:
    return f"{prose}\n\n```python\n{source}```\n"


@pytest.fixture
def fence():
    return fenced


FAST_VERIFY = PIPELINE_CHECK  # the real checker, kept small (tests/quick.py)
_verdicts: dict = {}


@pytest.fixture
def fast_verify():
    return list(FAST_VERIFY)


@pytest.fixture
def real_verify():
    """autotune.verify.verify with FAST_VERIFY, remembered by file content: the checker is deterministic on
    CPU, and tests that judge the same file twice (replay, resume) need not pay for it twice."""
    import dataclasses
    import hashlib

    from autotune.config import compose
    from autotune.verify import verify

    cfg = compose(FAST_VERIFY)

    def judged(target, path):
        key = (target.name, hashlib.sha256(path.read_bytes()).hexdigest())
        if key not in _verdicts:
            _verdicts[key] = verify(target, path, cfg, shapes=[((7, 1000), "float32", 1)])
        return dataclasses.replace(_verdicts[key], candidate=str(path))

    return judged
