"""The worker's changes to Triton's CPU interpreter: programs in a random order, fp32 -> bf16 rounded as on a
GPU, and a hook before each launch.

A GPU runs a grid's programs in no promised order (and many at once); the interpreter runs them one by
one in order (x, then y, then z), so a kernel in which program i reads what program i - 1 wrote passes
on the CPU and races on a GPU. `permute_programs` makes the interpreter visit each launch's programs in
an order drawn afresh per launch from a generator seeded with OS entropy, so such a kernel reads
unwritten (NaN-filled) memory here and fails its comparison.

The interpreter's grid loop (triton/runtime/interpreter.py, GridExecutor.__call__) calls
`interpreter_builder.set_grid_idx(x, y, z)` once per program and the kernel reads its id back from the
builder; the wrapper maps the loop's index through the permutation, so every program still runs once.

Triton 3.9's interpreter truncates fp32 -> bf16 (`x.to(tl.bfloat16)` keeps the top 16 bits), where a GPU
rounds to nearest even (Triton lowers the cast with RTNE; torch's `.to(torch.bfloat16)` does the same): half
the values of a bf16 output are one ulp off toward zero, which a quantizer downstream of the rounding turns
into integers off by one. `round_bf16_like_gpu` makes the interpreter round to nearest even.

`install_gpu_semantics()` installs those two and the rest of what makes the interpreter compute as a GPU does
(each part idempotent, all of them before the candidate is imported, while the interpreter's modules can still
be patched): `gpu_numerics` (tl.dot, casts, scalar argument types) and `races` (programs of one launch that
touch one address). `current_launch()` names the launch being interpreted, for those patches.
"""

from __future__ import annotations

import dataclasses
import functools
import secrets
from collections.abc import Callable

import numpy as np
from triton.runtime import interpreter

_rng = np.random.default_rng(secrets.randbits(128))


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


def _fp32_to_bf16_rtne(data: np.ndarray) -> np.ndarray:
    """fp32 values -> bf16 bits (uint16), rounded to nearest even; NaN stays a (quiet) NaN."""
    bits = np.ascontiguousarray(data, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(data)
    return np.where(nan, ((bits >> 16) | 0x40).astype(np.uint16), rounded) if nan.any() else rounded


def round_bf16_like_gpu() -> None:
    """From now on, the interpreter's fp32 -> bf16 casts round to nearest even, as the GPU's do."""
    if getattr(interpreter, "_autotune_bf16_rtne", False):
        return
    convert = interpreter._convert_float

    def convert_float(data, input_dtype, output_dtype, rounding_mode):
        to_nearest = rounding_mode in (None, interpreter._ir.ROUNDING_MODE.RTNE)
        if input_dtype == interpreter.tl.float32 and output_dtype == interpreter.tl.bfloat16 and to_nearest:
            return _fp32_to_bf16_rtne(data)
        return convert(data, input_dtype, output_dtype, rounding_mode)

    interpreter._convert_float = convert_float
    interpreter._autotune_bf16_rtne = True


_launch_hooks: list[Callable[[str, tuple, dict], None]] = []


@dataclasses.dataclass(frozen=True)
class Launch:
    """One interpreted launch: the kernel and its arguments by parameter name (launch options left out)."""

    fn: interpreter.InterpretedFunction
    args: dict

    @property
    def kernel(self) -> str:
        return self.fn.fn.__name__


_launches: list[Launch] = []  # the launch being interpreted (a stack: a launch hook may launch, in tests)


def current_launch() -> Launch | None:
    return _launches[-1] if _launches else None


def _install_launch_hooks() -> None:
    """Wrap the interpreter's `run` once, at import, before the worker installs its launch counter over it:
    a hook registered later joins this list instead of replacing `run` (which the counter's tamper check
    would rightly read as its removal)."""
    run = interpreter.InterpretedFunction.run

    @functools.wraps(run)
    def run_checked(self, *args, grid, warmup, **kwargs):
        if warmup:
            return run(self, *args, grid=grid, warmup=warmup, **kwargs)
        for hook in _launch_hooks:
            hook(self.fn.__name__, args, kwargs)
        named = {**dict(zip(self.arg_names, args)), **{k: v for k, v in kwargs.items() if k in self.arg_names}}
        _launches.append(Launch(self, named))
        try:
            return run(self, *args, grid=grid, warmup=warmup, **kwargs)
        finally:
            _launches.pop()

    interpreter.InterpretedFunction.run = run_checked


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


def install_gpu_semantics() -> None:
    """Everything that makes the interpreter compute as a GPU does (see the module docstring); call it once
    the interpreter is on and before a kernel runs. Each part installs itself once."""
    from autotune.verify import gpu_numerics, races

    permute_programs()
    round_bf16_like_gpu()
    gpu_numerics.install_dot()
    gpu_numerics.install_casts()
    gpu_numerics.install_scalar_arguments()
    gpu_numerics.install_loop_counters()
    races.install()


_install_launch_hooks()
