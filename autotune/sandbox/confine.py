"""Confinement of a sandboxed child process, applied by the child to itself before untrusted code runs.

Called once by `sandbox.child_main` after the trusted imports and before the handler (which may import a
candidate). Each step is tried, and what was and was not applied is returned as a report; a step that
is impossible here (not root, EPERM, an old kernel) is skipped and said so, never silently assumed.

Steps, in order:
- resource limits: no core dumps, a file-size limit, a process/thread limit, open files, and on CPU an
  address-space limit (not with CUDA: the driver reserves huge virtual ranges and fails under RLIMIT_AS);
- a new network namespace (no network: not even the host's 127.0.0.1);
- a new mount namespace whose root is built from an empty tmpfs (rootfs.py): only the Python installation
  (of the project checkout only the autotune package), the shared libraries, a minimal /dev, the paths the
  caller names and the private directory, itself a tmpfs capped at `dir_mb` (its Triton cache is inside),
  then pivot_root and the old root detached. In its own PID namespace (namespaces.py) it also gets a fresh
  /proc: other processes, and their command lines, are not there;
- no_new_privs, then a drop to an unprivileged uid/gid that owns only the private directory;
- not dumpable, so that other processes of the same uid cannot ptrace it or read its /proc/<pid>/mem;
- last, a seccomp filter (seccomp.py, needs no root): processes (on CPU), sockets, mounts, namespaces, ptrace
  and the rest refused by the kernel with EPERM, whatever Python-level defence the untrusted code got past.

Measured here (root in a VM, Linux 6.18): every step applies; a probe inside can write only its
private directory, cannot connect to a server on the host's 127.0.0.1, and sees no parent secrets.
"""

from __future__ import annotations

import ctypes
import os
import resource
import site
import sys
from pathlib import Path

from autotune.sandbox import rootfs, seccomp

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_REC, MS_PRIVATE = 16384, 1 << 18
PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 4, 38
MNT_DETACH = 2

# Left visible: programs, libraries, configuration, devices. Every other top-level directory is covered with
# an empty read-only tmpfs (home directories, checkouts, /tmp, /var, /run ...), and /dev/shm: world-writable.
PACKAGE = str(Path(__file__).resolve().parents[1])  # the autotune package: the child runs its modules

_libc = ctypes.CDLL(None, use_errno=True)


def _errno_text() -> str:
    return os.strerror(ctypes.get_errno())


def confine(workdir: str, *, uid: int | None, memory_mb: int, file_mb: int, gpu: bool, nproc: int = 256,
            readable=(), own_pid_namespace: bool = False, seccomp_profile: str | None = "cpu",
            dir_mb: int = 256) -> dict:
    """Apply every step that is possible; return {step: "applied ..." | "not applied: why"}. `readable`:
    further paths to keep visible under the covered directories (a model checkpoint, say).
    `own_pid_namespace`: this process is in a PID namespace of its own, so a fresh /proc can be mounted.
    `seccomp_profile`: "cpu" (no processes), "gpu" (processes, for Triton's compile) or None (tests only).
    `dir_mb`: the size of the private directory's own tmpfs (where root)."""
    report = {"rlimits": _limit_resources(memory_mb, file_mb, gpu, nproc)}
    root = os.geteuid() == 0
    report["network"] = _isolate_network() if root else "not applied: not root (the network is reachable)"
    report["filesystem"] = (_private_filesystem(workdir, list(readable), gpu, dir_mb, uid, own_pid_namespace)
                            if root else "not applied: not root (every world-readable file is visible; the private "
                                         "directory has only the file-size limit)")
    if report["filesystem"].startswith("applied") and own_pid_namespace:
        report["proc"] = "applied: a fresh /proc that shows only the processes of its own PID namespace"
    elif report["filesystem"].startswith("applied"):
        report["proc"] = "not applied: no PID namespace of its own (the new root has no /proc)"
    else:
        report["proc"] = "not applied: no mount namespace of its own (other processes are visible in /proc)"
    if not root:
        report["user"] = f"not applied: already unprivileged (uid {os.getuid()})"
    elif uid is None:
        report["user"] = "not applied: no uid given"
    elif not _readable_by_others(python_paths()):  # e.g. Python under /root with no mount namespace
        report["user"] = "not applied: the Python installation would not be readable by another uid"
    else:
        report["user"] = _drop_privileges(workdir, uid)
    report["no_new_privs"] = _prctl(PR_SET_NO_NEW_PRIVS, 1, "set")
    report["dumpable"] = _prctl(PR_SET_DUMPABLE, 0, "cleared")
    report["seccomp"] = seccomp.apply(seccomp_profile) if seccomp_profile else "not applied: switched off by the caller"
    return report


