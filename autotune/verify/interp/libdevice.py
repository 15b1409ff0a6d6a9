"""A vetted set of CUDA libdevice functions, made to run on Triton 3.9's CPU interpreter.

Production kernels call libdevice where `triton.language` has no function (`round`, `tanh`, `pow`) or to pin
the exact one (Liger-Kernel's `rsqrt`): `from triton.language.extra.libdevice import rsqrt`. That module holds
stubs (`...` bodies); Triton's compiler swaps each for the backend's extern function by its module and name
(`CUDABackend.get_module_map`), and the interpreter, which has no extern calls, ran the stub and got None.

`install` puts, in that module, a function per vetted name that computes on the interpreter's numpy data, with
the stub's `__module__` and `__name__` kept, so that a compile (the device's front-end check, a GPU) still maps
it to CUDA's libdevice and only the interpreter runs the code here. Each accepts the operand types the CUDA
function has overloads for (fp32 and fp64; pow's int32 exponent) and refuses others with the compiler's message,
so a call the GPU cannot compile fails on the CPU too. Values: computed in float64 and rounded to the operand's
type, i.e. correctly rounded; libdevice's are within its documented 1-4 ulp of that, inside every floating
tolerance the checker uses. The static policy (`allowlist.KERNEL_LIBDEVICE`) lists the same names, which a
test keeps in step.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import triton.language as tl
from triton.language.extra import libdevice as stubs
from triton.runtime import interpreter


def _round_half_away(x: np.ndarray) -> np.ndarray:
    return np.copysign(np.floor(np.abs(x) + 0.5), x)


def _erf(x: np.ndarray) -> np.ndarray:
    return torch.special.erf(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64))).numpy()


UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "sqrt": np.sqrt, "cbrt": np.cbrt,
    "exp": np.exp, "exp2": np.exp2, "exp10": lambda x: np.power(10.0, x), "expm1": np.expm1,
    "fast_expf": np.exp, "log": np.log, "log2": np.log2, "log10": np.log10, "log1p": np.log1p,
    "fast_logf": np.log, "tanh": np.tanh, "sinh": np.sinh, "cosh": np.cosh, "erf": _erf,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "round": _round_half_away, "rint": np.rint, "nearbyint": np.rint, "trunc": np.trunc, "floor": np.floor,
    "ceil": np.ceil,
}
BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "pow": np.power, "fmod": np.fmod, "div_rn": np.divide, "atan2": np.arctan2, "hypot": np.hypot,
}
VETTED = (*UNARY, *BINARY)
_FLOATS = {tl.float32: np.float32, tl.float64: np.float64}


def _operand(value, name: str) -> tuple[np.ndarray, tl.dtype | None, tl.dtype | None]:
    """(data, scalar dtype, block type or None) of a tensor argument; a Python number has no dtype of its own."""
    if isinstance(value, tl.tensor):
        return value.handle.data, value.dtype, value.type if value.type.is_block() else None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return np.asarray(value, dtype=np.float64), None, None
    raise TypeError(f"libdevice.{name}: unsupported argument {type(value).__name__}")


def _refuse(name: str, types: list) -> None:
    raise ValueError(f"input arg type does not match. Expect one of the libdevice overloads of {name} "
                     f"(fp32, fp64), got {[str(t) for t in types]}")  # what extern_elementwise's dispatch says


def _apply(name: str, fn, args: tuple):
    operands = [_operand(a, name) for a in args]
    typed = [t for _, t, _ in operands if t is not None]
    dtype = typed[0] if typed else tl.float32  # Python floats alone: fp32, as the JIT types them
    exponent_int = name == "pow" and len(operands) == 2 and operands[1][1] == tl.int32
    if dtype not in _FLOATS or any(t != dtype for t in typed[1:] if not exponent_int):
        _refuse(name, typed)
    with np.errstate(all="ignore"):  # Inf and NaN as on the GPU, silently
        out = np.asarray(fn(*(d.astype(np.float64) for d, _, _ in operands))).astype(_FLOATS[dtype])
    blocks = [tuple(b.shape) for _, _, b in operands if b is not None]
    if blocks:
        shape = np.broadcast_shapes(*blocks)
        out = np.broadcast_to(out, shape).copy()
        return tl.tensor(interpreter.TensorHandle(out, dtype), tl.block_type(dtype, list(shape)))
    return tl.tensor(interpreter.TensorHandle(out.reshape(1), dtype), dtype)


def _interpreted(name: str, fn) -> Callable:
    def call(*args, _semantic=None):
        return _apply(name, fn, args)

    call.__name__ = call.__qualname__ = name
    call.__module__ = stubs.__name__  # a compile maps it back to CUDA's libdevice.<name>
    return call


def install() -> None:
    """From now on the vetted libdevice names compute on the interpreter. A second call does nothing."""
    if getattr(stubs, "_autotune_interpreted", False):
        return
    for name, fn in [*UNARY.items(), *BINARY.items()]:
        setattr(stubs, name, _interpreted(name, fn))
    stubs._autotune_interpreted = True
