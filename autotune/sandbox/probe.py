"""A sandbox self-test: run inside `run_isolated`, it tries what a hostile candidate would and reports.

    from autotune.sandbox import Limits, run_isolated
    r = run_isolated("autotune.sandbox.probe", {"write": ["/tmp/x"], "read": ["/root/.netrc"],
                     "connect": [["127.0.0.1", 8000]]}, limits=Limits(timeout_s=60, memory_mb=4096), workdir=d)
    r.result  # {"env": [...], "uid": ..., "write": {"/tmp/x": "blocked: ..."}, ...}
    # also: {"syscalls": list(SYSCALLS)} -> {"os.fork": "refused: EPERM", ...}; {"fill_mb": 4} -> how far
    # writing 4 MiB files into its directory got, and the errno that stopped it

The tests use it to show the isolation holds from the inside, independently of the static scan and of the audit
hook, which the probe never arms.
"""

from __future__ import annotations

import os
import pickle
import random
import signal
import socket
import struct
import subprocess
import sys
import time

import numpy as np
import torch

from autotune.sandbox.runner import child_main
from autotune.verify.interp import launch


def _attempt(fn, errno_name: bool = False) -> str:
    """'allowed', or 'blocked: <strerror>' ('refused: EPERM', the errno's name, with `errno_name`)."""
    import errno

    try:
        fn()
        return "allowed"
    except OSError as e:
        name = errno.errorcode.get(e.errno, str(e.errno)) if e.errno is not None else str(e.errno)
        return f"refused: {name}" if errno_name else f"blocked: {e.strerror or e}"


def _fork() -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def _fork_exec() -> None:
    """What subprocess.Popen calls, without subprocess's audit event (Python 3.11's signature)."""
    import _posixsubprocess

    r, w = os.pipe()
    try:
        # typeshed's stub wants a str cwd and a callable preexec_fn; the C function takes None for both
        pid = _posixsubprocess.fork_exec([b"/bin/true"], [b"/bin/true"], True, (w,),
                                         None,  # type: ignore[arg-type]
                                         None, -1, -1, -1, -1, -1, -1, r, w, True, False, -1, None, None, None, -1,
                                         None,  # type: ignore[arg-type]
                                         True)
        os.waitpid(pid, 0)
    finally:
        os.close(r)
        os.close(w)


def _libc(name: str, *args) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    result = getattr(libc, name)(*args)
    if result == 0 and name == "fork":
        os._exit(0)
    if result < 0:
        raise OSError(ctypes.get_errno(), f"{name} failed")


def _socket() -> None:
    socket.socket().close()


def _socketpair() -> None:
    for s in socket.socketpair():
        s.close()


def _thread() -> None:
    import threading

    ran: list[int] = []
    t = threading.Thread(target=ran.append, args=(1,))
    t.start()
    t.join()
    if ran != [1]:
        raise OSError(0, "the thread did not run")


# What a candidate that got past the scan and the audit hook would try; the kernel's filter must refuse each
# (but the thread). `os.execv` would replace the probe: a probe that sends no result has been replaced.
SYSCALLS = {
    "os.fork": _fork,
    "_posixsubprocess.fork_exec": _fork_exec,
    "subprocess.Popen": lambda: subprocess.run(["/bin/true"], check=False),
    "socket.socket": _socket,
    "socket.socketpair": _socketpair,
    "os.execv": lambda: os.execv("/bin/true", ["/bin/true"]),
    "ctypes fork": lambda: _libc("fork"),
    "ctypes unshare(CLONE_NEWUSER)": lambda: _libc("unshare", 0x10000000),
    "ctypes mount": lambda: _libc("mount", b"none", b"/", None, 0x1000 | 0x4000, None),  # MS_BIND | MS_REC
    "threading.Thread": _thread,
}


def _fill(directory: str, chunk_mb: int) -> dict:
    """Write files of chunk_mb MiB into `directory` until a write fails: how far it got and why it stopped."""
    written, n = 0, 0
    block = b"\0" * (1 << 20)
    try:
        while written < 1 << 40:
            with open(os.path.join(directory, f"fill-{n}.bin"), "wb") as f:
                for _ in range(chunk_mb):
                    f.write(block)
                    written += len(block)
            n += 1
    except OSError as e:
        import errno

        stopped = errno.errorcode.get(e.errno, str(e.errno)) if e.errno is not None else str(e.errno)
        return {"written_mb": written >> 20, "stopped": stopped}
    return {"written_mb": written >> 20, "stopped": "never"}


