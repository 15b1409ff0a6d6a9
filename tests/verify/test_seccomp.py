"""The seccomp filter (autotune/sandbox/seccomp.py): the kernel refuses what a candidate that got past the static
scan and the audit hook would try next.

One probe child shows the filter as the sandbox applies it, with no audit hook armed and no scan (the layers in
front of it removed); the rest load the filter into a forked copy of the test process (milliseconds each) to
check each rule of each profile.
"""

import ctypes
import errno
import os
import re
import signal
import socket
import struct
from pathlib import Path

import pytest

from autotune.sandbox import seccomp
from autotune.sandbox.probe import SYSCALLS
from tests.verify.test_sandbox import run_probe


def test_a_probe_with_no_python_defence_gets_eperm_for_every_process_socket_and_namespace(tmp_path):
    r = run_probe(tmp_path, {"syscalls": list(SYSCALLS)})
    assert r.ok, r
    assert r.isolation["seccomp"].startswith("applied: profile cpu"), r.isolation["seccomp"]
    calls = r.result["syscalls"]
    assert calls.pop("threading.Thread") == "allowed"  # torch and numpy start threads
    assert calls == {name: "refused: EPERM" for name in calls}, calls


def _in_filtered_child(profile: str | None, attempt, before=None) -> tuple[int, bytes]:
    """Fork, run `before()`, load `profile` (None: none), run `attempt()` there; (wait status, what it wrote)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(r)
            if before is not None:
                before()
            ctypes.CDLL(None).prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
            report = seccomp.apply(profile) if profile else "applied: nothing"
            os.write(w, (report.split(":")[0] + "|" + str(attempt())).encode())
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 4096):
        data += chunk
    os.close(r)
    return os.waitpid(pid, 0)[1], data


def _errno_of(fn):
    def run():
        try:
            fn()
            return "allowed"
        except OSError as e:
            return errno.errorcode.get(e.errno, str(e.errno))
    return run


def _libc_errno(name, *args):
    def run():
        libc = ctypes.CDLL(None, use_errno=True)
        fn = getattr(libc, name)
        result = fn(*args)
        if name == "fork" and result == 0:
            os._exit(0)
        return "allowed" if result >= 0 else errno.errorcode[ctypes.get_errno()]
    return run


RULES = [
    # (profile, what, attempt, expected)
    ("cpu", "fork", _libc_errno("fork"), "EPERM"),
    ("gpu", "fork", _libc_errno("fork"), "allowed"),  # Triton's compile runs ptxas and a C compiler
    ("cpu", "a signal to another process", _errno_of(lambda: os.kill(os.getppid(), 0)), "EPERM"),
    ("cpu", "a signal to itself", _errno_of(lambda: os.kill(os.getpid(), 0)), "allowed"),
    ("cpu", "AF_UNIX socket", _errno_of(lambda: socket.socket(socket.AF_UNIX).close()), "EPERM"),
    ("gpu", "AF_UNIX socket", _errno_of(lambda: socket.socket(socket.AF_UNIX).close()), "allowed"),
    ("gpu", "AF_INET socket", _errno_of(lambda: socket.socket().close()), "EPERM"),
    ("gpu", "unshare(CLONE_NEWUSER)", _libc_errno("unshare", 0x10000000), "EPERM"),
    ("gpu", "ptrace(PTRACE_TRACEME)", _libc_errno("ptrace", 0, 0, 0, 0), "EPERM"),
    ("gpu", "personality(ADDR_NO_RANDOMIZE)", _libc_errno("personality", ctypes.c_ulong(0x0040000)), "EPERM"),
    ("gpu", "personality query", _libc_errno("personality", ctypes.c_ulong(0xFFFFFFFF)), "allowed"),
    ("gpu", "prctl(PR_SET_DUMPABLE)", _libc_errno("prctl", 4, 1, 0, 0, 0), "EPERM"),
    ("gpu", "prctl(PR_GET_DUMPABLE)", _libc_errno("prctl", 3, 0, 0, 0, 0), "allowed"),
    ("cpu", "clone3", _libc_errno("syscall", 435, 0, 0), "ENOSYS"),  # glibc then falls back to clone
    ("gpu", "clone(CLONE_NEWUSER)", _libc_errno("syscall", 56 if os.uname().machine == "x86_64" else 220,
                                                0x10000000 | 17, 0, 0, 0, 0), "EPERM"),  # | SIGCHLD
]


@pytest.mark.parametrize("profile, what, attempt, expected", RULES, ids=[f"{r[0]}-{r[1]}" for r in RULES])
def test_each_rule_of_each_profile(profile, what, attempt, expected):
    status, data = _in_filtered_child(profile, attempt)
    assert os.WIFEXITED(status), status
    applied, got = data.decode().split("|")
    assert applied == "applied" and got == expected, (what, data)


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the x32 ABI exists on x86_64 only")
def test_an_x32_syscall_kills_the_process():
    status, _ = _in_filtered_child("gpu", _libc_errno("syscall", seccomp.X32_SYSCALL_BIT | 39))  # x32 getpid
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGSYS, status


def test_the_programs_are_well_formed():
    for machine in seccomp.ARCHES:
        for profile in seccomp.PROFILES:
            code = seccomp.program(profile, machine, pid=2)
            assert len(code) % 8 == 0 and len(code) // 8 < 4096  # BPF_MAXINSNS
            for i in range(0, len(code), 8):  # every jump lands inside the program
                op, jt, jf, _ = struct.unpack("=HBBI", code[i:i + 8])
                if op & 0x07 == 0x05:  # BPF_JMP
                    assert i // 8 + 1 + max(jt, jf) < len(code) // 8
            assert code[-8:] == struct.pack("=HBBI", 0x06, 0, 0, seccomp.RET_ALLOW)
    with pytest.raises(ValueError, match="unknown seccomp profile"):
        seccomp.program("none")


HEADERS = {"x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
           "aarch64": Path("/usr/include/asm-generic/unistd.h")}


@pytest.mark.parametrize("machine", list(HEADERS))
def test_the_syscall_numbers_match_the_kernels_headers(machine):
    if not HEADERS[machine].exists():
        pytest.skip(f"no {HEADERS[machine]} here (linux-libc-dev)")
    defined = {m[1]: int(m[2]) for m in re.finditer(r"#define __NR(?:3264)?_(\w+)\s+(\d+)", HEADERS[machine].read_text())}
    table = seccomp.ARCHES[machine][1]
    assert {name: defined.get(name) for name in table} == table


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user")
def test_without_root_the_filter_still_applies_and_the_report_says_what_did_not(tmp_path):
    from autotune.sandbox.confine import confine

    workdir = tmp_path / "work"
    workdir.mkdir()
    os.chmod(tmp_path, 0o777)
    os.chown(workdir, 65534, 65534)

    def drop():
        os.setresgid(65534, 65534, 65534)
        os.setresuid(65534, 65534, 65534)

    def unprivileged():
        report = confine(str(workdir), uid=None, memory_mb=4096, file_mb=64, gpu=False)
        fork = _libc_errno("fork")()
        return "\n".join([report["seccomp"].split(":")[0], report["filesystem"], report["network"], fork])

    status, data = _in_filtered_child(None, unprivileged, before=drop)
    assert os.WIFEXITED(status), status
    seccomp_applied, filesystem, network, fork = data.decode().split("|", 1)[1].split("\n")
    assert seccomp_applied == "applied" and fork == "EPERM"
    assert filesystem.startswith("not applied: not root") and network.startswith("not applied: not root")
