"""The channel between a sandboxed child and its parent: length-prefixed frames over pipes.

A frame is an 8-byte little-endian length and a `torch.save` of a dict; the reader uses
`torch.load(weights_only=True)`, so tensors, numbers, strings, lists and dicts travel and nothing else
can be unpickled: a child that writes a crafted pickle into its result pipe gets a protocol error, not
code execution in the parent. `Reader` reads on one thread and decodes and hands frames on another.

Nothing the child sends is trusted before it is checked (`decode`), in this order:
- the archive, before torch reads it (`check_archive`): a zip (torch's legacy format would allocate the
  storage sizes its pickle declares before reading any data), every entry stored, not compressed (a 154 KB
  deflated entry decoded to 150 MiB), sizes as declared, no duplicate names, all entries together no larger
  than the frame: so the storages torch allocates (it checks each against its entry's size) hold at most
  the frame's bytes;
- its pickle, before it is unpickled (`scan_pickle`): only the opcodes torch's weights-only unpickler knows,
  at most MAX_OPS of them, values nested at most MAX_PICKLE_DEPTH deep (measured: a tuple nested 10^6 deep
  as a dict key crashes the parent with SIGSEGV inside torch.load, when the key is hashed). The unpickler
  itself is a loop, not a recursion;
- the decoded value (schema.bounded, iterative): depth, number of values, string lengths, int range, plain
  tensors whose elements fit their storages; then its kind's schema (schema.py) where the caller gave one.
A frame that fails is a protocol error (`Reader.error`), never an exception in the parent. The Reader holds at
most one read frame waiting to be decoded, keeps at most KEEP_TOTAL_BYTES / KEEP_FRAMES of the frames it
stores for the caller, and of a kind whose schema says keep="first" (errors) only the first.
"""

from __future__ import annotations

import io
import json
import os
import pickletools
import queue
import struct
import threading
import time
import zipfile
from collections.abc import Callable

from autotune.sandbox.schema import ProtocolError, Schema, bounded, check_frame

# One frame holds a case's outputs and inputs: silu_and_mul on [8192, 28672] in bf16 is ~1.2 GB.
MAX_FRAME_BYTES = 4 << 30
MAX_TOTAL_BYTES = 64 << 30  # a bound on what a child may stream; frames the parent has handled are not kept
KEEP_BYTES = 1 << 16  # handled frames above this size are dropped after on_event saw them
KEEP_TOTAL_BYTES = 64 << 20  # frames kept per run, in all (an honest checker's run keeps a few MB)
KEEP_FRAMES = 20_000  # ... and their number (an honest run sends two per case)
_RUNNER_KINDS = ("isolation", "result", "error")  # always kept: the runner reads them
_HEADER = struct.Struct("<Q")
MAX_PICKLE_BYTES = 16 << 20  # the pickle of one frame; tensors' data lies beside it (an honest one is a few KB)
MAX_OPS = 1_000_000
MAX_PICKLE_DEPTH = 64


def encode(obj: dict) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return _HEADER.pack(buf.tell()) + buf.getvalue()


def decode(data: bytes, schemas: dict[str, Schema] | None = None) -> dict:
    """A frame's dict, checked (the module's docstring says how); ProtocolError when it is not to be trusted."""
    import torch

    check_archive(data)
    try:
        obj = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as e:  # noqa: BLE001 - untrusted code's failure, of any kind, is reported, never raised here
        raise ProtocolError(f"not a weights-only frame ({type(e).__name__}: {str(e)[:200]})") from None
    return check_frame(bounded(obj, max_storage_bytes=len(data)), schemas)


def check_archive(data: bytes) -> None:
    """The frame is a zip of stored entries within its own size, with a pickle within the scan's bounds."""
    if not data.startswith(b"PK\x03\x04"):
        raise ProtocolError("a frame that is not a zip archive (torch's legacy format is refused)")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            entries = archive.infolist()
            pickles = [e for e in entries if e.filename.endswith("/data.pkl") or e.filename == "data.pkl"]
            _check_entries(entries, len(data))
            if len(pickles) != 1 or pickles[0].file_size > MAX_PICKLE_BYTES:
                raise ProtocolError(f"{len(pickles)} pickles in the archive, or one over {MAX_PICKLE_BYTES} bytes")
            pickle = archive.read(pickles[0])
    except ProtocolError:
        raise
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        raise ProtocolError(f"a malformed archive ({type(e).__name__}: {str(e)[:200]})") from None
    scan_pickle(pickle)


def _check_entries(entries: list[zipfile.ZipInfo], frame_bytes: int) -> None:
    names = [e.filename for e in entries]
    if len(set(names)) != len(names) or len(entries) > MAX_OPS // 8:
        raise ProtocolError("an archive with duplicate or too many entries")
    for e in entries:
        if e.compress_type != zipfile.ZIP_STORED or e.compress_size != e.file_size or e.flag_bits & 1:
            raise ProtocolError(f"an archive entry stored compressed or encrypted ({e.compress_size} bytes "
                                f"for {e.file_size})")
    if sum(e.file_size for e in entries) > frame_bytes:
        raise ProtocolError("archive entries larger than the frame")


