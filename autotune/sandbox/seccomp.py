"""A seccomp filter for a sandboxed child: the kernel refuses what no Python-level defence can stop.

    from autotune.sandbox import seccomp
    report = seccomp.apply("cpu")     # after PR_SET_NO_NEW_PRIVS; "applied: ..." or "not applied: why"
    seccomp.apply("gpu")              # the same, but processes allowed (Triton compiles at the first launch)

A classic BPF program, built here from `struct sock_filter`s and loaded with seccomp(2)
(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC: every thread of the process at once, and everything it
starts later, for good). No dependency: libseccomp's Python binding is not on PyPI.

What it refuses, with EPERM (not a kill: the candidate sees an OSError and the verdict can say what was refused):
- processes ("cpu" profile only): fork, vfork, execve, execveat, and clone unless it makes a thread
  (CLONE_THREAD set); in both profiles clone with a namespace flag (CLONE_NEWUSER ...), and clone3 gets ENOSYS,
  as in Docker's default profile: its flags sit behind a pointer a filter cannot read, and glibc then falls
  back to clone (threads still work: torch and numpy start them);
- signals to other processes ("cpu"): kill, tgkill, rt_sigqueueinfo, rt_tgsigqueueinfo only at its own pid
  (what raise() and pthread_kill do), tkill not at all;
- sockets: socket, socketpair, connect, bind, listen, accept, accept4 ("gpu": AF_UNIX sockets, socketpair
  and connect stay allowed, for the CUDA driver);
- mounts and namespaces: mount, umount2, pivot_root, chroot, unshare, setns, the new mount API (fsopen,
  fsconfig, fsmount, fspick, open_tree, move_mount, mount_setattr);
- other processes' memory and files: ptrace, process_vm_readv/writev, process_madvise, kcmp, pidfd_getfd,
  pidfd_open, pidfd_send_signal;
- the kernel: kexec_load, kexec_file_load, bpf, perf_event_open, keyctl, add_key, request_key, userfaultfd,
  io_uring_setup/enter/register, init/finit/delete_module, acct, swapon/off, reboot, quotactl(_fd), the clock
  and host-name setters, syslog, open_by_handle_at, name_to_handle_at, mknod(at), iopl, ioperm, vhangup,
  lookup_dcookie, nfsservctl, uselib, ustat, sysfs, _sysctl, fanotify_init, move_pages, migrate_pages, mbind,
  set_mempolicy, and the removed module calls; setuid and the other credential setters, capset;
- personality, but for the values Docker's default profile allows (0, 8, 0x20000, 0x20008, 0xffffffff: no
  ADDR_NO_RANDOMIZE, no READ_IMPLIES_EXEC); prctl(PR_SET_DUMPABLE) and prctl(PR_SET_PTRACER) (the child was
  made not dumpable; it cannot undo that).
The list follows Docker's default profile (moby/profiles seccomp/default.json: the calls it allows only with
CAP_SYS_ADMIN, CAP_SYS_PTRACE, CAP_SYS_MODULE, CAP_SYS_BOOT, CAP_SYS_TIME, CAP_SYS_NICE, and its clone3 rule)
and Chromium's renderer policy (sandbox/policy/linux/bpf_renderer_policy_linux.cc via baseline_policy.cc:
no process creation but threads, no sockets, no namespaces, ptrace, bpf, perf, io_uring, userfaultfd, kexec).
A syscall of another architecture (a 32-bit int 0x80 on x86_64) and any x32-ABI call kill the process: their
numbers mean other calls, which the table below does not cover.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct

# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6]
_NR, _ARCH, _ARGS = 0, 4, 16
_LD_W_ABS, _JEQ, _JSET, _JGE, _RET = 0x20, 0x15, 0x45, 0x35, 0x06  # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|..|BPF_K, BPF_RET
RET_KILL_PROCESS, RET_ALLOW, RET_ERRNO = 0x80000000, 0x7FFF0000, 0x00050000
X32_SYSCALL_BIT = 0x40000000
SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC = 1, 1
CLONE_THREAD = 0x00010000
CLONE_NAMESPACES = 0x00000080 | 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 \
    | 0x40000000  # NEWTIME NEWNS NEWCGROUP NEWUTS NEWIPC NEWUSER NEWPID NEWNET
AF_UNIX, PR_SET_DUMPABLE, PR_SET_PTRACER = 1, 4, 0x59616D61
PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)  # Docker's: PER_LINUX, UNAME26 variants, the query

# (AUDIT_ARCH_*, {name: number}) per machine; from the kernel's uapi headers (asm/unistd_64.h for x86_64,
# asm-generic/unistd.h for aarch64); tests/verify/test_seccomp.py checks them against the headers where present.
ARCHES = {
    "x86_64": (0xC000003E, {
        "fork": 57, "vfork": 58, "clone": 56, "clone3": 435, "execve": 59, "execveat": 322, "socket": 41,
        "socketpair": 53, "connect": 42, "bind": 49, "listen": 50, "accept": 43, "accept4": 288, "mount": 165,
        "umount2": 166, "pivot_root": 155, "unshare": 272, "setns": 308, "chroot": 161, "fsopen": 430,
        "fsconfig": 431, "fsmount": 432, "fspick": 433, "open_tree": 428, "move_mount": 429, "mount_setattr": 442,
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "process_madvise": 440, "kcmp": 312,
        "pidfd_getfd": 438, "pidfd_open": 434, "pidfd_send_signal": 424, "kexec_load": 246,
        "kexec_file_load": 320, "bpf": 321, "perf_event_open": 298, "keyctl": 250, "add_key": 248,
        "request_key": 249, "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "personality": 135, "init_module": 175, "finit_module": 313,
        "delete_module": 176, "acct": 163, "swapon": 167, "swapoff": 168, "reboot": 169, "quotactl": 179,
        "quotactl_fd": 443, "settimeofday": 164, "clock_settime": 227, "clock_adjtime": 305, "adjtimex": 159,
        "syslog": 103, "sethostname": 170, "setdomainname": 171, "open_by_handle_at": 304,
        "name_to_handle_at": 303, "mknod": 133, "mknodat": 259, "iopl": 172, "ioperm": 173, "vhangup": 153,
        "lookup_dcookie": 212, "nfsservctl": 180, "uselib": 134, "ustat": 136, "sysfs": 139, "_sysctl": 156,
        "create_module": 174, "get_kernel_syms": 177, "query_module": 178, "move_pages": 279,
        "migrate_pages": 256, "mbind": 237, "set_mempolicy": 238, "fanotify_init": 300, "setuid": 105,
        "setgid": 106, "setreuid": 113, "setregid": 114, "setresuid": 117, "setresgid": 119, "setgroups": 116,
        "setfsuid": 122, "setfsgid": 123, "capset": 126, "kill": 62, "tkill": 200, "tgkill": 234, "prctl": 157,
        "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297, "seccomp": 317}),
    "aarch64": (0xC00000B7, {
        "clone": 220, "clone3": 435, "execve": 221, "execveat": 281, "socket": 198, "socketpair": 199,
        "connect": 203, "bind": 200, "listen": 201, "accept": 202, "accept4": 242, "mount": 40, "umount2": 39,
        "pivot_root": 41, "unshare": 97, "setns": 268, "chroot": 51, "fsopen": 430, "fsconfig": 431,
        "fsmount": 432, "fspick": 433, "open_tree": 428, "move_mount": 429, "mount_setattr": 442, "ptrace": 117,
        "process_vm_readv": 270, "process_vm_writev": 271, "process_madvise": 440, "kcmp": 272,
        "pidfd_getfd": 438, "pidfd_open": 434, "pidfd_send_signal": 424, "kexec_load": 104,
        "kexec_file_load": 294, "bpf": 280, "perf_event_open": 241, "keyctl": 219, "add_key": 217,
        "request_key": 218, "userfaultfd": 282, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "personality": 92, "init_module": 105, "finit_module": 273,
        "delete_module": 106, "acct": 89, "swapon": 224, "swapoff": 225, "reboot": 142, "quotactl": 60,
        "quotactl_fd": 443, "settimeofday": 170, "clock_settime": 112, "clock_adjtime": 266, "adjtimex": 171,
        "syslog": 116, "sethostname": 161, "setdomainname": 162, "open_by_handle_at": 265,
        "name_to_handle_at": 264, "mknodat": 33, "vhangup": 58, "lookup_dcookie": 18, "nfsservctl": 42,
        "move_pages": 239, "migrate_pages": 238, "mbind": 235, "set_mempolicy": 237, "fanotify_init": 262,
        "setuid": 146, "setgid": 144, "setreuid": 145, "setregid": 143, "setresuid": 147, "setresgid": 149,
        "setgroups": 159, "setfsuid": 151, "setfsgid": 152, "capset": 91, "kill": 129, "tkill": 130,
        "tgkill": 131, "prctl": 167, "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240, "seccomp": 277}),
}

_ALWAYS = (
    "bind listen accept accept4 mount umount2 pivot_root chroot unshare setns fsopen fsconfig fsmount fspick "
    "open_tree move_mount mount_setattr ptrace process_vm_readv process_vm_writev process_madvise kcmp pidfd_getfd "
    "kexec_load kexec_file_load bpf perf_event_open keyctl add_key request_key userfaultfd io_uring_setup "
    "io_uring_enter io_uring_register init_module finit_module delete_module acct swapon swapoff reboot quotactl "
    "quotactl_fd settimeofday clock_settime clock_adjtime adjtimex syslog sethostname setdomainname "
    "open_by_handle_at name_to_handle_at mknod mknodat iopl ioperm vhangup lookup_dcookie nfsservctl uselib ustat "
    "sysfs _sysctl create_module get_kernel_syms query_module move_pages migrate_pages mbind set_mempolicy "
    "fanotify_init setuid setgid setreuid setregid setresuid setresgid setgroups setfsuid setfsgid capset").split()
# The checker's CPU child runs no program at all. A GPU child's first launch runs ptxas and a C compiler
# (Triton's compile) and the CUDA driver may talk to its daemons over AF_UNIX sockets, so those stay.
_NO_PROCESSES = "fork vfork execve execveat tkill pidfd_open pidfd_send_signal socketpair connect".split()
PROFILES = ("cpu", "gpu")


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def _ret(value: int) -> bytes:
    return _insn(_RET, value)


EPERM = _ret(RET_ERRNO | 1)


def _arg_low(i: int) -> bytes:
    return _insn(_LD_W_ABS, _ARGS + 8 * i)  # little-endian: the low 32 bits of args[i]


def _when(nr: int, body: list[bytes]) -> list[bytes]:
    """`if nr == <nr>: body`; every path of `body` returns, so the syscall number stays loaded for the next test."""
    return [_insn(_JEQ, nr, 0, len(body)), *body]


def _arg_in(i: int, allowed: tuple[int, ...]) -> list[bytes]:
    """ALLOW when the low 32 bits of args[i] are one of `allowed` (and the high ones zero), else EPERM."""
    tests = [_insn(_JEQ, v, len(allowed) - n, 0) for n, v in enumerate(allowed)]
    return [_insn(_LD_W_ABS, _ARGS + 8 * i + 4), _insn(_JEQ, 0, 0, len(tests) + 1), _arg_low(i), *tests,
            EPERM, _ret(RET_ALLOW)]


def _clone(threads_only: bool) -> list[bytes]:
    """clone(flags, ...): EPERM with a namespace flag; else ALLOW a thread (CLONE_THREAD) and, unless
    `threads_only`, a process too."""
    if not threads_only:
        return [_arg_low(0), _insn(_JSET, CLONE_NAMESPACES, 0, 1), EPERM, _ret(RET_ALLOW)]
    return [_arg_low(0), _insn(_JSET, CLONE_NAMESPACES, 1, 0), _insn(_JSET, CLONE_THREAD, 1, 0), EPERM,
            _ret(RET_ALLOW)]


def program(profile: str, machine: str | None = None, pid: int | None = None) -> bytes:
    """The filter for this machine's architecture, as the bytes of a sock_filter array."""
    if profile not in PROFILES:
        raise ValueError(f"unknown seccomp profile {profile!r} (one of {', '.join(PROFILES)})")
    arch, numbers = ARCHES[machine or platform.machine()]
    pid = os.getpid() if pid is None else pid
    out = [_insn(_LD_W_ABS, _ARCH), _insn(_JEQ, arch, 1, 0), _ret(RET_KILL_PROCESS), _insn(_LD_W_ABS, _NR)]
    if machine == "x86_64" or (machine is None and platform.machine() == "x86_64"):
        out += [_insn(_JGE, X32_SYSCALL_BIT, 0, 1), _ret(RET_KILL_PROCESS)]
    refused = _ALWAYS + (_NO_PROCESSES if profile == "cpu" else [])
    for name in refused:
        if name in numbers:
            out += [_insn(_JEQ, numbers[name], 0, 1), EPERM]
    out += _when(numbers["personality"], _arg_in(0, PERSONALITIES))
    out += _when(numbers["prctl"], [_arg_low(0), _insn(_JEQ, PR_SET_DUMPABLE, 1, 0),
                                    _insn(_JEQ, PR_SET_PTRACER, 0, 1), EPERM, _ret(RET_ALLOW)])
    out += _when(numbers["socket"], _arg_in(0, (AF_UNIX,)) if profile == "gpu" else [EPERM])
    out += _when(numbers["clone"], _clone(threads_only=profile == "cpu"))
    out += _when(numbers["clone3"], [_ret(RET_ERRNO | 38)])  # ENOSYS: glibc falls back to clone
    if profile == "cpu":
        for name in ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):  # only at itself
            out += _when(numbers[name], _arg_in(0, (pid,)))
    return b"".join(out + [_ret(RET_ALLOW)])


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def apply(profile: str) -> str:
    """Load the filter on every thread of this process (needs no_new_privs or CAP_SYS_ADMIN); the report line."""
    machine = platform.machine()
    if machine not in ARCHES:
        return f"not applied: no syscall table for {machine} (x86_64 and aarch64 only)"
    code = program(profile, machine)
    buf = ctypes.create_string_buffer(code, len(code))
    prog = _Prog(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    nr = ARCHES[machine][1]["seccomp"]
    if libc.syscall(ctypes.c_long(nr), SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, ctypes.byref(prog)) != 0:
        return f"not applied: seccomp(SECCOMP_SET_MODE_FILTER) failed ({os.strerror(ctypes.get_errno())})"
    what = ("processes, other processes' signals, sockets" if profile == "cpu" else
            "sockets but AF_UNIX (processes allowed: Triton compiles with ptxas and a C compiler at the first launch)")
    return (f"applied: profile {profile} ({len(code) // 8} BPF instructions): EPERM for {what}, mounts, namespaces, "
            "ptrace, bpf, perf, io_uring, userfaultfd, keys, kexec, modules, credential changes; foreign "
            "architectures killed")
