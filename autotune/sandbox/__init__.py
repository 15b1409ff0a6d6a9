"""A general runner for untrusted Python code: a fresh, confined child process that leaves nothing behind.

    from autotune.sandbox import Limits, run_isolated
    result = run_isolated("my.module", payload, limits=Limits(timeout_s=120, memory_mb=8192), workdir=d)
    result.ok, result.result, result.isolation          # the handler's dict; what confinement was applied

A module run this way ends with `autotune.sandbox.child_main(handler)`. The checker (`autotune.verify`)
runs every candidate kernel through it and the model-level check (`autotune.run.model_check`) runs the whole
model with a candidate plugged in; neither the runner nor the parent ever imports what runs inside.

What it guarantees (runner.py and confine.py say how; tests/verify/test_sandbox.py shows each):
- the child gets its payload and returns its result through two pipes as weights-only tensor frames
  (channel.py): nothing it writes can run code in the parent; stdout is never read as a result;
- an allow-listed environment (no API keys or tokens), a private directory and caches, time, memory,
  file-size, process and open-file limits;
- nothing outlives the run (where root): the child runs in its own PID and IPC namespaces
  (namespaces.py), so every process it starts, in any session, is killed when it ends and every System V
  IPC object it made is removed; in any case its process group and its private uid are killed;
- where root: no network, an unprivileged private uid, not dumpable, a fresh /proc (no other process is
  visible) and a filesystem in which only the system directories, the Python installation, its private
  directory and the paths the caller names are visible (not home directories, the project checkout, /tmp);
- audit.py: the run-time defence a child arms before it imports untrusted code (an audit hook, frozen and
  sealed modules); the checker's worker uses it.
Where a step cannot be applied (not root, an old kernel), the result's `isolation` says so.

    from autotune.sandbox import Limits   # timeout, memory and file-size limits, from config once
"""

from autotune.sandbox.limits import Limits
from autotune.sandbox.runner import SandboxResult, child_env, child_main, run_isolated, trim_traceback

__all__ = ["Limits", "SandboxResult", "child_env", "child_main", "run_isolated", "trim_traceback"]