# What the weights-only unpickler runs (torch/_weights_only_unpickler.py), grouped by their effect on the stack.
_LEAVES = {"NONE", "NEWTRUE", "NEWFALSE", "BININT", "BININT1", "BININT2", "BINFLOAT", "BINUNICODE",
           "SHORT_BINSTRING", "LONG1", "GLOBAL", "EMPTY_TUPLE", "EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET"}
_FIXED = {"TUPLE1": 1, "TUPLE2": 2, "TUPLE3": 3}


def scan_pickle(pickle: bytes) -> None:
    """Walk the opcodes without building anything, keeping each stack value's nesting depth; refuse an unknown
    opcode, more than MAX_OPS, or a value nested deeper than MAX_PICKLE_DEPTH. (A mutable container changed
    through the memo may nest deeper than counted here: `schema.bounded` counts it exactly after unpickling;
    what must be bounded before is an immutable key's depth, which hashing walks in C.)"""
    stack: list[int] = []
    marks: list[list[int]] = []
    memo: dict[int, int] = {}
    try:
        for n, (op, arg, _) in enumerate(pickletools.genops(pickle)):
            if n >= MAX_OPS:
                raise ProtocolError(f"a pickle of more than {MAX_OPS} opcodes")
            stack, top = _step(op.name, arg, stack, marks, memo)
            if top > MAX_PICKLE_DEPTH:
                raise ProtocolError(f"a pickle nested more than {MAX_PICKLE_DEPTH} deep")
    except (ValueError, IndexError, KeyError) as e:  # genops' own errors, or a stack the unpickler would refuse
        if isinstance(e, ProtocolError):
            raise
        raise ProtocolError(f"a malformed pickle ({type(e).__name__}: {str(e)[:120]})") from None


def _step(name: str, arg, stack: list[int], marks: list[list[int]], memo: dict[int, int]) -> tuple[list[int], int]:
    """One opcode on the simulated stack of depths; (the stack, the depth of the value it made or changed)."""
    if name in _LEAVES:
        stack.append(1 if name.startswith("EMPTY_") else 0)
    elif name == "MARK":
        marks.append(stack)
        stack = []
    elif name == "TUPLE":
        items, stack = stack, marks.pop()
        stack.append(1 + max(items, default=0))
    elif name in _FIXED:
        k = _FIXED[name]
        if len(stack) < k:
            raise IndexError("tuple of more values than the stack holds")
        items = stack[-k:]
        del stack[-k:]
        stack.append(1 + max(items))
    elif name in ("APPEND", "BUILD"):  # item -> into the value below it
        item = stack.pop()
        stack[-1] = max(stack[-1], 1 + item)
    elif name == "REDUCE":  # func, args -> func(*args)
        args = stack.pop()
        stack[-1] = 1 + args
    elif name == "NEWOBJ":  # cls, args -> cls.__new__(cls, *args)
        args = stack.pop()
        stack[-1] = 1 + args
    elif name == "BINPERSID":  # a storage's id -> the storage
        stack[-1] = 0
    elif name == "SETITEM":
        value, key = stack.pop(), stack.pop()
        stack[-1] = max(stack[-1], 1 + key, 1 + value)
    elif name in ("APPENDS", "SETITEMS"):
        items, stack = stack, marks.pop()
        stack[-1] = max(stack[-1], 1 + max(items, default=0))
    elif name in ("BINPUT", "LONG_BINPUT"):
        memo[arg] = stack[-1]
    elif name in ("BINGET", "LONG_BINGET"):
        stack.append(memo[arg])
    elif name not in ("PROTO", "STOP"):
        raise ProtocolError(f"a pickle opcode the weights-only unpickler does not run ({name})")
    return stack, stack[-1] if stack else 0


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


def encode_json(obj: dict) -> bytes:
    """A data-only frame (numbers, strings, lists, dicts; no tensor): JSON, ten times cheaper to make and read
    than a torch.save frame (the checker's host sends thousands of calls) and unable to hold anything but data."""
    data = json.dumps(obj, separators=(",", ":")).encode()
    return _HEADER.pack(len(data)) + data


