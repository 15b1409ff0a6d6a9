"""The limits of one sandboxed run, read from config once into a typed, frozen record.

    limits = Limits.from_config(cfg.verify)        # timeout_s, memory_mb, max_file_mb of the `verify` node
    run_isolated(module, payload, limits=limits.scaled(time=2), workdir=d)

Built in one place so that a bad value (a string, zero, a negative number) is one clear UserError at the
start of a command, not a cast failing deep inside a run.
"""

from __future__ import annotations

import dataclasses

from autotune.errors import UserError


@dataclasses.dataclass(frozen=True)
class Limits:
    timeout_s: float  # wall clock; the child and everything it started are killed at it
    memory_mb: int  # address space on CPU (not applied with CUDA, which reserves huge virtual ranges)
    file_mb: int = 64  # the largest file the child may write

    @classmethod
    def from_config(cls, node) -> "Limits":
        """From a `verify` config node (or any mapping with timeout_s, memory_mb and max_file_mb)."""
        return cls(timeout_s=_positive(node, "timeout_s", float), memory_mb=_positive(node, "memory_mb", int),
                   file_mb=_positive(node, "max_file_mb", int))

    def scaled(self, *, time: float = 1, memory: float = 1) -> "Limits":
        """These limits with the time and memory multiplied (a whole model needs more than one kernel)."""
        return dataclasses.replace(self, timeout_s=self.timeout_s * time, memory_mb=int(self.memory_mb * memory))


def _positive(node, key: str, kind):
    value = node.get(key) if hasattr(node, "get") else None
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise UserError(f"verify.{key} must be a positive number, not {value!r} (set it in conf/verify/)") from None
    if not number > 0:
        raise UserError(f"verify.{key} must be a positive number, not {value!r} (set it in conf/verify/)")
    return number
