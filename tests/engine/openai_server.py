"""A small OpenAI-compatible HTTP server for the engine tests: real sockets, real streaming (SSE), a real profiler
folder. It behaves as vLLM's (`kind="vllm"`: /version, /start_profile only when profiling is configured) or
SGLang's (`kind="sglang"`: /get_server_info, the profile request's body) documented API.

Streaming: the first chunk after `first_s`, then one chunk per token every `token_s`; token i of a reply is the
text "t<i> " shifted by `shift` (a server with shift=1 answers differently). A request with max_tokens 13 gets
HTTP 400, one with max_tokens 7 has its stream cut after two chunks. stop_profile writes what vLLM writes: an API
server (frontend) trace with no torch ops and the worker's trace (a real vLLM 0.32 slice).

Run as a script (`python openai_server.py PORT KIND`) it is a stand-in for a server process to launch.
"""

from __future__ import annotations

import json
import shutil
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "profile" / "fixtures"


class State:
    def __init__(self, kind="vllm", profile_dir=None, first_s=0.02, token_s=0.01, shift=0, model="tiny", root=None):
        self.kind, self.profile_dir, self.first_s, self.token_s, self.shift = kind, profile_dir, first_s, token_s, shift
        self.model, self.root = model, root  # root: the model folder vLLM lists at /v1/models
        self.requests: list[dict] = []
        self.profile_bodies: list[dict] = []
        self.in_flight = self.max_in_flight = 0
        self.finished: list[tuple[int, float]] = []  # (index in requests, time)
        self.lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: State

    def log_message(self, *args):  # quiet
        pass

    def _json(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        s = self.state
        if self.path == "/health":
            return self._json(200, {})
        if self.path == ("/version" if s.kind == "vllm" else "/get_server_info"):
            return self._json(200, {"version": "0.32.0" if s.kind == "vllm" else "0.5.23"})
        if self.path == "/v1/models":
            listed = {"id": s.model, "max_model_len": 512, **({"root": s.root} if s.root else {})}
            return self._json(200, {"data": [listed]})
        self._json(404, {"detail": "Not Found"})

    def do_POST(self):
        s = self.state
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.path in ("/start_profile", "/stop_profile"):
            return self._profile(body)
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            return self._json(404, {"detail": "Not Found"})
        with s.lock:
            index = len(s.requests)
            s.requests.append({"path": self.path, "body": body, "at": time.monotonic()})
            s.in_flight += 1
            s.max_in_flight = max(s.max_in_flight, s.in_flight)
        try:
            self._answer(body)
        finally:
            with s.lock:
                s.in_flight -= 1
                s.finished.append((index, time.monotonic()))

    def _profile(self, body: dict) -> None:
        s = self.state
        if s.kind == "vllm" and s.profile_dir is None:
            return self._json(404, {"detail": "Not Found"})  # vLLM registers them only with --profiler-config
        s.profile_bodies.append(body)
        if self.path == "/stop_profile":  # SGLang writes where the start request said, else its own folder
            folder = Path(s.profile_bodies[0].get("output_dir") or s.profile_dir)
            folder.mkdir(parents=True, exist_ok=True)
            stamp = time.time_ns()
            if s.kind == "vllm":
                shutil.copyfile(FIXTURES / "vllm_frontend.json.gz", folder / f"frontend.{stamp}.pt.trace.json.gz")
                shutil.copyfile(FIXTURES / "vllm_eager_worker.json.gz", folder / f"rank-0.{stamp}.pt.trace.json.gz")
            else:
                shutil.copyfile(FIXTURES / "vllm_eager_worker.json.gz", folder / f"{stamp}-TP-0.trace.json.gz")
        self._json(200, {})

    def _answer(self, body: dict) -> None:
        s = self.state
        n = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        if n == 13:
            return self._json(400, {"error": {"message": "max_tokens 13 is unlucky", "code": 400}})
        chat = self.path.endswith("chat/completions")
        words = [f"t{i + s.shift} " for i in range(n)]
        if not body.get("stream"):
            choice = {"index": 0, "text": "".join(words), "finish_reason": "length", "token_ids": list(range(n))}
            return self._json(200, {"choices": [choice], "usage": {"prompt_tokens": 3, "completion_tokens": n}})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        time.sleep(s.first_s)
        for i, word in enumerate(words):
            if i:
                time.sleep(s.token_s)
            if n == 7 and i == 2:
                self.wfile.flush()
                self.connection.shutdown(2)  # the stream breaks mid-answer
                return
            last = "length" if i == n - 1 else None
            piece = ({"index": 0, "delta": {"content": word}, "finish_reason": last} if chat
                     else {"index": 0, "text": word, "finish_reason": last})
            self._event({"id": "x", "object": "chunk", "created": 0, "model": s.model, "choices": [piece]})
        prompt = len(body.get("prompt") or []) if not chat else 5
        self._event({"id": "x", "object": "chunk", "created": 0, "model": s.model, "choices": [],
                     "usage": {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n}})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def _event(self, payload: dict) -> None:
        self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
        self.wfile.flush()


def serve(state: State, port: int = 0) -> ThreadingHTTPServer:
    handler = type("BoundHandler", (Handler,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


if __name__ == "__main__":  # a server process: PORT KIND [PROFILE_DIR]
    port, kind = int(sys.argv[1]), sys.argv[2]
    serve(State(kind, sys.argv[3] if len(sys.argv) > 3 else None), port)
    threading.Event().wait()
