"""Costs of Triton 3.9's interpreter that do not change what it computes, taken out.

1. `_patch_lang` swaps every builtin of triton.language for its interpreted form (inspect.getmembers over
   tl, tl.core, tl.math and tl.tensor) on each launch and again on each call of a library function made with
   @jit inside a kernel (tl.sum, tl.max, tl.softmax, ...), which it never restores. Measured on the RMSNorm
   example under the quick plan: 22.6 s of 89 s profiled. Inside a launch, the modules the launch already
   patched are not patched again; modules it had not (a helper's own `core`) still are, and all are restored
   when the launch ends, as before.
2. `_get_np_dtype` builds a dict of every Triton dtype on each call (29,515 calls, 5 s of the same profile):
   the mapping of hashable element types is remembered.
3. Every operation builds a `block_type` and a `tensor`, and each rebuilds its shape as a `tl.tuple` whose type
   is derived element by element, and validates it (a W8A16 split-K GEMM at [128, 512, 512]: 74,432 block types,
   8.9 of 24 s). The shape's parts are remembered per shape of plain ints that once validated; any other shape
   (a bool, a numpy int, 0-d, not a power of two) takes Triton's own path and its errors. Each object still gets
   its own `tl.tuple` with the same values and type.
4. Every integer add, sub and mul (all index arithmetic) also computes itself in int64 and compares the result
   with its type's range for an overflow `device_assert`, which the interpreter's options (debug off, as on a
   GPU without TRITON_DEBUG) then drop: the same W8A16 profile spent 5.4 of 13 s on it. The options say not to
   sanitize while they say not to debug, so the check that would be dropped is not computed.

    install()   # once, in the process that interprets kernels (the device)
"""

from __future__ import annotations

import builtins
import dataclasses
import functools
import math

import triton.language as tl
from triton.language import core
from triton.runtime import interpreter

_patched_now: list[set[int]] = []  # the ids of the language modules patched by the launch under way


def _langs(fn) -> list:
    return [v for v in fn.__globals__.values() if isinstance(v, type(tl)) and v in (tl, tl.core)]


class _Nothing:
    def restore(self) -> None:
        pass


def install() -> None:
    if getattr(interpreter, "_autotune_fastpatch", False):
        return
    patch_lang, executor_call, np_dtype = interpreter._patch_lang, interpreter.GridExecutor.__call__, \
        interpreter._get_np_dtype

    def _patch_lang(fn):
        wanted = {id(m) for m in _langs(fn)}
        if _patched_now and _patched_now[-1] and wanted <= _patched_now[-1]:
            return _Nothing()  # a library function called inside a launch: its modules are patched already
        scope = patch_lang(fn)
        if _patched_now:
            _patched_now[-1] |= wanted
        return scope

    @functools.wraps(executor_call)
    def grid_call(self, *args, **kwargs):
        _patched_now.append(set())  # the launch's own _patch_lang fills it
        try:
            return executor_call(self, *args, **kwargs)
        finally:
            _patched_now.pop()

    cache: dict = {}

    def get_np_dtype(tt_dtype):
        element = tt_dtype.element_ty if isinstance(tt_dtype, tl.block_type) else tt_dtype
        try:
            return cache[element]
        except KeyError:
            cache[element] = np_dtype(element)
            return cache[element]
        except TypeError:  # an unhashable type: as before
            return np_dtype(tt_dtype)

    interpreter._patch_lang = _patch_lang
    interpreter.GridExecutor.__call__ = grid_call
    interpreter._get_np_dtype = get_np_dtype
    _remember_shapes()
    options = interpreter.interpreter_builder.options
    if not options.debug:
        interpreter.interpreter_builder.options = dataclasses.replace(options, sanitize_overflow=False)
    interpreter._autotune_fastpatch = True


def _ints(shape) -> builtins.tuple[int, ...] | None:
    """`shape` (a list or tl.tuple of ints and constexprs of ints) as plain ints; None for anything else."""
    if not isinstance(shape, (list, core.tuple)):
        return None
    out = []
    for s in shape:
        if type(s) is core.constexpr:
            s = s.value
        if type(s) is not int:
            return None
        out.append(s)
    return builtins.tuple(out)


def _remember_shapes() -> None:
    block_init = core.block_type.__init__
    blocks: dict[builtins.tuple[int, ...], builtins.tuple] = {}  # shape -> (values, tuple type, numel, text)
    tensors: dict[builtins.tuple[int, ...], builtins.tuple] = {}  # shape -> (constexprs, tuple type, numel)

    def block_type_init(self, element_ty, shape):
        key = _ints(shape)
        known = blocks.get(key) if key is not None else None
        if known is None:
            block_init(self, element_ty, shape)  # Triton's own checks and errors
            if key is not None:
                blocks[key] = (list(key), self.shape.type, self.numel, str(self.shape))
            return
        values, ty, numel, text = known
        self.element_ty = element_ty
        self.shape = core.tuple(values, ty)
        self.numel = numel
        self.name = f"<{text}, {element_ty}>"

    def tensor_init(self, handle, type):
        self.handle = handle
        self.type = type
        self.dtype = type.scalar
        key = _ints(type.shape) if type.is_block() else ()
        known = tensors.get(key) if key is not None else None
        if known is None:
            values = [core.constexpr(s) for s in (type.shape if type.is_block() else ())]
            known = (values, core.tuple(values).type, core.constexpr(math.prod(s.value for s in values)))
            if key is not None:
                tensors[key] = known
        values, ty, numel = known
        self.shape = core.tuple(values, ty)
        self.numel = numel

    core.block_type.__init__ = block_type_init
    core.tensor.__init__ = tensor_init
