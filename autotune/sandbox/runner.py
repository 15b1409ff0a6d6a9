"""Running a Python module in an isolated child process: the general runner of untrusted code.

The checker runs every candidate through it, and the model-level check runs the whole model with a
candidate plugged in through it. The parent never imports what runs inside.

Parent side:
    result = run_isolated("autotune.verify.worker", payload, limits=Limits(120, 8192), workdir=d)
A module run this way ends with
    if __name__ == "__main__":
        sandbox.child_main(handler)   # handler(payload, send) -> result dict; send(kind, **fields)

How it is kept apart (see confine.py for what the child applies to itself):
- `python -I -B -m module` in its own session and process group, which (as root) moves itself into new PID
  and IPC namespaces first (namespaces.py); on timeout, and after every run, the whole group and every
  process of the child's private uid are killed with SIGKILL, and with them the namespace. It is forked by
  the module's zygote (zygote.py), which made the module's imports once: a child starts in 0.1 s, not 3 s;
- an allow-listed environment: PATH, LANG, HOME/TMPDIR and the Triton/Inductor caches inside its private
  directory, one thread, TRITON_INTERPRET=1 on CPU, CUDA_VISIBLE_DEVICES on GPU; nothing else of the
  parent's environment (API keys, tokens) reaches it;
- payload in and results out through two pipes the parent created and passes by number, as
  length-prefixed `torch.save` frames that the parent reads with `torch.load(weights_only=True)`
  (channel.py): tensors travel both ways, and no arbitrary object is ever unpickled. stdout is
  discarded, never read as a result; stderr goes to a parent-owned unlinked file of which only the tail
  is kept;
- progress frames (`send("case_start", index=3)`) let the parent say where a child that died was, and
  `on_event` lets it judge frames as they arrive and stop the child early.
"""

from __future__ import annotations

import atexit
import contextvars
import dataclasses
import functools
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from autotune.sandbox.channel import MAX_FRAME_BYTES, Reader, encode, read_frame, write_all
from autotune.sandbox.limits import Limits
from autotune.sandbox.schema import Schema, runner_schemas
from autotune.sandbox.zygote import Forked, stop_zygotes, zygote

STDERR_TAIL_BYTES = 4000


@dataclasses.dataclass
class SandboxResult:
    ok: bool  # exited 0 after sending its result
    returncode: int | None
    signal: str | None  # e.g. "SIGSEGV" when a signal ended it
    timed_out: bool
    result: dict | None  # the handler's return value
    stderr_tail: str
    isolation: dict[str, Any]  # what confinement was applied (confine.confine's report + the runner's own)
    duration_s: float
    events: list[dict] = dataclasses.field(default_factory=list)  # progress frames, in order
    stopped: bool = False  # the parent's on_event asked to stop it early (it was killed)
    error: str = ""  # the handler's exception (trimmed traceback) when it raised
    channel_error: str = ""  # a malformed or oversized frame: nothing after it is trusted

    def last_event(self, kind: str) -> dict | None:
        return next((e for e in reversed(self.events) if e.get("kind") == kind), None)


# ----------------------------------------------------------------------------------------------- parent

# The GPU that children started from this thread (or context) may see; set by autotune.agent.slots.
PINNED_GPU: contextvars.ContextVar[str | None] = contextvars.ContextVar("PINNED_GPU", default=None)


def child_env(workdir: Path, gpu: bool, env_extra: dict[str, str] | None = None) -> dict[str, str]:
    """The allow-listed environment of a child: nothing from the parent but PATH, LANG and library paths."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "HOME": str(workdir / "home"),
        "TMPDIR": str(workdir / "tmp"),
        "TRITON_HOME": str(workdir / "home"),
        "TRITON_CACHE_DIR": str(workdir / "triton-cache"),
        "TORCHINDUCTOR_CACHE_DIR": str(workdir / "inductor-cache"),
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
    }
    if "LD_LIBRARY_PATH" in os.environ:  # CUDA libraries in containers; not a secret
        env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
    if gpu:  # the judge's own GPU when the caller pinned one (autotune.agent.slots), else the process's
        env["CUDA_VISIBLE_DEVICES"] = PINNED_GPU.get() or os.environ.get("CUDA_VISIBLE_DEVICES", "0")
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""
        env["TRITON_INTERPRET"] = "1"
    env.update(env_extra or {})
    return env


class Stopped(KeyboardInterrupt):
    """The process was told to stop (Ctrl-C, SIGTERM: `stop_all`) while a child ran: there is no result to record.
    A KeyboardInterrupt, so that no `except Exception` takes it for the child's failure."""


