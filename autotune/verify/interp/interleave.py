"""A launch's programs interleaved at their atomics, as a GPU's concurrent programs may be.

The interpreter runs one program to its end before it starts the next, so a kernel whose programs cooperate through
atomics meets only the schedules in which no program is overtaken: an update split into an atomic read and a later
atomic exchange never loses another program's update, and the program that draws the last ticket of an atomic
counter is always the last to add its share. On a GPU both are wrong. Here each program runs as a coroutine
(a greenlet) that stops before each atomic: the launch's loop starts its programs (in its drawn order) until each
reaches its first atomic or ends, and then, in rounds, a drawn half of the stopped programs performs its atomic and
runs to its next one, in an order drawn afresh (the others wait: a program may be held back any number of
rounds). A program that takes no atomic runs whole on its start, exactly as before; at most GROUP programs are
stopped at once (the next ones start once those have ended), so a grid of thousands holds a bounded number of
programs' tiles.

What a program's interpreter state is (its grid index, its race-detector ordinal and stretch, its sample taint)
is saved when it stops and put back when it resumes (`_context`, `_enter`). Two patches: `install_executor` runs every
launch's loop this way (before the others wrap it), `install_switches` makes each atomic a switch (after the others
wrap the atomics, so that they see the atomic when the program resumes, in its own state).
"""

from __future__ import annotations

import inspect
import secrets

import numpy as np
import triton
from greenlet import greenlet
from triton.runtime import interpreter

from autotune.verify.interp import races, sampling

GROUP = 256  # programs stopped at an atomic at once, at most


class _Program(greenlet):
    """A program of an interpreted launch: an atomic in it stops it (`_switch`); anywhere else an atomic runs.
    `context`: its interpreter state when it last stopped."""

    context: tuple = ()


class _Schedule:
    """The programs of one launch started so far and not yet ended."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.stopped: list[_Program] = []

    def run(self, fn, args: dict, grid: tuple) -> None:
        """The launch's loop: each program started in turn (the builder's set_grid_idx picks which, and ends the
        loop once a sample has run), then the rounds until every started program has ended."""
        builder = interpreter.interpreter_builder
        for x in range(grid[0]):
            for y in range(grid[1]):
                for z in range(grid[2]):
                    try:
                        builder.set_grid_idx(x, y, z)
                    except Exception:  # the sample has run (or the index is refused): the started programs end first
                        self.drain()
                        raise
                    self.resume(_Program(lambda: fn(**args)))
                    if len(self.stopped) >= GROUP:
                        self.drain()
        self.drain()

    def resume(self, program: _Program) -> None:
        """Run the program until it stops before an atomic (it joins `stopped`) or ends."""
        if program.context:
            _enter(program.context)
        program.switch()
        if not program.dead:
            program.context = _context()
            self.stopped.append(program)

    def drain(self) -> None:
        """Rounds until every started program has ended: in each, a drawn half of the stopped programs (one at
        least), in a drawn order, performs its atomic and runs to its next; the others wait. In lock-step rounds a
        program that took one more atomic before a plain load always came after every other program's previous
        atomic (an attacker's ticket drawn before its share, with a no-op atomic before the read); a GPU may hold a
        program back for any number of the others' steps."""
        while self.stopped:
            go = self.rng.random(len(self.stopped)) < 0.5
            go[self.rng.integers(len(self.stopped))] = True
            batch = [p for p, g in zip(self.stopped, go) if g]
            self.stopped = [p for p, g in zip(self.stopped, go) if not g]
            for i in self.rng.permutation(len(batch)):
                self.resume(batch[i])


def _context() -> tuple:
    return interpreter.interpreter_builder.grid_idx, races.program_context(), sampling.program_context()


def _enter(context: tuple) -> None:
    interpreter.interpreter_builder.grid_idx = context[0]
    races.enter_program_context(context[1])
    sampling.enter_program_context(context[2])


def install_executor() -> None:
    """Every interpreted launch runs its programs as coroutines (Triton's GridExecutor.__call__, its loop aside)."""
    executor = interpreter.GridExecutor
    if getattr(executor, "_autotune_interleaved", False):
        return

    def call(self, *args_dev, **kwargs):
        argspec = inspect.getfullargspec(self.fn)
        kwargs = {k: v for k, v in kwargs.items() if k in argspec.args or k in argspec.kwonlyargs}
        args_hst, kwargs_hst = self._init_args_hst(args_dev, kwargs)
        for hook in self.pre_run_hooks:
            hook(*args_hst, **kwargs_hst)
        patch_scope = interpreter._patch_lang(self.fn)
        try:
            args = inspect.getcallargs(self.fn, *args_hst, **kwargs_hst)
            args = {name: arg if name in self.constexprs else interpreter._implicit_cvt(arg)
                    for name, arg in args.items()}
            grid = self.grid(args) if callable(self.grid) else self.grid
            assert len(grid) <= 3, "grid must have at most 3 dimensions"
            grid = tuple(grid) + (1,) * (3 - len(grid))
            interpreter.interpreter_builder.set_grid_dim(*grid)
            try:
                _Schedule(np.random.default_rng(secrets.randbits(64))).run(self.fn, args, grid)
            except Exception as e:
                if triton.knobs.compilation.front_end_debugging:
                    raise
                raise interpreter.InterpreterError(repr(e)) from e
        finally:
            patch_scope.restore()
        self._restore_args_dev(args_dev, args_hst, kwargs, kwargs_hst)

    executor.__call__ = call
    executor._autotune_interleaved = True


def _switch() -> None:
    """Stop the program under way before its atomic, back to its launch's schedule (a no-op outside a program)."""
    program = greenlet.getcurrent()
    if isinstance(program, _Program):
        program.parent.switch()


def install_switches() -> None:
    """Each atomic of a program stops it first (installed after every patch that wraps the atomics)."""
    builder = interpreter.InterpreterBuilder
    if getattr(builder, "_autotune_switches", False):
        return
    rmw, cas = builder.create_atomic_rmw, builder.create_atomic_cas

    def create_atomic_rmw(self, rmw_op, ptr, val, mask, sem, scope):
        _switch()
        return rmw(self, rmw_op, ptr, val, mask, sem, scope)

    def create_atomic_cas(self, ptr, cmp, val, sem, scope):
        _switch()
        return cas(self, ptr, cmp, val, sem, scope)

    builder.create_atomic_rmw, builder.create_atomic_cas = create_atomic_rmw, create_atomic_cas
    builder._autotune_switches = True
