"""Which launch the interpreter is running, and a hook before each: what the other patches of the interpreter
key on (`current_launch`), and its grid's programs visited in a random order (`permute_programs`).

A GPU runs a grid's programs in no promised order; the interpreter runs them in order, so a kernel in which
program i reads what program i - 1 wrote passes on the CPU and races on a GPU. Here each launch visits its
programs in an order drawn afresh (OS entropy), so such a kernel reads unwritten (NaN-filled) memory.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import secrets
from collections.abc import Callable

import numpy as np
from triton.runtime import interpreter

_rng = np.random.default_rng(secrets.randbits(128))


def _reseed() -> None:
    global _rng
    _rng = np.random.default_rng(secrets.randbits(128))


os.register_at_fork(after_in_child=_reseed)  # a forked worker (the sandbox's zygote, the host) draws its own


def permute_programs() -> None:
    """From now on, each interpreted launch runs its programs in a freshly drawn random order."""
    builder = interpreter.InterpreterBuilder
    if getattr(builder, "_autotune_permuted", False):
        return
    set_dim, set_idx = builder.set_grid_dim, builder.set_grid_idx

    def set_grid_dim(self, nx, ny, nz):
        set_dim(self, nx, ny, nz)
        self._autotune_order = _rng.permutation(nx * ny * nz)

    def set_grid_idx(self, x, y, z):
        _, ny, nz = self.grid_dim
        if not (x < self.grid_dim[0] and y < ny and z < nz):
            return set_idx(self, x, y, z)  # out of range: let the interpreter raise its own error
        k = int(self._autotune_order[(x * ny + y) * nz + z])
        return set_idx(self, k // (ny * nz), (k // nz) % ny, k % nz)

    builder.set_grid_dim, builder.set_grid_idx = set_grid_dim, set_grid_idx
    builder._autotune_permuted = True


_launch_hooks: list[Callable[[str, tuple, dict], None]] = []


@dataclasses.dataclass(frozen=True)
class Launch:
    """One interpreted launch: the kernel, its arguments by parameter name, and the launch options it was given
    (num_warps, enable_fp_fusion ...)."""

    fn: interpreter.InterpretedFunction
    args: dict
    options: dict = dataclasses.field(default_factory=dict)

    @property
    def kernel(self) -> str:
        return self.fn.fn.__name__


_launches: list[Launch] = []  # the launch being interpreted (a stack: a launch hook may launch, in tests)


def current_launch() -> Launch | None:
    return _launches[-1] if _launches else None


def install_launch_hooks() -> None:
    """Wrap the interpreter's `run` once, before the worker installs its launch counter over it:
    a hook registered later joins this list instead of replacing `run` (which the counter's tamper check
    would rightly read as its removal)."""
    if getattr(interpreter.InterpretedFunction, "_autotune_hooks", False):
        return
    run = interpreter.InterpretedFunction.run

    @functools.wraps(run)
    def run_checked(self, *args, grid, warmup, **kwargs):
        if warmup:
            return run(self, *args, grid=grid, warmup=warmup, **kwargs)
        for hook in _launch_hooks:
            hook(self.fn.__name__, args, kwargs)
        named = {**dict(zip(self.arg_names, args)), **{k: v for k, v in kwargs.items() if k in self.arg_names}}
        _launches.append(Launch(self, named, {k: v for k, v in kwargs.items() if k not in self.arg_names}))
        try:
            return run(self, *args, grid=grid, warmup=warmup, **kwargs)
        finally:
            _launches.pop()

    interpreter.InterpretedFunction.run = run_checked
    interpreter.InterpretedFunction._autotune_hooks = True


def before_each_launch(hook: Callable[[str, tuple, dict], None]) -> None:
    """Call hook(kernel name, args, kwargs) before the interpreter runs any launch (autotuned ones included:
    the Autotuner and Heuristics wrappers call the interpreted function's `run` with the final kwargs)."""
    _launch_hooks.append(hook)


def caused_by(e: BaseException | None, kind: type) -> bool:
    """Whether `kind` is `e` or among its causes (the interpreter wraps what a launch raised)."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, kind):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False
