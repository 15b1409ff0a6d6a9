"""A fork server for sandboxed children: their trusted imports made once, not once per child.

A child's module imports torch and Triton before it is confined (2-3 s of a 3 s start on a CPU). The first
`run_isolated` of a module starts a zygote for it: `python -I -B -m autotune.sandbox.zygote MODULE`, with the
children's allow-listed environment (its own private directory, no secret of the parent's). It imports MODULE
(never as `__main__`, so nothing of it runs) and then forks one child per run. The child, in a session of its
own, takes the run's environment, directory, stderr and pipes, closes every other descriptor and runs MODULE as
`__main__`, exactly as `python -I -B -m MODULE` would, from namespaces and confinement on.

What a child can read of the zygote is what a fresh interpreter would hold after the same imports: the zygote
never receives a payload (its children read theirs from their own pipes), never runs untrusted code and
imports nothing but MODULE. Python's `random` and the temporary directory are reset in each child. The zygote
is single-threaded (a fork copies only the calling thread) and exits when the parent's end of its socket
closes. It reports each child's exit status, which the parent reads as a `Popen.returncode`.
"""

from __future__ import annotations

import array
import contextlib
import importlib
import json
import os
import random
import runpy
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path

MAX_MESSAGE = 1 << 16
STDERR_TAIL_BYTES = 4000


# ----------------------------------------------------------------------------------------------- parent side

class Forked:
    """A child forked by a zygote, as the runner uses a `subprocess.Popen`: pid, returncode, wait()."""

    def __init__(self, pid: int, zygote: Zygote) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._zygote = zygote

    def wait(self, timeout: float | None = None) -> int:
        with self._zygote.changed:
            if not self._zygote.changed.wait_for(lambda: self.returncode is not None, timeout):
                raise subprocess.TimeoutExpired(f"zygote child {self.pid}", timeout or 0)
        assert self.returncode is not None
        return self.returncode


class Zygote:
    """The parent's end of one zygote: `spawn` forks a child of it; a reader thread collects exit statuses."""

    def __init__(self, module: str, env: dict[str, str], workdir: Path) -> None:
        self.module = module
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._stderr = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-B", "-m", __name__, module, str(theirs.fileno())], cwd=workdir, env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._stderr,
                pass_fds=(theirs.fileno(),), start_new_session=True)
        finally:
            theirs.close()
        self._sock = ours
        self._send_lock = threading.Lock()
        self.changed = threading.Condition()
        self._answer: Forked | str | None = None  # the child of the one request under way, or why there is none
        self._children: dict[int, Forked] = {}
        self.dead = False
        threading.Thread(target=self._read, daemon=True, name=f"zygote {module}").start()

    def spawn(self, cwd: Path, env: dict[str, str], fds: tuple[int, int, int]) -> Forked:
        """Fork a child that runs the module as `__main__` in `cwd` with `env`; `fds`: (payload pipe's read end,
        result pipe's write end, stderr), passed as `--sandbox-fds IN,OUT` and fd 2."""
        with self._send_lock:  # one request under way at a time: the next child started is its answer
            with self.changed:
                if self.dead:
                    raise OSError(f"the zygote of {self.module} is gone: {self.stderr_tail()}")
                self._answer = None
            request = json.dumps({"cwd": str(cwd), "env": env}).encode()
            if len(request) > MAX_MESSAGE:
                raise ValueError(f"a request of {len(request)} bytes for the zygote of {self.module} (at most "
                                 f"{MAX_MESSAGE}): the environment is too large")
            socket.send_fds(self._sock, [request], list(fds))
            with self.changed:
                self.changed.wait_for(lambda: self._answer is not None or self.dead)
                answer, self._answer = self._answer, None
                if isinstance(answer, str):
                    raise OSError(f"the zygote of {self.module} {answer}")
                if answer is None:
                    raise OSError(f"the zygote of {self.module} died while forking: {self.stderr_tail()}")
                return answer

    def _read(self) -> None:
        try:
            while True:
                data = self._sock.recv(MAX_MESSAGE)
                if not data:
                    break
                message = json.loads(data)
                with self.changed:
                    if "error" in message:
                        self._answer = str(message["error"])
                        self.changed.notify_all()
                        continue
                    pid = int(message["pid"])
                    if "started" in message:
                        self._children[pid] = self._answer = Forked(pid, self)
                    else:
                        child = self._children.pop(pid, None)
                        if child is not None:
                            child.returncode = int(message["returncode"])
                    self.changed.notify_all()
        except (OSError, ValueError, KeyError):
            pass
        self._died()

    def _died(self) -> None:
        """The zygote is gone (killed, or its socket broke): its children are killed with their groups and
        read as killed, and the next run starts a new zygote."""
        with self.changed:
            self.dead = True
            for pid, child in self._children.items():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
                child.returncode = -signal.SIGKILL
            self._children.clear()
            self.changed.notify_all()
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.wait()

    def stderr_tail(self) -> str:
        self._stderr.seek(0, os.SEEK_END)
        size = self._stderr.tell()
        self._stderr.seek(max(0, size - STDERR_TAIL_BYTES))
        return self._stderr.read().decode("utf-8", "replace").strip() or f"exit status {self.proc.poll()}"


