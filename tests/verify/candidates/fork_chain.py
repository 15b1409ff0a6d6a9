"""Cheat: leaves a chain of short-lived processes behind, each starting the next in a new session (so
neither the process group kill nor a scan of the uid's processes catches them all), then answers."""

import os
import subprocess
import sys

import torch
import triton
import triton.language as tl

MARKER = "autotune-fork-chain-marker"  # the test replaces it with a unique string and looks for it after
_CHAIN = ("import subprocess, sys, time; time.sleep(0.2); "
          "subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[1], sys.argv[2]], start_new_session=True)")


@triton.jit
def _noop_kernel(y_ptr):
    pass


def _start_chain():
    try:
        subprocess.Popen([sys.executable, "-c", _CHAIN, _CHAIN, MARKER], start_new_session=True)
    except OSError:
        pid = os.fork()  # the other way to a process
        if pid == 0:
            os.setsid()
            os.execv(sys.executable, [sys.executable, "-c", _CHAIN, _CHAIN, MARKER])


_start_chain()


def rms_norm(x, weight, eps):
    y = torch.empty_like(x)
    _noop_kernel[(1,)](y)
    return y