def _read_body(fd: int, limit: int, too_big) -> bytes | None:
    """The body of the next length-prefixed frame, None at the end of the stream; `too_big(size)` is raised for a
    frame over `limit` bytes, before any of its body is read."""
    header = read_exact(fd, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > limit:
        raise too_big(size)
    return read_exact(fd, size)


def read_json(fd: int, limit: int) -> dict | None:
    """The next data-only frame, None at the end of the stream; ProtocolError for anything malformed."""
    data = _read_body(fd, limit, lambda size: ProtocolError(
        f"a frame of {size} bytes from the candidate's process, over the {limit}-byte limit"))
    if data is None:
        return None
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise ProtocolError(f"a frame that is not JSON ({type(e).__name__})") from None
    if not isinstance(obj, dict):
        raise ProtocolError("a frame that is not a record")
    return obj


def read_frame(fd: int, limit: int = MAX_FRAME_BYTES) -> dict | None:
    """The child's side: its payload, from the parent (trusted: loaded without the checks)."""
    import torch

    data = _read_body(fd, limit, lambda size: ValueError(f"frame of {size} bytes is over the {limit}-byte limit"))
    if data is None:
        return None
    return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")


class Reader:
    """Reads the child's frames until end of stream; keeps them, or the first protocol error.

    One thread reads the pipe and holds at most one frame for the other, which decodes and checks each frame
    (against `schemas` where given: {kind: Schema}) and calls `on_event(frame)`; when that returns True,
    `stop()` is called (the parent kills the child: it has seen enough). A child that sends faster than the
    parent judges waits on its pipe. `join()` waits for both threads.
    """

    def __init__(self, fd: int, on_event: Callable[[dict], bool] | None, stop: Callable[[], None],
                 max_frame_bytes: int = MAX_FRAME_BYTES, progress: Callable[[dict], bool] | None = None,
                 schemas: dict[str, Schema] | None = None):
        self.fd, self.error, self.stopped = fd, "", False
        self.frames: list[dict] = []
        self.progress = progress  # frame -> whether it is a step forward; `last_step` is when the latest came
        self.started = self.last_step = time.monotonic()
        self.max_frame_bytes, self.schemas = max_frame_bytes, schemas
        self.on_event, self.stop = on_event, stop
        self.raw: queue.Queue[bytes | None] = queue.Queue(maxsize=1)  # at most one frame read ahead
        self.kept_bytes = 0
        self.kept_kinds: set[str] = set()
        self.threads = [threading.Thread(target=self._read, daemon=True),
                        threading.Thread(target=self._handle, daemon=True)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def join(self, timeout: float) -> None:
        for t in self.threads:
            t.join(timeout)

    def _fail(self, problem: str) -> None:
        """A protocol error: nothing the child sends after it is trusted, so it is killed at once."""
        self.error = self.error or f"malformed result frame ({problem})"
        self.stop()

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
                    raise ProtocolError(f"frame of {size} bytes ({total} in all) is over the limit")
                data = read_exact(self.fd, size)
                if data is None:
                    break
                if not self.error:  # after a protocol error nothing is decoded: the rest is drained
                    self.raw.put(data)
        except Exception as e:  # noqa: BLE001 - an oversized frame: stop trusting the channel, keep draining it
            self._fail(f"{type(e).__name__}: {str(e)[:200]}")
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
                frame = decode(data, self.schemas)
                self._keep(frame, len(data))
            except Exception as e:  # noqa: BLE001 - untrusted code's failure, of any kind, is reported, never raised here
                self._fail(f"{type(e).__name__}: {str(e)[:200]}")
                continue
            if not self.stopped and self.on_event is not None:
                self._notify(frame)
            try:
                if self.progress is not None and self.progress(frame):
                    self.last_step = time.monotonic()
            except Exception as e:  # noqa: BLE001 - untrusted code's failure, of any kind, is reported, never raised here
                self.error = self.error or f"the parent failed to handle a frame ({type(e).__name__}: {e})"

    def _keep(self, frame: dict, size: int) -> None:
        """Store the frame for the caller, within the caps: a flood of frames is a protocol error."""
        kind = frame["kind"]
        schema = (self.schemas or {}).get(kind)
        keep = schema.keep if schema is not None else ("first" if kind in _RUNNER_KINDS else "all")
        if keep == "none" or (keep == "first" and kind in self.kept_kinds):
            return
        if self.on_event is not None and size > KEEP_BYTES and kind not in _RUNNER_KINDS:
            return  # on_event has it; the caller does not need it again
        self.kept_kinds.add(kind)
        self.kept_bytes += size
        if kind not in _RUNNER_KINDS and (self.kept_bytes > KEEP_TOTAL_BYTES or len(self.frames) >= KEEP_FRAMES):
            raise ProtocolError(f"more than {KEEP_FRAMES} frames or {KEEP_TOTAL_BYTES >> 20} MiB of them to keep")
        self.frames.append(frame)

    def _notify(self, frame: dict) -> None:
        if self.on_event is None:
            return
        try:
            stop = self.on_event(frame)
        except Exception as e:  # noqa: BLE001 - a bug on the parent's side: stop the child rather than judge on
            self.error = f"the parent failed to handle a frame ({type(e).__name__}: {e})"
            stop = True
        if stop:
            self.stopped = True
            self.stop()