_zygotes: dict[tuple[str, bool], Zygote] = {}
_zygotes_lock = threading.Lock()


def zygote(module: str, gpu: bool, env: dict[str, str], workdir: Path) -> Zygote:
    """The live zygote of `module` (one with a GPU, one without), started with `env` in `workdir` if none is."""
    with _zygotes_lock:
        found = _zygotes.get((module, gpu))
        if found is None or found.dead:
            found = _zygotes[(module, gpu)] = Zygote(module, env, workdir)
        return found


def stop_zygotes() -> None:
    """Kill every zygote (the run was told to stop): none outlives the run, even one still making its imports."""
    with _zygotes_lock:
        for z in _zygotes.values():
            with contextlib.suppress(ProcessLookupError):
                z.proc.kill()


# ----------------------------------------------------------------------------------------------- zygote side

def main() -> None:
    module, sock = sys.argv[1], socket.socket(fileno=int(sys.argv[2]))
    try:
        importlib.import_module(module)
    except BaseException:  # noqa: BLE001 (each child imports it again and fails the same way, on its own stderr)
        traceback.print_exc()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():  # a forked child could not use the GPU
        sys.exit(f"importing {module} initialised CUDA: a module run in the sandbox must leave that to its handler")
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    request = bytearray(MAX_MESSAGE)  # one buffer, zeroed after each fork: no run's request outlives it here
    while True:
        ready, _, _ = select.select([sock.fileno(), wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
            _reap(sock)
        if sock.fileno() in ready:
            size, fds = _receive(sock, request)
            if not size:
                os._exit(0)  # the parent is gone; its own code kills the children it still had
            answer: dict[str, object]
            try:  # a failed fork (EAGAIN in a full pids cgroup, say) fails this run only
                answer = {"pid": _fork(module, memoryview(request)[:size], fds,
                                       keep=(sock.fileno(), wake_r, wake_w)), "started": True}
            except OSError as e:
                answer = {"error": f"could not start a child: {e}"}
            finally:
                request[:size] = bytes(size)
                for fd in fds:
                    os.close(fd)
            sock.send(json.dumps(answer).encode())


def _receive(sock: socket.socket, into: bytearray) -> tuple[int, list[int]]:
    """A request into `into` (its size, 0 at the end) and the descriptors passed with it."""
    fds = array.array("i")
    size, ancillary, flags, _ = sock.recvmsg_into([into], socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or (size and len(fds) != 3):
        for fd in fds:
            os.close(fd)
        raise SystemExit(f"a malformed request from the parent ({size} bytes, {len(fds)} descriptors)")
    return size, list(fds)


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        sock.send(json.dumps({"pid": pid, "returncode": os.waitstatus_to_exitcode(status)}).encode())


def _fork(module: str, request: memoryview, fds: list[int], keep: tuple[int, ...]) -> int:
    """Fork the child; return its pid once it leads a session of its own (so that its process group can be
    killed from the moment the parent knows it)."""
    ready_r, ready_w = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(ready_r)
        os.close(ready_w)
        raise
    if pid:
        os.close(ready_w)
        os.read(ready_r, 1)  # end of file: the child has called setsid (or died)
        os.close(ready_r)
        return pid
    try:
        os.setsid()
        os.close(ready_w)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        _become(module, json.loads(bytes(request)), fds, closing=(*keep, ready_r))
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        os._exit(1)
    os._exit(0)


def _reseed() -> None:
    """Every random generator a child may hold from the zygote's imports, drawn afresh (a module that keeps its own
    registers an `os.register_at_fork` hook: autotune.verify.interp.launch). Not drawn afresh: the string hash
    secret and the address layout, which the children of one zygote share; the checker keeps no secret in
    either (no set or dict order decides a verdict, and a kernel is compared at the addresses each call gets)."""
    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    if "torch" in sys.modules:
        sys.modules["torch"].seed()


def _become(module: str, request: dict, fds: list[int], closing: tuple[int, ...]) -> None:
    """In the forked child: take the run's descriptors, directory and environment, then run the module."""
    in_fd, out_fd, err_fd = fds
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.dup2(err_fd, 2)
    for fd in (null, err_fd, *closing):
        os.close(fd)
    for name in os.listdir("/proc/self/fd"):  # nothing of the zygote's but the module's imports
        fd = int(name)
        if fd > 2 and fd not in (in_fd, out_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None
    _reseed()
    sys.argv = [module, "--sandbox-fds", f"{in_fd},{out_fd}"]
    sys.modules.pop(module, None)  # run afresh as __main__, its imports already made (as `python -m` would)
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
