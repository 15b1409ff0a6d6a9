"""Confinement of a sandboxed child process, applied by the child to itself before untrusted code runs.

Called once by `sandbox.child_main` after the trusted imports and before the handler (which may import a
candidate). Each step is tried, and what was and was not applied is returned as a report; a step that
is impossible here (not root, EPERM, an old kernel) is skipped and said so, never silently assumed.

Steps, in order:
- resource limits: no core dumps, a file-size limit, a process/thread limit, open files, and on CPU an
  address-space limit (not with CUDA: the driver reserves huge virtual ranges and fails under RLIMIT_AS);
- a new network namespace (no network: not even the host's 127.0.0.1);
- a new mount namespace in which every top-level directory but the system's (/usr, /etc, /dev, /sys and
  the /bin and /lib links) is covered by a fresh read-only tmpfs, and /dev/shm too: /home, /root, /tmp,
  /var, /run, /opt, /srv, /mnt and the project checkout wherever it lives. Re-exposed as they are: the
  child's private working directory (its Triton cache is inside), the Python installation (prefixes and
  every directory on sys.path, but of the project checkout only the autotune package) and the paths the
  caller names (open_tree + move_mount, Linux >= 5.2). In its own PID namespace (namespaces.py) it also
  gets a fresh /proc: other processes, and their command lines, are not there;
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

from autotune.sandbox import seccomp

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 16384, 1 << 18
OPEN_TREE_CLONE, AT_RECURSIVE, AT_FDCWD, MOVE_MOUNT_F_EMPTY_PATH = 1, 0x8000, -100, 4
SYS_OPEN_TREE, SYS_MOVE_MOUNT = 428, 429  # the same numbers on x86_64 and aarch64 (asm-generic)
PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 4, 38
MNT_DETACH = 2

# Left visible: programs, libraries, configuration, devices. Every other top-level directory is covered with
# an empty read-only tmpfs (home directories, checkouts, /tmp, /var, /run ...), and /dev/shm: world-writable.
SYSTEM = ("/usr", "/etc", "/dev", "/proc", "/sys", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ALSO_COVERED = ("/dev/shm", "/dev/mqueue")
PACKAGE = str(Path(__file__).resolve().parents[1])  # the autotune package: the child runs its modules

_libc = ctypes.CDLL(None, use_errno=True)


def _errno_text() -> str:
    return os.strerror(ctypes.get_errno())


def confine(workdir: str, *, uid: int | None, memory_mb: int, file_mb: int, gpu: bool, nproc: int = 256,
            readable=(), own_pid_namespace: bool = False, seccomp_profile: str | None = "cpu") -> dict:
    """Apply every step that is possible; return {step: "applied ..." | "not applied: why"}. `readable`:
    further paths to keep visible under the covered directories (a model checkpoint, say).
    `own_pid_namespace`: this process is in a PID namespace of its own, so a fresh /proc can be mounted.
    `seccomp_profile`: "cpu" (no processes), "gpu" (processes, for Triton's compile) or None (tests only)."""
    report = {"rlimits": _limit_resources(memory_mb, file_mb, gpu, nproc)}
    root = os.geteuid() == 0
    report["network"] = _isolate_network() if root else "not applied: not root (the network is reachable)"
    report["filesystem"] = _private_filesystem(workdir, list(readable)) if root else "not applied: not root"
    if report["filesystem"].startswith("applied"):
        report["proc"] = _fresh_proc() if own_pid_namespace else "not applied: no PID namespace of its own"
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


def _covers() -> list[str]:
    """The directories to cover: every top-level one but the system's, and the world-writable ones in /dev."""
    top = [e.path for e in os.scandir("/") if e.is_dir(follow_symlinks=False) and e.path not in SYSTEM]
    return sorted(top) + [d for d in ALSO_COVERED if os.path.isdir(d) and not os.path.islink(d)]


def _private_filesystem(workdir: str, readable: list[str]) -> str:
    if _libc.unshare(CLONE_NEWNS) != 0:
        return f"not applied: unshare(CLONE_NEWNS) failed ({_errno_text()})"
    if _libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return f"not applied: making mounts private failed ({_errno_text()})"
    covers = _covers()
    keep = [p for p in [workdir, *python_paths(), *readable]
            if os.path.exists(p) and any(_under(p, c) for c in covers)]
    keep = [p for p in keep if not any(q != p and _under(p, q) for q in keep)]  # outermost only
    trees = {}
    for p in keep:  # detached copies of what must stay visible, taken before anything is covered
        fd = _libc.syscall(SYS_OPEN_TREE, AT_FDCWD, p.encode(), OPEN_TREE_CLONE | AT_RECURSIVE)
        if fd < 0:
            return f"not applied: open_tree({p}) failed ({_errno_text()}); needs Linux >= 5.2"
        trees[p] = fd
    covered = []
    for c in covers:
        problem = _cover(c, {p: fd for p, fd in trees.items() if _under(p, c)})
        if problem:
            done = f"; {', '.join(covered)} covered" if covered else ""
            return f"partly applied: own mount namespace{done}; {problem}"
        covered.append(c)
    return (f"applied: own mount namespace; {', '.join(covered)} covered read-only; the private directory, the "
            f"Python installation{' and ' + ', '.join(readable) if readable else ''} kept")


def _fresh_proc() -> str:
    if _libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) != 0:
        return f"not applied: mounting a fresh /proc failed ({_errno_text()})"
    return "applied: a fresh /proc that shows only the processes of its own PID namespace"


def _cover(directory: str, trees: dict[str, int]) -> str:
    """Mount an empty read-only tmpfs over `directory` and move the kept trees back in; '' when done. If a
    tree cannot be put back, the cover is taken off again, so nothing needed stays hidden."""
    if _libc.mount(b"tmpfs", directory.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"size=16m,mode=755") != 0:
        return f"mounting a tmpfs over {directory} failed ({_errno_text()})"
    for p, fd in trees.items():
        os.makedirs(p, exist_ok=True)
        if _libc.syscall(SYS_MOVE_MOUNT, fd, b"", AT_FDCWD, p.encode(), MOVE_MOUNT_F_EMPTY_PATH) != 0:
            error = _errno_text()
            _libc.umount2(directory.encode(), MNT_DETACH)
            return f"re-exposing {p} failed ({error}); {directory} left as it was"
        os.close(fd)
    return ""


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


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