_STOPPING = threading.Event()
_live_lock = threading.Lock()
_live: dict[int, tuple[int | None, ...]] = {}  # the process group of each running child -> its private uids


def stop_all() -> None:
    """Kill every running child's process group and private uids at once, and start no more: each
    `run_isolated` under way raises Stopped (a run told to stop ends within seconds, leaving nothing behind)."""
    _STOPPING.set()
    with _live_lock:
        running = list(_live.items())
    for pgid, uids in running:
        _kill_child(pgid, uids)
    stop_zygotes()


def prewarm(module: str, gpu: bool = False) -> None:
    """Start `module`'s zygote now, so that its imports (2-3 s) run beside the caller's own set-up; the first
    `run_isolated` of the module then forks at once."""
    if not _STOPPING.is_set():
        _zygote(module, gpu)


def run_isolated(module: str, payload: dict | Callable[[], dict], *, limits: Limits, workdir: str | Path,
                 env_extra: dict[str, str] | None = None, gpu: bool = False,
                 on_event: Callable[[dict], bool] | None = None, max_frame_bytes: int = MAX_FRAME_BYTES,
                 readable: tuple[str, ...] = (), progress: Callable[[dict], bool] | None = None,
                 seccomp: str | None = "default", schemas: list[Schema] | None = None,
                 host: dict | Callable[[], dict] | None = None,
                 stream: Callable[[], Iterable[dict]] | None = None) -> SandboxResult:
    """Run `python -m module` isolated, hand it `payload`, and collect what it sends back.

    `payload` may also be a function returning it: it is then called after the child has started, so
    that the child's imports overlap the making of its payload.

    `on_event(frame)`, if given, sees each frame as it arrives (from a reader thread); returning True kills
    the child at once (e.g. the judge saw a failing case and needs nothing more). `progress(frame)`, if given,
    says whether a frame is a step forward (a case finished): the child then has `limits.timeout_s` from its
    start and from each step, and `limits.total_s` in all, instead of `timeout_s` in all. A frame larger than
    `max_frame_bytes` is a protocol error: a hostile child cannot make the parent hold more than that.
    `readable`: paths the child must still read where the filesystem is covered (a model checkpoint under
    /root or /home, say); they are re-exposed as they are, like the Python installation. `seccomp`: the
    filter's profile (seccomp.py), by default "gpu" with `gpu` (Triton's compile starts processes) else "cpu";
    tests of the layers behind it pass "gpu" or None, the CLI and the loop never do. `schemas`: the typed
    schema of every kind of frame the child sends (schema.py; a "result" one replaces the runner's, whose
    payload is otherwise only within the generic bounds): a frame of another kind is a protocol error. Without
    them, frames are checked against the generic bounds and the runner's kinds only.

    `host`: the payload of a second process that the child forks before it reads `payload` (the module's
    `child_main(handler, host=host_handler)` runs it): it gets its own private directory and uid, is confined
    on its own (seccomp "cpu": it runs no program), never sees `payload`, and talks only to the child, through
    pipes of their own; the parent never reads what it writes (autotune.verify.worker: the candidate's host
    process).

    `stream`: more frames for the child after the payload, made one by one while it works (the child reads them
    with `links.receive()`): a pipe's backpressure keeps the parent at most a frame or two ahead of the child,
    so neither holds every case's data at once."""
    if _STOPPING.is_set():
        raise Stopped("stopping: no new isolated process")
    workdir = _private_dir(workdir)
    uid = _free_uid() if os.geteuid() == 0 else None
    settings: dict[str, Any] = {"workdir": str(workdir), "uid": uid, "memory_mb": limits.memory_mb,
                                "file_mb": limits.file_mb, "dir_mb": limits.dir_mb,
                                "gpu": bool(gpu), "readable": [str(Path(p).resolve()) for p in readable],
                                "seccomp": ("gpu" if gpu else "cpu") if seccomp == "default" else seccomp}
    host_uid = None
    if host is not None:
        host_uid = _free_uid() if uid is not None else None
        host_dir = _private_dir(workdir.parent / f"{workdir.name}-host")
        settings["host"] = {**settings, "workdir": str(host_dir), "uid": host_uid, "gpu": False,
                            "seccomp": "cpu" if seccomp is not None else None}
    env = child_env(workdir, gpu, env_extra)
    started = time.monotonic()
    failure: list[BaseException] = []
    proc: Forked | None = None
    try:
        with tempfile.TemporaryFile() as stderr_file:
            proc, in_w, out_r = _spawn(module, workdir, env, gpu, stderr_file)
            with _live_lock:
                _live[proc.pid] = (uid, host_uid)
            if _STOPPING.is_set():  # told to stop while it started: stop_all may have missed it
                _kill_child(proc.pid, (uid, host_uid))
            writer = threading.Thread(target=_send_and_close, args=(in_w, settings, payload, host, stream, failure),
                                      daemon=True)
            table = None if schemas is None else {**runner_schemas(), **{s.kind: s for s in schemas}}
            reader = Reader(out_r, on_event, lambda: _kill_group(proc.pid), max_frame_bytes, progress, table)
            writer.start()
            reader.start()
            timed_out = _wait(proc, limits, reader, progress is not None)
            _kill_child(proc.pid, (uid, host_uid))
            returncode = proc.wait()
            reader.join(timeout=600)  # the pipe is closed by now; this waits for the frames still being judged
            writer.join(timeout=5)
            stderr_tail = _tail(stderr_file)
    finally:
        if proc is not None:
            with _live_lock:
                _live.pop(proc.pid, None)
        _release_uid(uid)
        _release_uid(host_uid)
    if _STOPPING.is_set():  # killed because the run was told to stop: not the child's verdict
        raise Stopped("stopped while an isolated process ran")
    if failure:  # making the payload failed: a bug on the parent's side, not the child's
        raise failure[0]
    return _result(returncode, timed_out, reader, stderr_tail, time.monotonic() - started,
                   {"uid": uid, "timeout_s": limits.timeout_s, "total_timeout_s": limits.total_s if progress else
                    limits.timeout_s, "process_group": "own session; killed as a whole",
                    "environment": "allow-listed: " + ", ".join(sorted(env))})