def _write(path: str) -> None:
    with open(path, "w") as f:
        f.write("written from inside the sandbox\n")


def _read(path: str) -> None:
    with open(path, "rb") as f:
        f.read(1)


def _connect(host: str, port: int) -> None:
    socket.create_connection((host, port), timeout=2).close()


class _Planted:
    """Unpickling this would create a directory in the unpickling process: the parent must refuse it."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return os.mkdir, (self.path,)


def _forge_frame(marker: str) -> None:
    """Write a frame that is a plain pickle with a side effect, straight into the result pipe."""
    out_fd = int(sys.argv[sys.argv.index("--sandbox-fds") + 1].split(",")[1])
    evil = pickle.dumps({"kind": "result", "payload": _Planted(marker)})
    os.write(out_fd, struct.pack("<Q", len(evil)) + evil)


def _fork_chain(marker: str) -> None:
    """A chain of short-lived processes, each starting the next in a new session and exiting: at any moment
    one is alive, never the same one (what a scan of the uid's processes misses)."""
    chain = ("import subprocess, sys, time; time.sleep(0.1); "
             "subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[1], sys.argv[2]], start_new_session=True)")
    subprocess.Popen([sys.executable, "-c", chain, chain, marker], start_new_session=True)


def _make_shm(key: int) -> int:
    """A world-writable System V shared memory segment with this key; its id."""
    import ctypes

    shmid = ctypes.CDLL(None, use_errno=True).shmget(key, 4096, 0o1000 | 0o666)  # IPC_CREAT
    if shmid < 0:
        raise OSError(ctypes.get_errno(), "shmget failed")
    return shmid


def _command_lines() -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                found.append(f.read().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    return found


def _draws() -> dict:
    """A draw of each random generator a child holds from its imports (the zygote made them, as the worker's)."""
    return {"random": random.getrandbits(62), "numpy": int(np.random.randint(1 << 62)),
            "torch": int(torch.randint(1 << 62, (1,))), "program order": launch._rng.permutation(64).tolist()}


def probe(payload: dict, send) -> dict:
    if payload.get("fork_chain"):
        _fork_chain(payload["fork_chain"])
    if payload.get("shm_key"):
        _make_shm(payload["shm_key"])
    if payload.get("spawn_escaper"):  # a grandchild that leaves the process group; the runner must still kill it
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        send("spawned")
    if payload.get("raise"):
        raise RuntimeError(payload["raise"])
    if payload.get("exit"):
        os._exit(payload["exit"])
    if payload.get("signal"):
        os.kill(os.getpid(), getattr(signal, payload["signal"]))
    if payload.get("forge_marker"):
        _forge_frame(payload["forge_marker"])
    found = {
        "env": sorted(os.environ),
        "uid": os.getuid(),
        "euid": os.geteuid(),
        "cwd": os.getcwd(),
        "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),  # with the one listdir opened
        "random": random.getrandbits(62),
        "argv": list(sys.argv),
        "write": {p: _attempt(lambda p=p: _write(p)) for p in payload.get("write", [])},
        "read": {p: _attempt(lambda p=p: _read(p)) for p in payload.get("read", [])},
        "connect": {f"{h}:{port}": _attempt(lambda h=h, port=port: _connect(h, port))
                    for h, port in payload.get("connect", [])},
        "parent_mem": _attempt(lambda: _read(f"/proc/{os.getppid()}/mem")),
        "processes": _command_lines(),
        "listed": {p: sorted(os.listdir(p)) if os.path.isdir(p) else None for p in payload.get("list", [])},
        "syscalls": {name: _attempt(SYSCALLS[name], errno_name=True) for name in payload.get("syscalls", [])},
        "fill": _fill(os.getcwd(), payload["fill_mb"]) if payload.get("fill_mb") else None,
    }
    if payload.get("draws"):
        found["draws"] = _draws()
    for _ in range(payload.get("steps", 0)):  # a run that makes progress: a step frame every step_s seconds
        time.sleep(payload["step_s"])
        send("step")
    if payload.get("sleep_s"):
        time.sleep(payload["sleep_s"])
    if "echo" in payload:
        found["echo"] = payload["echo"]
    return found


if __name__ == "__main__":
    child_main(probe)
