"""A real HTTP server on 127.0.0.1 that an OpenAI client reaches: it lists the models it serves (GET /v1/models, as
vLLM and OpenAI answer) and fails every chat completion with a 500. The preflight asks it and goes on; the run then
dies at its first LLM request, after the profile, with its ledger written."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def listing_endpoint(models: list[str]) -> Iterator[str]:
    """The server's base URL (…/v1) while the block runs."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            self._reply(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in models]}
                        if self.path.rstrip("/").endswith("/models") else {"error": "not found"})

        def do_POST(self):
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self._reply(500, {"error": {"message": "the model crashed"}})

        def _reply(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
