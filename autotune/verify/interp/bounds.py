"""Every memory access of an interpreted kernel checked against the storages of its launch's tensor arguments.

Under the interpreter a kernel's loads and stores are raw addresses in the device process (numpy arrays of
uint64 handed to `_interpreter.load/store`): an address computed past a tensor reads, or writes, whatever
else lives in that process. On a GPU such an access reads another allocation or faults; here it would reach
the checker's own memory. So while a launch runs, every address a load, store or atomic touches (masked-off
lanes excepted) must lie inside the storage of one of the launch's tensor arguments, whole elements included;
otherwise the launch stops with `OutOfBounds`, naming the kernel and the address.

    with accesses_within([(start, end), ...], "kernel_name"):
        fn.run(*args, grid=grid, warmup=False, **kwargs)
"""

from __future__ import annotations

import contextlib
import functools

import numpy as np
from triton.runtime import interpreter

from autotune.verify.interp.sampling import Abandoned, program_tainted


class OutOfBounds(Exception):
    """A kernel touched memory outside every tensor argument of its launch."""


_active: list = []  # [(starts, ends, kernel name)] of the launch under way; empty outside launches


def _check(ptrs: np.ndarray, mask: np.ndarray | None, width: int, what: str) -> None:
    if not _active:
        return
    starts, ends, kernel = _active[-1]
    p = np.asarray(ptrs, dtype=np.uint64).reshape(-1)
    if mask is not None:
        p = p[np.asarray(mask, dtype=bool).reshape(-1)]
    if p.size == 0:
        return
    lo, hi = p.min(), p.max()
    j = int(np.searchsorted(starts, lo, side="right")) - 1
    if j >= 0 and hi < ends[j] and hi + np.uint64(width) <= ends[j]:  # all in the storage the lowest lies in
        return
    i = np.searchsorted(starts, p, side="right") - 1
    end = ends[np.clip(i, 0, None)]
    ok = (i >= 0) & (p < end) & (p + np.uint64(width) <= end)  # p < end: an address near 2**64 wraps past + width
    if not ok.all():
        bad = int(p[~ok][0])
        if program_tainted():  # an address made from a sample's garbage: the call runs whole instead
            raise Abandoned(f"kernel `{kernel}` {what} address {bad:#x} computed from bytes a skipped program would "
                            "have written")
        raise OutOfBounds(f"kernel `{kernel}` {what} address {bad:#x}, outside every tensor argument of its launch "
                          "(an out-of-bounds access: mask it, or keep offsets inside the tensor)")


def _width(handle) -> int:
    ty = handle.get_element_ty()
    return max(1, ty.primitive_bitwidth // 8)


def install() -> None:
    """Check every load, store and atomic of an interpreted launch (autotune.verify.interp.install)."""
    builder = interpreter.InterpreterBuilder
    if getattr(builder, "_autotune_bounds", False):
        return
    load, store = builder.create_masked_load, builder.create_masked_store
    rmw, cas = builder.create_atomic_rmw, builder.create_atomic_cas

    @functools.wraps(load)
    def masked_load(self, ptrs, mask, other, cache_policy, is_volatile):
        _check(ptrs.data, mask.data, _width(ptrs), "loads from")
        return load(self, ptrs, mask, other, cache_policy, is_volatile)

    @functools.wraps(store)
    def masked_store(self, ptrs, value, mask, cache_policy):
        _check(ptrs.data, mask.data, _width(ptrs), "stores to")
        return store(self, ptrs, value, mask, cache_policy)

    @functools.wraps(rmw)
    def atomic_rmw(self, rmw_op, ptr, val, mask, sem, scope):
        _check(ptr.data, mask.data, _width(ptr), "atomically updates")
        return rmw(self, rmw_op, ptr, val, mask, sem, scope)

    @functools.wraps(cas)
    def atomic_cas(self, ptr, cmp, val, sem, scope):
        _check(ptr.data, None, _width(ptr), "atomically swaps")
        return cas(self, ptr, cmp, val, sem, scope)

    builder.create_masked_load, builder.create_masked_store = masked_load, masked_store
    builder.create_atomic_rmw, builder.create_atomic_cas = atomic_rmw, atomic_cas
    builder._autotune_bounds = True


@contextlib.contextmanager
def accesses_within(spans: list[tuple[int, int]], kernel: str):
    """While the block runs, interpreted accesses must lie inside one of `spans` ([start, end) addresses)."""
    if not getattr(interpreter.InterpreterBuilder, "_autotune_bounds", False):
        raise RuntimeError("the interpreter is not patched: call autotune.verify.interp.install.install() first")
    merged: list[list[int]] = []
    for start, end in sorted(spans):  # arguments may share a storage (q and k views of one qkv buffer)
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    starts = np.array([s for s, _ in merged], dtype=np.uint64)
    ends = np.array([e for _, e in merged], dtype=np.uint64)
    _active.append((starts, ends, kernel))
    try:
        yield
    finally:
        _active.pop()
