"""New PID and IPC namespaces for a sandboxed child, so that nothing it starts or creates outlives it.

Called first thing by `runner.child_main` (before the payload is read). As root it unshares a PID and an
IPC namespace and forks twice:

    the process the parent started  (outside: waits for the init, then exits as the worker did)
      `- init, PID 1 of the new namespace  (root; reaps orphans; exits when the worker ends)
           `- the worker, PID 2  (returns from `enter()` and goes on to confine itself and run the handler)

When the init exits, for any reason, the kernel kills every process left in the namespace, in any
session or process group, at once (a chain of short-lived processes cannot outrun a /proc scan, because
there is none). The init dies with the process the parent started (PR_SET_PDEATHSIG), which the parent
kills with its process group on timeout. When the last process of the IPC namespace is gone, the kernel
removes every System V shared memory segment, semaphore set and message queue made in it. The worker
mounts a fresh /proc in its own mount namespace (confine.py), so it sees only its own namespace's
processes. How the worker ended is passed on: the outer process exits with the same status, or kills
itself with the same signal.
"""

from __future__ import annotations

import ctypes
import os
import signal

CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
PR_SET_PDEATHSIG = 1
_SIGNALLED = 128  # the init reports "killed by signal N" to the outer process as exit status 128 + N


def enter(close_fds: tuple[int, ...]) -> str:
    """Enter new PID and IPC namespaces (root only); returns, in the worker, what was applied. `close_fds`:
    the pipes to the parent, which only the worker may hold (end of stream means the worker is gone)."""
    if os.geteuid() != 0:
        return "not applied: not root (a descendant in a new session can outlive the run; System V IPC objects " \
               "it makes are not removed)"
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWPID | CLONE_NEWIPC) != 0:
        return f"not applied: unshare(CLONE_NEWPID | CLONE_NEWIPC) failed ({os.strerror(ctypes.get_errno())})"
    init = os.fork()
    if init:
        _close(close_fds)
        _exit_as(_wait_for(init))
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    worker = os.fork()
    if worker:
        _close(close_fds)
        _exit_as(_reap_until(worker), init=True)
    return "applied: own PID namespace (everything left in it is killed when the worker ends) and own IPC " \
           "namespace (its System V objects are removed with it)"


def _close(fds: tuple[int, ...]) -> None:
    for fd in fds:
        os.close(fd)


def _wait_for(pid: int) -> int:
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except InterruptedError:
            continue


def _reap_until(worker: int) -> int:
    """As PID 1: reap every orphan that is handed to us until the worker itself ends; its wait status."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:  # cannot happen while the worker lives; be safe
            return 1 << 8
        if pid == worker:
            return status


def _exit_as(status: int, init: bool = False) -> None:
    """Exit the way `status` (a wait status) says. PID 1 cannot be killed by its own signals, so the init
    reports a signal as 128 + N and the outer process turns that back into the signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
    elif os.WIFEXITED(status) and not init and os.WEXITSTATUS(status) > _SIGNALLED:
        sig = os.WEXITSTATUS(status) - _SIGNALLED
    else:
        os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)
    if init or sig not in _ENDING:  # a status above 128 the worker chose (147 would otherwise stop this process)
        os._exit(_SIGNALLED + sig)
    if sig != signal.SIGKILL:
        signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
    os._exit(_SIGNALLED + sig)


# The signals whose default action ends a process: the only ones the outer process repeats on itself.
_ENDING = frozenset({signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGILL, signal.SIGTRAP, signal.SIGABRT,
                     signal.SIGBUS, signal.SIGFPE, signal.SIGKILL, signal.SIGUSR1, signal.SIGSEGV, signal.SIGUSR2,
                     signal.SIGPIPE, signal.SIGALRM, signal.SIGTERM, signal.SIGXCPU, signal.SIGXFSZ, signal.SIGSYS})
