"""A general runner for untrusted Python code: a confined child process that leaves nothing behind.

    from autotune.sandbox import Limits, run_isolated
    result = run_isolated("my.module", payload, limits=Limits(timeout_s=120, memory_mb=8192), workdir=d)
    result.ok, result.result, result.isolation          # the handler's dict; what confinement was applied

A module run this way ends with `autotune.sandbox.child_main(handler)`. The checker (`autotune.verify`)
runs every candidate kernel through it and the model-level check (`autotune.run.model_check`) runs the whole
model with a candidate plugged in; neither the runner nor the parent ever imports what runs inside.

What it guarantees (runner.py and confine.py say how; tests/verify/test_sandbox.py shows each):
- the child gets its payload and returns its result through two pipes as weights-only tensor frames
  (channel.py): nothing it writes can run code in the parent, and every frame is checked before the
  parent's code touches it (archive, pickle, bounds, typed schemas: schema.py); a malformed or oversized
  frame is a protocol error, and the frames kept per run are capped; stdout is never read as a result;
- an allow-listed environment (no API keys or tokens), a private directory and caches, time, memory,
  file-size, process and open-file limits;
- nothing outlives the run (where root): the child runs in its own PID and IPC namespaces
  (namespaces.py), so every process it starts, in any session, is killed when it ends and every System V
  IPC object it made is removed; in any case its process group and its private uid are killed;
- a seccomp filter (seccomp.py; with or without root): the kernel refuses processes (on CPU), sockets,
  mounts, namespaces, ptrace, bpf, perf, io_uring and the rest with EPERM; threads still work;
- where root: no network, an unprivileged private uid, not dumpable, a fresh /proc (no other process is
  visible) and a root built from an empty tmpfs (rootfs.py) with only the Python installation, the shared
  libraries, a minimal /dev, the paths the caller names and the private directory, a tmpfs capped at
  `Limits.dir_mb` (not home directories, the project checkout, /etc, /tmp, files under /);
- audit.py: the run-time defence a child arms before it imports untrusted code (an audit hook, frozen and
  sealed modules); the checker's worker uses it.
Where a step cannot be applied (not root, an old kernel), the result's `isolation` says so.

    from autotune.sandbox import Limits   # timeout, memory, file-size and directory-size limits, from config once
"""

from autotune.sandbox.limits import Limits
from autotune.sandbox.runner import (
    SandboxResult,
    Stopped,
    child_env,
    child_main,
    prewarm,
    run_isolated,
    stop_all,
    trim_traceback,
)

__all__ = ["Limits", "SandboxResult", "Stopped", "child_env", "child_main", "prewarm", "run_isolated",
           "stop_all", "trim_traceback"]