def _limit_resources(memory_mb: int, file_mb: int, gpu: bool, nproc: int) -> str:
    limits = {"core": (resource.RLIMIT_CORE, 0), "fsize": (resource.RLIMIT_FSIZE, file_mb << 20),
              "nofile": (resource.RLIMIT_NOFILE, 1024), "nproc": (resource.RLIMIT_NPROC, nproc)}
    if not gpu:
        limits["as"] = (resource.RLIMIT_AS, memory_mb << 20)
    done, failed = [], []
    for name, (which, value) in limits.items():
        try:
            resource.setrlimit(which, (value, value))
            done.append(f"{name}={value}")
        except (ValueError, OSError) as e:
            failed.append(f"{name} ({e})")
    text = "applied " + ", ".join(done)
    if gpu:
        text += "; address space not limited (CUDA reserves large virtual ranges)"
    return text + (f"; not applied: {', '.join(failed)}" if failed else "")


def _isolate_network() -> str:
    if _libc.unshare(CLONE_NEWNET) != 0:
        return f"not applied: unshare(CLONE_NEWNET) failed ({_errno_text()})"
    return "applied: own network namespace (no interfaces up, no route to the host)"


def python_paths() -> list[str]:
    """What the child must still read: the interpreter, its libraries, everything on sys.path (where an
    entry is the project checkout, an editable install, only the autotune package in it)."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
             PACKAGE, *site.getsitepackages()}
    checkout = os.path.dirname(PACKAGE)
    paths.update(os.path.realpath(p) for p in sys.path if p and os.path.realpath(p) != checkout)
    paths.update(p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p)  # CUDA in containers
    return sorted(p for p in paths if os.path.isdir(p))


def _private_filesystem(workdir: str, readable: list[str], gpu: bool, dir_mb: int, uid: int | None,
                        fresh_proc: bool) -> str:
    if _libc.unshare(CLONE_NEWNS) != 0:
        return f"not applied: unshare(CLONE_NEWNS) failed ({_errno_text()})"
    if _libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return f"not applied: making mounts private failed ({_errno_text()})"
    try:
        return rootfs.build(workdir, keep=python_paths(), readable=readable, gpu=gpu, dir_mb=dir_mb, uid=uid,
                            fresh_proc=fresh_proc)
    except (OSError, KeyError) as e:  # the host's root is still there: say so rather than run half-built
        _libc.umount2(workdir.encode(), MNT_DETACH)
        return f"not applied: building the root failed ({e})"


def _readable_by_others(paths: list[str]) -> bool:
    """Every ancestor of every path is world-searchable (o+x)."""
    try:
        return all(os.stat(a).st_mode & 0o001 for p in paths for a in [Path(p), *Path(p).parents])
    except OSError:
        return False


def _drop_privileges(workdir: str, uid: int) -> str:
    try:
        for dirpath, dirnames, filenames in os.walk(workdir):
            for name in [dirpath, *(os.path.join(dirpath, f) for f in dirnames + filenames)]:
                os.chown(name, uid, uid)
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    except OSError as e:
        return f"not applied: dropping to uid {uid} failed ({e})"
    return f"applied: uid/gid {uid}, no supplementary groups; owns only its private directory"


def _prctl(option: int, value: int, verb: str) -> str:
    if _libc.prctl(option, value, 0, 0, 0) != 0:
        return f"not applied: prctl failed ({_errno_text()})"
    return f"applied: {verb}"