def _private_dir(workdir: str | Path) -> Path:
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    os.chmod(workdir, 0o700)
    for sub in ("home", "tmp", "triton-cache", "inductor-cache"):
        (workdir / sub).mkdir(exist_ok=True)
    return workdir


def _spawn(module: str, workdir: Path, env: dict, gpu: bool, stderr_file) -> tuple[Forked, int, int]:
    """(the child, forked by the module's zygote; the write end of its payload pipe; the read end of its result
    pipe)."""
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    try:
        proc = _zygote(module, gpu).spawn(workdir, env, (in_r, out_w, stderr_file.fileno()))
    except BaseException:
        os.close(in_w)
        os.close(out_r)
        raise
    finally:
        os.close(in_r)
        os.close(out_w)
    return proc, in_w, out_r


def _zygote(module: str, gpu: bool):
    """The module's live zygote, started in the zygotes' own directory with the children's environment if none is."""
    return zygote(module, gpu, child_env(_zygote_dir(), gpu), _zygote_dir())


@functools.cache
def _zygote_dir() -> Path:
    """The zygotes' own private directory (their HOME, TMPDIR and caches while they import), one per process."""
    path = _private_dir(tempfile.mkdtemp(prefix="autotune-zygote-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def _send_and_close(fd: int, settings: dict, payload, host, stream, failure: list) -> None:
    """The settings first (with a host's payload, which the child needs before it forks the host), then the
    payload, in a frame of its own: a host forked between the two never holds it; then the stream's frames.
    Payloads given as functions are made here, while the child starts up."""
    try:
        if host is not None:
            settings = {**settings, "host": {**settings["host"], "payload": host() if callable(host) else host}}
        write_all(fd, encode({"sandbox": settings}))
        payload = payload() if callable(payload) else payload
        write_all(fd, encode({"payload": payload}))
        for frame in stream() if stream is not None else ():
            write_all(fd, encode(frame))
    except BrokenPipeError:  # the child died before reading its payload; its exit status says why
        pass
    except BaseException as e:  # noqa: BLE001 (raised again by the thread that waits)
        failure.append(e)
    finally:
        os.close(fd)


def _wait(proc: Forked, limits: Limits, reader: Reader, stepwise: bool) -> bool:
    """Wait for the child's exit; True if it ran out of time first (timeout_s since its last step, or in all)."""
    end = reader.started + (limits.total_s if stepwise else limits.timeout_s)
    while True:
        deadline = min(end, reader.last_step + limits.timeout_s) if stepwise else end
        left = deadline - time.monotonic()
        if left <= 0:
            return True
        try:
            proc.wait(timeout=min(left, 1.0) if stepwise else left)
            return False
        except subprocess.TimeoutExpired:
            continue


_uids_lock = threading.Lock()
_uids_taken: set[int] = set()  # by children of this process that are still running


def _free_uid() -> int:
    """A uid no process uses: each child gets its own, so its processes can be found and killed by uid.
    Taken until `_release_uid`, so that parallel runs in one process never share one."""
    used = {uid for _, uid in _processes()}
    with _uids_lock:
        while True:
            uid = 200_000 + secrets.randbelow(100_000)
            if uid not in used and uid not in _uids_taken:
                _uids_taken.add(uid)
                return uid


def _release_uid(uid: int | None) -> None:
    with _uids_lock:
        _uids_taken.discard(uid)


def _processes() -> list[tuple[int, int]]:
    """(pid, real uid) of every live process (zombies, already dead, left out), from /proc."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            if not fields["State"].strip().startswith(("Z", "X")):
                found.append((int(entry.name), int(fields["Uid"].split()[0])))
        except (OSError, KeyError, ValueError):
            continue
    return found


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_child(pgid: int, uids: tuple[int | None, ...]) -> None:
    """A child's process group and everything under each of its private uids (its own, its host's)."""
    for uid in uids:
        _kill_everything(pgid, uid)


def _kill_everything(pgid: int, uid: int | None) -> None:
    """SIGKILL the child's process group, then anything left running under its private uid (a grandchild
    that called setsid escapes the group but not the uid)."""
    _kill_group(pgid)
    if uid is None:
        return
    for _ in range(5):
        left = [pid for pid, u in _processes() if u == uid]
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def _tail(f) -> str:
    f.seek(0, os.SEEK_END)
    size = f.tell()
    f.seek(max(0, size - STDERR_TAIL_BYTES))
    return f.read().decode("utf-8", "replace")


def _result(returncode: int, timed_out: bool, reader: Reader, stderr_tail: str, duration_s: float,
            runner: dict) -> SandboxResult:
    isolation: dict[str, Any] = {}
    result: dict | None = None
    error = ""
    events: list[dict] = []
    for frame in reader.frames:
        kind = frame.get("kind")
        if kind == "isolation" and not isolation:
            isolation = dict(frame.get("report", {}))
        elif kind == "result" and result is None:
            result = frame.get("payload")
        elif kind == "error" and not error:
            error = str(frame.get("error", ""))
        else:
            events.append(frame)
    sig = _signal_name(-returncode) if returncode is not None and returncode < 0 else None
    ok = returncode == 0 and result is not None and not timed_out and not reader.error
    return SandboxResult(ok=ok, returncode=returncode, signal=sig, timed_out=timed_out, result=result,
                         stderr_tail=stderr_tail, isolation={**runner, **isolation}, duration_s=duration_s,
                         events=events, stopped=reader.stopped, error=error, channel_error=reader.error)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:  # a real-time signal, which has no name
        return f"signal {number}"


# ----------------------------------------------------------------------------------------------- child

@dataclasses.dataclass
class Links:
    """A child's pipes beyond its payload and its frames to the parent (autotune.verify.worker uses them)."""

    parent_fd: int  # the payload pipe, left open for the parent's stream
    from_host: int | None = None  # the host's frames
    to_host: int | None = None  # frames for the host

    def receive(self) -> dict | None:
        """The parent's next stream frame; None at the end of the stream."""
        return read_frame(self.parent_fd, limit=1 << 62)


