"""The checker's sandboxed worker: the candidate's host process and the device process, in one sandbox.

Started by the judge through `sandbox.run_isolated("autotune.verify.worker", payload, host=host_payload, ...)`.
It imports what both sides need, then (`sandbox.runner.child_main`) forks the host before the case data
reaches it, and runs the device with the data:

    judge ──payload (cases, data)──► device (autotune.verify.device.process) ──frames──► judge
                                       ▲  runs the kernels, makes the evidence
    host (autotune.verify.host.process) ───────┘  imports the candidate, runs its launcher on data-less tensors

The host is the only process that runs the candidate's Python; it never holds a case's values, a reference or
the judge's pipe. The device never runs the candidate's Python; it builds the kernels from the source's syntax
tree and runs them under the interpreter (on a GPU, compiled). See each module's docstring.
"""

from __future__ import annotations

import triton

# What Triton imports lazily on a kernel's first launch (measured: 0.5 s), imported before any audit hook is
# armed: the gluon import runs typing.TypeVar, which reads its caller's frame, which the hook denies.
import triton.compiler.code_generator
import triton.experimental.gluon._runtime
import triton.language.extra.libdevice

from autotune.sandbox.runner import child_main
from autotune.verify import protocol
from autotune.verify.device import process as device
from autotune.verify.heap import reuse_freed_memory
from autotune.verify.host import process as host
from autotune.verify.interp.install import install

reuse_freed_memory()  # in the zygote, before its children fork

if triton.knobs.runtime.interpret:  # the device's interpreter, made to behave as a GPU where it differs
    install()

if __name__ == "__main__":
    child_main(device.work, host=host.work, host_frames=protocol.encode)
