"""Two costs of Triton 3.9's interpreter that do not change what it computes, taken out.

1. `_patch_lang` swaps every builtin of triton.language for its interpreted form (inspect.getmembers over
   tl, tl.core, tl.math and tl.tensor) on each launch and again on each call of a library function made with
   @jit inside a kernel (tl.sum, tl.max, tl.softmax, ...), which it never restores. Measured on the RMSNorm
   example under the quick plan: 22.6 s of 89 s profiled. Inside a launch, the modules the launch already
   patched are not patched again; modules it had not (a helper's own `core`) still are, and all are restored
   when the launch ends, as before.
2. `_get_np_dtype` builds a dict of every Triton dtype on each call (29,515 calls, 5 s of the same profile):
   the mapping of hashable element types is remembered.

    install()   # once, in the process that interprets kernels (the device)
"""

from __future__ import annotations

import functools

import triton.language as tl
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
    interpreter._autotune_fastpatch = True