def _from_parent(fd: int, key: str) -> Any:
    """The parent's next frame's `key` (trusted: the parent wrote it); EOFError when the parent closed first."""
    frame = read_frame(fd, limit=1 << 62)
    if frame is None:
        raise EOFError(f"the parent closed the stream before sending the {key}")
    return frame[key]


def child_main(handler: Callable[..., dict], host: Callable[..., dict] | None = None,
               host_frames: Callable[[dict], bytes] = encode) -> None:
    """The child's side: read the settings, fork the host if there is one, read the payload, confine this
    process, run the handler, send its result. With a host, the handler is called as
    `handler(payload, send, links)` (`Links`: the rest of the parent's stream and the host's two pipes), and the
    host as `host(payload, send, receive_fd)`, writing frames made by `host_frames`."""
    from autotune.sandbox import namespaces

    in_fd, out_fd = (int(x) for x in sys.argv[sys.argv.index("--sandbox-fds") + 1].split(","))
    processes = namespaces.enter(close_fds=(in_fd, out_fd))  # from here on, this is the worker
    settings = _from_parent(in_fd, "sandbox")
    links = Links(in_fd)
    if host is not None:
        links.from_host, links.to_host = _fork_host(host, settings["host"], (in_fd, out_fd), host_frames)
    payload = _from_parent(in_fd, "payload")
    if host is None:
        os.close(in_fd)

    def send(kind: str, **fields: Any) -> None:
        write_all(out_fd, encode({"kind": kind, **fields}))

    send("isolation", report={"processes": processes, **_confine(settings, processes)})
    _run_handler(handler, (payload, send) if host is None else (payload, send, links), send)


