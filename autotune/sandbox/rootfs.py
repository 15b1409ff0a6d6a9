"""The sandboxed child's root filesystem, built from nothing: an empty tmpfs with only what the child needs in it.

Called by confine.py (as root, in a new mount namespace) before the uid drop:

    report = rootfs.build(workdir, keep=[...python paths...], readable=[...], gpu=False, dir_mb=256, uid=uid,
                          fresh_proc=True)

The new root is a tmpfs (read-only once built) holding, each bind-mounted read-only, nosuid, nodev:
- the Python installation: the interpreter, its prefixes, every directory on sys.path (of the project checkout
  only the autotune package), LD_LIBRARY_PATH entries, and the caller's `readable` paths (a checkpoint);
- the shared libraries: /usr/lib*, /lib* (symbolic links such as /lib -> usr/lib are re-made as links) and
  /etc/ld.so.cache; the CPU topology (/sys/devices/system/cpu: torch counts its threads from it);
- a minimal /dev: null, zero, full, random, urandom, and /dev/fd, stdin, stdout, stderr as links into /proc;
- a fresh /proc when the child has a PID namespace of its own (it shows only that namespace's processes);
- the private directory, a tmpfs of its own capped at `dir_mb` MiB and 100,000 inodes, owned by the child's uid
  (writing past it is ENOSPC), with home/, tmp/, triton-cache/ and inductor-cache/ made fresh in it;
- with `gpu`, also /usr, /bin, /sbin, /etc/alternatives and /etc/ld.so.conf* (Triton's first launch runs
  ldconfig, ptxas and a C compiler), the whole of /sys, and the NVIDIA device nodes (/dev/nvidia*). Not yet
  run on a GPU.
Nothing else of the host is there: no file directly under /, no /etc but the loader's cache, no /home, no /root
but the path to a Python installation that lives there, no /tmp, no /var, no project checkout. The old root is
detached after pivot_root, so no path leads back to it.

Measured (strace -f of `autotune verify rms_norm rms_norm_rowwise.py verify=quick`): after confinement the
worker opens only its private directory, the Python installation, /sys/devices/system/cpu/{possible,present,
kernel_max}, /proc/self, /proc/cpuinfo, /dev/null and /dev/urandom; its shared libraries are loaded before.
"""

from __future__ import annotations

import ctypes
import glob
import os

from autotune.sandbox import seccomp

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 8, 32, 4096, 16384
MNT_DETACH = 2
SUBDIRS = ("home", "tmp", "triton-cache", "inductor-cache")  # the runner's environment points into these
DEVICES = ("null", "zero", "full", "random", "urandom")
LINKS = {"dev/fd": "/proc/self/fd", "dev/stdin": "/proc/self/fd/0", "dev/stdout": "/proc/self/fd/1",
         "dev/stderr": "/proc/self/fd/2"}
MAX_INODES = 100_000  # files in the private directory: a flood of empty files costs the host memory too

_libc = ctypes.CDLL(None, use_errno=True)


class MountError(OSError):
    pass


def _mount(source, target: str, fstype, flags: int, data=None) -> None:
    enc = lambda s: s.encode() if isinstance(s, str) else s
    if _libc.mount(enc(source), target.encode(), enc(fstype), flags, enc(data)) != 0:
        raise MountError(ctypes.get_errno(), f"mount {source or ''} on {target}: {os.strerror(ctypes.get_errno())}")


def system_paths(gpu: bool) -> list[str]:
    """The host paths the child's root shows besides Python, devices and its private directory."""
    libs = [f"{top}lib{bits}" for top in ("/", "/usr/") for bits in ("", "32", "64", "x32")]
    paths = [*libs, "/etc/ld.so.cache", "/sys/devices/system/cpu"]
    if gpu:
        paths += ["/usr", "/bin", "/sbin", "/etc/alternatives", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/sys"]
    return [p for p in paths if os.path.lexists(p)]


def devices(gpu: bool) -> list[str]:
    return [p for p in [*(f"/dev/{d}" for d in DEVICES), *(glob.glob("/dev/nvidia*") if gpu else [])]
            if os.path.exists(p)]


def build(workdir: str, *, keep: list[str], readable: list[str], gpu: bool, dir_mb: int, uid: int | None,
          fresh_proc: bool) -> str:
    """Build the root over `workdir` (which the new root hides), pivot into it, detach the old one; the report."""
    root = workdir
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=755")
    shown = _bind_all(root, [*system_paths(gpu), *keep, *readable])
    shown += _bind_all(root, devices(gpu), MS_RDONLY | MS_NOSUID)  # device nodes: not nodev
    owner = f",uid={uid},gid={uid}" if uid is not None else ""
    private = root + workdir
    os.makedirs(private, exist_ok=True)
    _mount("tmpfs", private, "tmpfs", MS_NOSUID | MS_NODEV, f"size={dir_mb}m,nr_inodes={MAX_INODES},mode=700{owner}")
    for sub in SUBDIRS:
        os.mkdir(os.path.join(private, sub))
    for link, target in LINKS.items():
        os.symlink(target, os.path.join(root, link))
    os.makedirs(root + "/proc", exist_ok=True)
    if fresh_proc:
        _mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _pivot(root)
    _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    gpu_paths = ", the GPU toolchain and devices" if gpu else ""
    return (f"applied: own mount namespace; a root built from an empty tmpfs (read-only) showing only {shown} host "
            f"paths read-only (the Python installation, shared libraries{gpu_paths}"
            f"{', ' + ', '.join(readable) if readable else ''}), a minimal /dev"
            f"{', a fresh /proc' if fresh_proc else ''}; the private directory a {dir_mb} MiB tmpfs; "
            "the old root detached")


def _bind_all(root: str, paths: list[str], flags: int = MS_RDONLY | MS_NOSUID | MS_NODEV) -> int:
    """Bind each path's real location into `root` with `flags`, outermost first (so that no mount point is ever
    made inside a host directory already bound); a path that is a symbolic link is re-made as one beside it."""
    real = sorted({os.path.realpath(p) for p in paths if os.path.exists(p)})
    outer = [p for p in real if not any(q != p and _under(p, q) for q in real)]
    links = {p: os.readlink(p) for p in paths if os.path.islink(p) and not any(_under(p, q) for q in outer)}
    for link, target in links.items():
        os.makedirs(os.path.dirname(root + link), exist_ok=True)
        os.symlink(target, root + link)
    for path in outer:
        target = root + path
        if os.path.isdir(path):
            os.makedirs(target, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            open(target, "w").close()
        _mount(path, target, None, MS_BIND)
        _mount(None, target, None, MS_REMOUNT | MS_BIND | flags)
    return len(outer) + len(links)


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _pivot(root: str) -> None:
    """pivot_root(".", "."): the old root ends stacked on the new one and is detached at once (as runc does)."""
    os.chdir(root)
    if _libc.syscall(seccomp.ARCHES[os.uname().machine][1]["pivot_root"], b".", b".") != 0:
        raise MountError(ctypes.get_errno(), f"pivot_root: {os.strerror(ctypes.get_errno())}")
    if _libc.umount2(b".", MNT_DETACH) != 0:
        raise MountError(ctypes.get_errno(), f"detaching the old root: {os.strerror(ctypes.get_errno())}")
    os.chdir("/")
