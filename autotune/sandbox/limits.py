"""The limits of one sandboxed run, read from config once into a typed, frozen record.

    limits = Limits.from_config(cfg.verify)        # timeout_s, total_timeout_s, memory_mb, max_file_mb, max_dir_mb
    run_isolated(module, payload, limits=limits.scaled(time=2), workdir=d)

Built in one place so that a bad value (a string, zero, a negative number) is one clear UserError at the
start of a command, not a cast failing deep inside a run.
"""

from __future__ import annotations

import dataclasses

from autotune.errors import UserError


@dataclasses.dataclass(frozen=True)
class Limits:
    # wall clock; the child and everything it started are killed at it. A run that reports progress
    # (run_isolated's `progress`: the checker's worker after each case) gets timeout_s after its start and after
    # each step, and total_timeout_s in all: its time grows with its plan, a hang is still caught in timeout_s.
    timeout_s: float
    memory_mb: int  # address space on CPU (not applied with CUDA, which reserves huge virtual ranges)
    file_mb: int = 64  # the largest file the child may write
    total_timeout_s: float | None = None  # None: timeout_s
    dir_mb: int = 256  # the private directory's own filesystem, all files together (where root: a tmpfs)

    @classmethod
    def from_config(cls, node) -> Limits:
        """From a `verify` config node (or any mapping with timeout_s, memory_mb and max_file_mb; max_dir_mb and
        total_timeout_s when set)."""
        total = positive(node, "total_timeout_s", float) if node.get("total_timeout_s") is not None else None
        dir_mb = positive(node, "max_dir_mb", int) if node.get("max_dir_mb") is not None else cls.dir_mb
        return cls(timeout_s=positive(node, "timeout_s", float), memory_mb=positive(node, "memory_mb", int),
                   file_mb=positive(node, "max_file_mb", int), total_timeout_s=total, dir_mb=dir_mb)

    def scaled(self, *, time: float = 1, memory: float = 1) -> Limits:
        """These limits with the time and memory multiplied (a whole model needs more than one kernel)."""
        total = self.total_timeout_s * time if self.total_timeout_s is not None else None
        return dataclasses.replace(self, timeout_s=self.timeout_s * time, memory_mb=int(self.memory_mb * memory),
                                   total_timeout_s=total)

    @property
    def total_s(self) -> float:
        return self.total_timeout_s if self.total_timeout_s is not None else self.timeout_s


def positive(node, key: str, kind):
    """`node[key]` as a positive `kind`; a UserError naming the setting otherwise."""
    value = node.get(key) if hasattr(node, "get") else None
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise UserError(f"verify.{key} must be a positive number, not {value!r} (set it in conf/verify/)") from None
    if not number > 0:
        raise UserError(f"verify.{key} must be a positive number, not {value!r} (set it in conf/verify/)")
    return number