def _confine(settings: dict, processes: str) -> dict:
    from autotune.sandbox.confine import confine

    report = confine(settings["workdir"], uid=settings["uid"], memory_mb=settings["memory_mb"],
                     file_mb=settings["file_mb"], gpu=settings["gpu"], readable=settings.get("readable", ()),
                     own_pid_namespace=processes.startswith("applied"), seccomp_profile=settings["seccomp"],
                     dir_mb=settings["dir_mb"])
    os.chdir(settings["workdir"])
    return report


def _run_handler(handler: Callable[..., dict], args: tuple, send: Callable[..., None]) -> None:
    try:
        result = handler(*args)
    except BaseException as e:  # noqa: BLE001 (whatever the handler raises goes back to the parent as its error)
        send("error", error=trim_traceback(e))
        os._exit(1)
    send("result", payload=result)
    os._exit(0)  # no atexit hooks, no finalizers of code the handler imported


def _fork_host(host: Callable[..., dict], settings: dict, parent_fds: tuple[int, ...],
               frame_of: Callable[[dict], bytes]) -> tuple[int, int]:
    """Fork the host process (before the payload is read: it never holds it) into PID and IPC namespaces of its
    own, confined on its own; (the read end of its frames, made by `frame_of`; the write end of the frames it
    is sent). It sees no GPU."""
    from autotune.sandbox import namespaces

    up_r, up_w = os.pipe()  # host -> child
    down_r, down_w = os.pipe()  # child -> host
    if os.fork():
        os.close(up_w)
        os.close(down_r)
        return up_r, down_w
    try:
        for fd in (up_r, down_w, *parent_fds):
            os.close(fd)
        os.environ.update(child_env(Path(settings["workdir"]), gpu=False))  # its own dirs, no GPU
        processes = namespaces.enter(close_fds=(up_w, down_r))

        def send(kind: str, **fields: Any) -> None:
            write_all(up_w, frame_of({"kind": kind, **fields}))

        send("isolation", report={"processes": processes, **_confine(settings, processes)})
        _run_handler(host, (settings["payload"], send, down_r), send)
    finally:
        os._exit(1)


def trim_traceback(e: BaseException, keep_files: tuple[str, ...] = (), limit: int = 3000) -> str:
    """The exception and, when `keep_files` is given, only the frames in those files."""
    lines = traceback.format_exception(type(e), e, e.__traceback__)
    if keep_files:
        kept = [line for line in lines if line.startswith("Traceback") or any(f in line for f in keep_files)
                or not line.startswith("  File ")]
        lines = kept
    text = "".join(lines).strip()
    return text if len(text) <= limit else "..." + text[-limit:]
