"""Cheat: creates a world-writable System V shared memory segment (through ctypes) that would outlive the
run and carry data between candidates, then answers."""

import ctypes

import torch
import triton
import triton.language as tl

KEY = 0x5A5A0001  # the test replaces it with a unique key and looks for it in /proc/sysvipc/shm after
IPC_CREAT = 0o1000

_libc = ctypes.CDLL(None, use_errno=True)
_shmid = _libc.shmget(KEY, 4096, IPC_CREAT | 0o666)
if _shmid < 0:
    raise OSError(ctypes.get_errno(), "shmget failed")


@triton.jit
def _noop_kernel(y_ptr):
    pass


def rms_norm(x, weight, eps):
    y = torch.empty_like(x)
    _noop_kernel[(1,)](y)
    return y
