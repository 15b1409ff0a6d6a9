"""The channel between a sandboxed child and its parent: length-prefixed frames over pipes.

A frame is an 8-byte little-endian length and a `torch.save` of a dict; the reader uses
`torch.load(weights_only=True)`, so tensors, numbers, strings, lists and dicts travel and nothing else
can be unpickled: a child that writes a crafted pickle into its result pipe gets a protocol error, not
code execution in the parent. `Reader` reads on one thread (the child never waits on the parent) and
decodes and hands frames on another.
"""

from __future__ import annotations

import io
import os
import queue
import struct
import threading
import time
from typing import Callable

# One frame holds a case's outputs and inputs: silu_and_mul on [8192, 28672] in bf16 is ~1.2 GB.
MAX_FRAME_BYTES = 4 << 30
MAX_TOTAL_BYTES = 64 << 30  # a bound on what a child may stream; frames the parent has handled are not kept
KEEP_BYTES = 1 << 16  # handled frames above this size are dropped after on_event saw them
_RUNNER_KINDS = ("isolation", "result", "error")  # always kept: the runner reads them
_HEADER = struct.Struct("<Q")


def encode(obj: dict) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return _HEADER.pack(buf.tell()) + buf.getvalue()


def decode(data: bytes) -> dict:
    import torch

    obj = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    if not isinstance(obj, dict):
        raise ValueError(f"a frame must hold a dict, not {type(obj).__name__}")
    return obj


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def read_exact(fd: int, n: int) -> bytes | None:
    """n bytes, or None at end of stream (a partial frame at the end is dropped)."""
    parts, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            return None
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def read_frame(fd: int, limit: int = MAX_FRAME_BYTES) -> dict | None:
    header = read_exact(fd, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > limit:
        raise ValueError(f"frame of {size} bytes is over the {limit}-byte limit")
    data = read_exact(fd, size)
    if data is None:
        return None
    return decode(data)


class Reader:
    """Reads the child's frames until end of stream; keeps them, or the first protocol error.

    One thread reads the pipe, so the child never waits on the parent; another decodes each frame and
    calls `on_event(frame)`; when that returns True, `stop()` is called (the parent kills the child: it
    has seen enough). `join()` waits for both.
    """

    def __init__(self, fd: int, on_event: Callable[[dict], bool] | None, stop: Callable[[], None],
                 max_frame_bytes: int = MAX_FRAME_BYTES, progress: Callable[[dict], bool] | None = None):
        self.fd, self.frames, self.error, self.stopped = fd, [], "", False
        self.progress = progress  # frame -> whether it is a step forward; `last_step` is when the latest came
        self.started = self.last_step = time.monotonic()
        self.max_frame_bytes = max_frame_bytes
        self.on_event, self.stop = on_event, stop
        self.raw: queue.Queue[bytes | None] = queue.Queue()
        self.threads = [threading.Thread(target=self._read, daemon=True),
                        threading.Thread(target=self._handle, daemon=True)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def join(self, timeout: float) -> None:
        for t in self.threads:
            t.join(timeout)

    def _read(self) -> None:
        total = 0
        try:
            while True:
                header = read_exact(self.fd, _HEADER.size)
                if header is None:
                    break
                (size,) = _HEADER.unpack(header)
                total += size
                if size > self.max_frame_bytes or total > MAX_TOTAL_BYTES:
                    raise ValueError(f"frame of {size} bytes ({total} in all) is over the limit")
                data = read_exact(self.fd, size)
                if data is None:
                    break
                self.raw.put(data)
        except Exception as e:  # a forged or oversized frame: stop trusting the channel, keep draining it
            self.error = self.error or f"malformed result frame ({type(e).__name__}: {str(e)[:200]})"
            while os.read(self.fd, 1 << 20):
                pass
        finally:
            self.raw.put(None)
            os.close(self.fd)

    def _handle(self) -> None:
        while (data := self.raw.get()) is not None:
            if self.error:
                continue
            try:
                frame = decode(data)
            except Exception as e:  # not a weights-only dict: a forged frame
                self.error = f"malformed result frame ({type(e).__name__}: {str(e)[:200]})"
                continue
            if self.on_event is None or len(data) <= KEEP_BYTES or frame.get("kind") in _RUNNER_KINDS:
                self.frames.append(frame)
            if not self.stopped and self.on_event is not None:
                self._notify(frame)
            if self.progress is not None and self.progress(frame):
                self.last_step = time.monotonic()

    def _notify(self, frame: dict) -> None:
        try:
            stop = self.on_event(frame)
        except Exception as e:  # a bug on the parent's side: stop the child rather than judge on
            self.error = f"the parent failed to handle a frame ({type(e).__name__}: {e})"
            stop = True
        if stop:
            self.stopped = True
            self.stop()
