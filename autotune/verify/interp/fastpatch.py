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
   its own `tl.tuple` with the same values and type; a tensor's is made when it is first read (most never are).
4. Every integer add, sub and mul (all index arithmetic) also computes itself in int64 and compares the result
   with its type's range for an overflow `device_assert`, which the interpreter's options (debug off, as on a
   GPU without TRITON_DEBUG) then drop: the same W8A16 profile spent 5.4 of 13 s on it. The options say not to
   sanitize while they say not to debug, so the check that would be dropped is not computed.
5. The frontend's type checks compare types by value on every operation (a block type's shape through constexpr
   tuples) and re-derive broadcasts and casts that change nothing. Where the answer is already known, it is given
   at once: a type equals itself, two block types of remembered shapes (3.) compare as plain ints, operands of
   one shape broadcast to themselves, and a cast to the value's own type is the value (each what Triton's own
   code returns there); anything else takes Triton's own path and its errors.
6. A masked load is Triton's C++ `load`, one element at a time (a [128, 64] bf16 tile: ~300 us, as long as 20
   other operations). The same bytes are gathered by numpy instead, as unsigned integers of the element's width
   (bits copied, never converted), where every address it reads is a whole element from the lowest one; any
   other load (misaligned addresses, unusual shapes or dtypes) takes the C++ path.

    install()   # once, in the process that interprets kernels (the device)
"""

from __future__ import annotations

import builtins
import dataclasses
import functools
import math

import numpy as np
import triton.language as tl
from triton.language import core
from triton.language.semantic import TritonSemantic
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
    _shortcut_type_checks()
    _gather_loads()
    options = interpreter.interpreter_builder.options
    if not options.debug:
        interpreter.interpreter_builder.options = dataclasses.replace(options, sanitize_overflow=False)
    interpreter._autotune_fastpatch = True


def _ints(shape) -> builtins.tuple[int, ...] | None:
    """`shape` (a list or tl.tuple of ints and constexprs of ints) as plain ints; None for anything else."""
    if type(shape) is core.tuple and "_ints" in shape.__dict__:
        return shape.__dict__["_ints"]  # a remembered block type's own shape
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
                self._ints = key
            return
        values, ty, numel, text = known
        self._ints = key
        self.element_ty = element_ty
        self.shape = core.tuple(values, ty)
        self.shape.__dict__["_ints"] = key
        self.numel = numel
        self.name = f"<{text}, {element_ty}>"

    def tensor_shape(type) -> builtins.tuple:
        key = getattr(type, "_ints", None) or (_ints(type.shape) if type.is_block() else ())
        known = tensors.get(key) if key is not None else None
        if known is None:
            values = [core.constexpr(s) for s in (type.shape if type.is_block() else ())]
            known = (values, core.tuple(values).type, core.constexpr(math.prod(s.value for s in values)))
            if key is not None:
                tensors[key] = known
        return known

    class Lazy:
        """A tensor's `shape` or `numel`, made from its type when first read (most are never read)."""

        def __init__(self, name: str) -> None:
            self.name = name

        def __get__(self, tensor, owner=None):
            if tensor is None:
                return self
            values, ty, numel = tensor_shape(tensor.type)
            tensor.__dict__.update(shape=core.tuple(values, ty), numel=numel)
            return tensor.__dict__[self.name]

    def tensor_init(self, handle, type):
        self.handle = handle
        self.type = type
        self.dtype = type.scalar

    core.tensor.shape = Lazy("shape")
    core.tensor.numel = Lazy("numel")
    core.block_type.__init__ = block_type_init
    core.tensor.__init__ = tensor_init


def _shortcut_type_checks() -> None:
    dtype_eq, block_eq = core.dtype.__eq__, core.block_type.__eq__
    broadcast, cast = TritonSemantic.broadcast_impl_value, TritonSemantic.cast

    def dtype_equal(self, other):
        return True if self is other else dtype_eq(self, other)

    def same_remembered_shape(a, b) -> bool:  # two block types whose shapes (3.) are the same plain ints
        mine = getattr(a, "_ints", None)
        return mine is not None and isinstance(b, core.block_type) and mine == getattr(b, "_ints", None)

    def block_equal(self, other):
        if self is other:
            return True
        if same_remembered_shape(self, other):
            return self.element_ty == other.element_ty
        return block_eq(self, other)

    def broadcast_impl_value(self, lhs, rhs):
        lhs_ty, rhs_ty = lhs.type, rhs.type
        if lhs_ty is rhs_ty or not (lhs_ty.is_block() or rhs_ty.is_block()) or same_remembered_shape(lhs_ty, rhs_ty):
            return lhs, rhs
        return broadcast(self, lhs, rhs)

    def cast_(self, input, dst_ty, fp_downcast_rounding=None):
        if input.type.scalar is getattr(dst_ty, "scalar", None):
            return input
        return cast(self, input, dst_ty, fp_downcast_rounding)

    core.dtype.__eq__ = dtype_equal
    core.block_type.__eq__ = block_equal
    TritonSemantic.broadcast_impl_value = broadcast_impl_value
    TritonSemantic.cast = cast_


_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


class _Memory:
    """`count` unsigned integers of `width` bytes at `address` of this process, as numpy reads an array."""

    def __init__(self, address: int, count: int, width: int) -> None:
        self.__array_interface__ = {"data": (address, True), "shape": (count,), "version": 3,
                                    "typestr": np.dtype(_UNSIGNED[width]).str}


def gather(ptrs: np.ndarray, mask: np.ndarray, other: np.ndarray | None, dtype: np.dtype) -> np.ndarray | None:
    """What Triton's C++ load gives (the element at each address where `mask`, else `other`), or None where this
    does not apply and the C++ load must run."""
    width = dtype.itemsize
    if (width not in _UNSIGNED or ptrs.dtype != np.uint64 or mask.dtype != np.bool_ or mask.shape != ptrs.shape
            or (other is not None and (other.shape != ptrs.shape or other.dtype != dtype))):
        return None
    out = np.zeros(ptrs.shape, dtype=dtype) if other is None else np.array(other, dtype=dtype, order="C")
    read = ptrs[mask]
    if read.size:
        low = read.min()
        offsets = read - low
        if width > 1 and (offsets & np.uint64(width - 1)).any():
            return None
        index = offsets // np.uint64(width)
        memory = np.asarray(_Memory(int(low), int(index.max()) + 1, width))
        out.view(_UNSIGNED[width])[mask] = memory[index]
    return out


def _gather_loads() -> None:
    load = interpreter.InterpreterBuilder.create_masked_load

    @functools.wraps(load)
    def create_masked_load(self, ptrs, mask, other, cache_policy, is_volatile):
        element = ptrs.get_element_ty()
        out = gather(ptrs.data, mask.data, None if other is None else other.data, interpreter._get_np_dtype(element))
        if out is None:
            return load(self, ptrs, mask, other, cache_policy, is_volatile)
        return interpreter.TensorHandle(out, element)

    interpreter.InterpreterBuilder.create_masked_load = create_masked_load
