"""The engine's profiler, switched on around the measured window, and the trace its worker wrote.

vLLM registers `POST /start_profile` and `/stop_profile` only when it was started with `--profiler-config`; a
404 there is an error that names the flag. SGLang always has them and takes the profiler's settings in the
start request's body (shapes on, no stacks, the output folder). Both write one file per process into the
profiler folder: the API server's (vLLM's frontend, no torch ops) and each worker's. `find_trace` waits for the
files written since the window opened to stop growing and returns the worker's (the one with torch ops, the
largest when there are several ranks).

    with profiling(server) as window:       # server: launch.Server
        ... send the requests ...
    window.trace                              # Path of the worker's trace
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from autotune.engine.launch import Server, auth_headers, http
from autotune.engine.settings import profiler_config
from autotune.errors import UserError


@dataclasses.dataclass
class Window:
    started_at: float  # time.time() when the profiler was asked to start
    trace: Path | None = None
    stop_s: float | None = None  # how long stop_profile took (the trace is written then)


def start_body(server: Server) -> dict | None:
    if server.settings.name != "sglang":
        return None
    body: dict[str, Any] = {"record_shapes": True, "with_stack": False}
    if server.profile_dir is not None:
        body["output_dir"] = str(server.profile_dir)
    return body


def flag_hint(server: Server) -> str:
    folder = str(server.profile_dir or "DIR")
    return f"--profiler-config '{profiler_config(folder)}'"


@contextlib.contextmanager
def profiling(server: Server) -> Iterator[Window]:
    """Start the server's profiler, yield, stop it and find the trace (stopped even when the body fails)."""
    if server.profile_dir is None:
        raise UserError(f"engine.profile_dir is not set: give the folder the {server.settings.name} server's profiler "
                        "writes to, readable from here (vLLM: the torch_profiler_dir of its --profiler-config; SGLang: "
                        "its SGLANG_TORCH_PROFILER_DIR), or set engine.profile=false to measure without a profile")
    window = Window(time.time())
    call(server, server.settings.api.start_profile, start_body(server), 120.0)
    try:
        yield window
    finally:
        began = time.monotonic()
        call(server, server.settings.api.stop_profile, {} if server.settings.name == "sglang" else None,
             server.settings.stop_profile_timeout_s)
        window.stop_s = time.monotonic() - began
    window.trace = find_trace(server.profile_dir, window.started_at, server.settings.api.trace_globs,
                              server.settings.stop_profile_timeout_s)


def call(server: Server, path: str, body: dict | None, timeout_s: float) -> None:
    """POST to a profiler endpoint; a 404 from vLLM means profiling was not configured at start."""
    try:
        status, text = http("POST", server.url + path, body, timeout_s, auth_headers(server.settings))
    except OSError as e:
        raise UserError(f"POST {server.url}{path} failed: {type(e).__name__}: {e}") from None
    if status == 404 and server.settings.name == "vllm":
        raise UserError(f"the vLLM server at {server.url} has no {path} endpoint: it was started without profiling. "
                        f"Restart it with {flag_hint(server)} --enforce-eager (shapes recorded, no Python stacks), or "
                        "let autotune start it: engine.launch=true engine.model=PATH engine.python=PATH")
    if status != 200:
        raise UserError(f"POST {server.url}{path} answered {status}: {' '.join(text.split())[:300]}")


def find_trace(folder: Path, since: float, globs: tuple[str, ...], timeout_s: float,
               poll_s: float = 1.0) -> Path:
    """The worker's trace among the files written into `folder` since `since`, once they stop growing."""
    deadline = time.monotonic() + timeout_s
    sizes: dict[Path, int] = {}
    while True:
        files = {p: p.stat().st_size for g in globs for p in Path(folder).glob(g)
                 if p.is_file() and p.stat().st_mtime >= since - 1.0}
        if files and files == sizes:  # nothing new and nothing growing since the last look
            workers = [p for p in sorted(files, key=lambda p: -files[p]) if has_torch_ops(p)]
            if workers:
                return workers[0]
        sizes = files
        if time.monotonic() > deadline:
            seen = ", ".join(p.name for p in files) or "none"
            raise UserError(f"no worker trace appeared in {folder} within {timeout_s:g} s of stopping the profiler "
                            f"(files written since the start: {seen}); is it the server's profiler folder?")
        time.sleep(poll_s)


def has_torch_ops(path: Path) -> bool:
    """Whether a trace holds torch ops (a worker's), without parsing it: the API server's has none."""
    try:
        raw = path.read_bytes()
        text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    except (OSError, EOFError, gzip.BadGzipFile):
        return False  # still being written: the next look decides
    return b'"cpu_op"' in text
