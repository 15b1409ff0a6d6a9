"""Races between the programs of one interpreted launch: found, and named.

A GPU runs a launch's programs concurrently and in no promised order; the interpreter runs them one at a time
(in a random order per launch: `interp.permute_programs`). So a kernel in which two programs touch one address
passes here whatever a GPU would make of it, unless the interpreter watches. `install()` hooks the
interpreter's loads, stores and atomics and keeps, per launch, a shadow of each tensor argument's storage: per
element the ordinal (1-based, in run order) of the program that last stored it, that first read it, that last
read it if that was another, and that last updated it atomically. Within one launch:

- a plain load of an element another program stored is a race (what it reads depends on which runs first);
- a plain store to an element another program stored, read or updated atomically is a race, unless it leaves
  the element's bits as they are (redundant programs at a clamped tail storing the same value: every order
  gives the same memory);
- an atomic on an element another program stored or read plainly is a race; atomics among themselves are not
  (that is what they are for), and neither is a plain load of an element others only updated atomically: the
  last program of a split reduction, chosen by an atomic counter, reads the sums the others added, a pattern
  that is correct on a GPU, and the interpreter cannot see the counter's synchronisation. A load racing a
  running atomic sum still shows: its result depends on the drawn order, which a repeat call draws anew, and the
  programs interleave at atomics (interp.interleave), so a counter drawn before the sum is complete is seen.
  That load is ordered after an update only through the memory model: the updating program releases it (a later
  atomic of `sem` "release" or "acq_rel", Triton's default) on some element, and the loading program acquires
  (an atomic of "acquire" or "acq_rel") on that element after the release, before the load, both at gpu or sys
  `scope` (the atomics on one element form a chain, so an acquire there follows every release before it). A load
  not so ordered after an update is a race (a relaxed ticket, or one that only releases); so is any access by
  another program to an element updated with a scope="cta" atomic (atomic among one program's threads only),
  and a "cta" atomic on an element another program touched. The interpreter performs every atomic at once
  whatever its sem and scope; this is what a GPU may do instead. A release counts on the elements it changed only
  (an add of 0 is no release another program can observe). Not modelled: whether the loader's path depended on
  the value its acquire read (a GPU may order an acquire on an element before a release there that nothing else
  orders, as when the loader was chosen by a relaxed ticket and ignores what it acquired).

And within one program: its threads are not ordered either (no barrier between a global store and a later load
unless `tl.debug_barrier()`), so a program that loads an element it stored itself earlier in the same stretch
between barriers, from another position of its block (another lane, or a block of another shape: on a GPU
another thread), reads what that thread may not have stored yet. Read back at the same position (a program
rewriting its own row) it is the storing thread's own write, and ordered.

Each finding raises `RaceError`, which names the kernel, the element (`y[3, 17]` when it lies in a tensor
argument: the shadow covers the arguments' storages, so an address outside every argument is not watched;
out-of-bounds accesses are the guard bands' business) and the two programs by their grid coordinates. The
worker reports it as `incorrect` ("race ..."). In a sampled launch (autotune.verify.interp.sampling) a program that
read what only skipped programs would have written is not watched: its stores are not compared either.

Accesses are matched by element: the storage's smallest element size among the launch's arguments on it,
indexed by an access's first byte. A storage's reads are logged until its first store or atomic of the launch
and replayed into its read shadows then (inputs are never written: their reads cost a list append); storages
over READ_SHADOW_MAX_ELEMENTS elements, and reads past READ_LOG_MAX_ELEMENTS before a first store, are checked
against the stores only (a program that reads an element before another stores it is then found on the orders
that run the store first, about half of them). Measured cost, interpreted CPU time per call with and without
the detector (bf16, one thread, shared machine): rms_norm [64, 4096] 0.36 s vs 0.34, softmax 0.45 vs 0.36,
linear [8, 512, 2048] 3.34 vs 3.27, decode_attention [4, 8, 2, 128, 256] 0.60 vs 0.55, prefill_attention 5.44 vs
5.55 (two attention targets since retired into paged_attention), rotary (in place) 1.61 vs 1.39.
"""

from __future__ import annotations

import bisect
import dataclasses

import numpy as np
import torch
from triton._C.libtriton import ir
from triton.runtime import interpreter

from autotune.verify.interp.launch import current_launch  # bound: the worker seals that module
from autotune.verify.interp.sampling import program_tainted

READ_SHADOW_MAX_ELEMENTS = 1 << 24  # 2 x 64 MiB of int32 at most; a CPU case holds far fewer
READ_LOG_MAX_ELEMENTS = 1 << 24  # addresses kept per storage until its first store (8 bytes each)


class RaceError(RuntimeError):
    """Two programs of one launch touched one address, at least one of them with a plain store or a plain
    read of the other's store (the message names the kernel, the element and both programs)."""


@dataclasses.dataclass
class _Arg:
    name: str
    ptr: int
    itemsize: int
    shape: tuple
    contiguous: bool
    extent: int  # bytes from ptr to one past its last element


@dataclasses.dataclass
class _Storage:
    base: int
    end: int
    itemsize: int
    args: list[_Arg]
    shadows: dict = dataclasses.field(default_factory=dict)  # kind -> int32 ordinals (0: nobody)
    # reads before the storage's first store or atomic: (ordinal, addresses), replayed into the read shadows
    # then. Most storages (a launch's inputs) are never written: their reads cost a list append, not ~8 numpy
    # passes (measured, rms_norm [64, 4096] bf16: +28% interpreted CPU time with every read shadowed, +7% so)
    read_log: list | None = dataclasses.field(default_factory=list)
    logged: int = 0

    def shadow(self, kind: str) -> np.ndarray:
        if kind not in self.shadows:  # np.zeros maps untouched pages lazily: big storages cost what is touched
            self.shadows[kind] = np.zeros((self.end - self.base) // self.itemsize + 1, dtype=np.int32)
        return self.shadows[kind]

    def index(self, addrs: np.ndarray) -> np.ndarray:
        return ((addrs - np.uint64(self.base)) // np.uint64(self.itemsize)).astype(np.intp)

    def note_reads(self, addrs: np.ndarray, me: int) -> None:
        if self.read_log is None:  # written already: into the shadows at once
            _shadow_reads(self, self.index(addrs), me)
        elif (self.end - self.base) // self.itemsize > READ_SHADOW_MAX_ELEMENTS:
            return  # too large to shadow: its reads are checked against stores only
        elif self.logged + addrs.size > READ_LOG_MAX_ELEMENTS:
            self.read_log, self.logged = [], 0  # past the log's budget: earlier reads unchecked, later ones kept
            self.note_reads(addrs, me)
        else:
            self.read_log.append((me, addrs))
            self.logged += addrs.size

    def before_write(self) -> None:
        """The first store or atomic of this launch here: the reads logged so far into the read shadows."""
        if self.read_log is not None:
            log, self.read_log = self.read_log, None
            for me, addrs in log:
                _shadow_reads(self, self.index(addrs), me)


def _shadow_reads(storage: _Storage, idx: np.ndarray, me: int) -> None:
    """The first reader of each element, and the last reader if another program (see the module docstring)."""
    first = storage.shadow("read")
    earlier = first[idx]
    first[idx[earlier == 0]] = me
    again = (earlier != 0) & (earlier != me)
    if again.any():
        storage.shadow("read2")[idx[again]] = me


class _LaunchState:
    def __init__(self, kernel: str, grid: tuple, args: dict):
        self.kernel, self.grid = kernel, grid
        self.programs: list = []
        self.me = 0  # the ordinal of the program under way (programs interleave at atomics: interp.interleave)
        self.stretch = 0  # the number of the program under way's stretch between barriers (0: none yet)
        self.stretches = 0  # stretches numbered so far in the launch: each program's are its own
        self.shapes: dict[tuple, int] = {}  # a block shape -> its code in the "shape" shadow
        self.clock = 0  # atomics performed in the launch so far: the order the interpreter gave them
        # a program -> (storage, indices, clock) of each of its releasing / acquiring atomics
        self.releases: dict[int, list] = {}
        self.acquires: dict[int, list] = {}
        by_base: dict[int, _Storage] = {}
        for name, t in args.items():
            if not isinstance(t, torch.Tensor) or t.numel() == 0:
                continue
            s = t.untyped_storage()
            extent = t.element_size() * (1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride())))
            arg = _Arg(name, t.data_ptr(), t.element_size(), tuple(t.shape), t.is_contiguous(), extent)
            storage = by_base.setdefault(s.data_ptr(), _Storage(s.data_ptr(), s.data_ptr() + s.nbytes(),
                                                                t.element_size(), []))
            storage.itemsize = min(storage.itemsize, t.element_size())
            storage.args.append(arg)
        self.storages = sorted(by_base.values(), key=lambda s: s.base)
        self.bases = [s.base for s in self.storages]
        self.bases_np = np.array(self.bases, dtype=np.uint64)

    def next_stretch(self) -> None:
        self.stretches += 1
        self.stretch = self.stretches

    def locate(self, addrs: np.ndarray):
        """(storage, selection of addrs or None for all) for the watched addresses."""
        lo, hi = int(addrs.min()), int(addrs.max())
        k = bisect.bisect_right(self.bases, lo) - 1
        if k >= 0 and hi < self.storages[k].end:
            yield self.storages[k], None
            return
        which = np.searchsorted(self.bases_np, addrs, side="right").astype(np.intp) - 1
        for k in np.unique(which[which >= 0]):
            s = self.storages[k]
            sel = (which == k) & (addrs < np.uint64(s.end))
            if sel.any():
                yield s, sel

    def program(self, ordinal: int) -> str:
        coords = self.programs[ordinal - 1]
        rank = max([1] + [d + 1 for d in range(3) if self.grid[d] > 1])
        return f"program {coords[0]}" if rank == 1 else f"program {tuple(coords[:rank])}"

    def element(self, storage: _Storage, addr: int) -> str:
        for a in storage.args:
            if a.ptr <= addr < a.ptr + a.extent:
                e = (addr - a.ptr) // a.itemsize
                if a.contiguous and a.shape:
                    return f"`{a.name}[{', '.join(str(int(i)) for i in np.unravel_index(e, a.shape))}]`"
                return f"`{a.name}` element +{e} (a strided view: counted from its first element)"
        return f"byte {hex(addr)} of `{storage.args[0].name}`'s storage, outside every argument's elements"


_state: list[_LaunchState | None] = [None]


def _others(shadow: np.ndarray, idx: np.ndarray, me: int) -> np.ndarray:
    seen = shadow[idx]
    return (seen != 0) & (seen != me)


_UNORDERED = "programs run concurrently on a GPU, in no order: use an atomic, or a second launch"
_MEMORY_ORDER = ("not ordered before the load, sem='relaxed' orders nothing: the updater must release after it (sem "
                 "'release' or 'acq_rel', the default) on an element the loader then acquires on")


def _raise(st: _LaunchState, storage: _Storage, addrs, idx, lanes, other_kind: str, what: str,
           why: str = _UNORDERED) -> None:
    lane = int(np.flatnonzero(lanes)[0])
    other = int(storage.shadows[other_kind][idx[lane]])
    raise RaceError(f"race in `{st.kernel}`: {st.program(st.me)} {what} {st.element(storage, int(addrs[lane]))}, "
                    f"which {st.program(other)} {_DID[other_kind]} in the same launch ({why})")


_DID = {"store": "stored", "read": "read", "read2": "read", "atomic": "updated atomically",
        "cta": "updated with a scope='cta' atomic (atomic among one program's threads only)"}


def _accesses(ptrs, lanes: np.ndarray | None, value=None):
    """(launch, storage, addresses, their positions in the block (1-based, made when first asked: most loads read
    inputs nothing stores), values or None) per watched storage the access's `lanes` (None: all) touch; none for a
    program that read a sample's partial results (sampling.program_tainted: its addresses come from counts the
    skipped programs would have completed, so two such programs may meet where the whole launch's never do)."""
    st = _state[0]
    if st is None or not st.storages or program_tainted():
        return
    lanes = np.broadcast_to(True if lanes is None else lanes, ptrs.data.shape)
    addrs = ptrs.data[lanes]
    if addrs.size == 0:
        return
    values = None if value is None else np.broadcast_to(value.data, ptrs.data.shape)[lanes]
    for storage, sel in st.locate(addrs):
        def positions(sel=sel) -> np.ndarray:
            at = (np.flatnonzero(lanes) + 1).astype(np.int32)
            return at if sel is None else at[sel]
        if sel is None:
            yield st, storage, addrs, positions, values
        else:
            yield st, storage, addrs[sel], positions, None if values is None else values[sel]


def _refuse(st, storage, idx, addrs, kinds: tuple[str, ...], what: str, why: str = _UNORDERED) -> None:
    """A race if another program of this launch left one of these marks on an element accessed."""
    for kind in kinds:
        if kind in storage.shadows:
            bad = _others(storage.shadows[kind], idx, st.me)
            if bad.any():
                _raise(st, storage, addrs, idx, bad, kind, what, why)


def _data(mask) -> np.ndarray | None:
    """A mask handle's lanes (None: every lane)."""
    return None if mask is None else mask.data


def _on_load(ptrs, mask) -> None:
    shape = ptrs.data.shape
    for st, storage, addrs, positions, _ in _accesses(ptrs, _data(mask)):
        if "atomic" in storage.shadows or "cta" in storage.shadows:  # another program's atomic update, read
            idx = storage.index(addrs)  # through the memory model only
            _refuse(st, storage, idx, addrs, ("cta",), "loads")
            if "atomic" in storage.shadows:
                _unordered(st, storage, idx, addrs)
        if "store" in storage.shadows:
            idx = storage.index(addrs)
            _refuse(st, storage, idx, addrs, ("store",), "loads")
            own = storage.shadow("stretch")[idx] == st.stretch
            moved = own & ((storage.shadow("shape")[idx] != st.shapes.get(shape, -1))
                           | (storage.shadow("position")[idx] != positions())) if own.any() else own
            if moved.any():
                lane = int(np.flatnonzero(moved)[0])
                raise RaceError(f"race in `{st.kernel}`: {st.program(st.me)} loads "
                                f"{st.element(storage, int(addrs[lane]))}, which it stored itself earlier from another "
                                "position of its block (on a GPU another thread: the threads of one program are not "
                                "ordered, and the load may come before that thread's store; read it back where it "
                                "was stored, or put tl.debug_barrier() between)")
        storage.note_reads(addrs, st.me)


def _bits(x: np.ndarray) -> np.ndarray:
    return x.view(np.dtype(f"u{x.dtype.itemsize}")) if x.dtype.itemsize in (1, 2, 4, 8) else x


def _on_store(ptrs, value, mask) -> None:
    shape = ptrs.data.shape
    for st, storage, addrs, positions, values in _accesses(ptrs, _data(mask), value):
        storage.before_write()
        idx = storage.index(addrs)
        for kind in ("store", "read", "read2", "atomic", "cta"):
            if kind in storage.shadows:
                touched = _others(storage.shadows[kind], idx, st.me)
                if touched.any():  # a race unless the store leaves the bits there as they are
                    now = interpreter._interpreter.load(addrs, touched, np.zeros_like(values), values.dtype)
                    changed = touched & (_bits(now) != _bits(values))
                    if changed.any():
                        _raise(st, storage, addrs, idx, changed, kind, "stores to")
        storage.shadow("store")[idx] = st.me
        storage.shadow("stretch")[idx] = st.stretch
        storage.shadow("shape")[idx] = st.shapes.setdefault(shape, len(st.shapes))
        storage.shadow("position")[idx] = positions()


def _unordered(st: _LaunchState, storage: _Storage, idx, addrs) -> None:
    """A race where the load is not ordered after another program's atomic update of an element it reads: no
    release of the updater's after the update on an element the loader acquired on after that release."""
    updaters = storage.shadows["atomic"][idx]
    for other in np.unique(updaters[(updaters != 0) & (updaters != st.me)]):
        mine = updaters == other
        updated = int(storage.shadow("atomic_at")[idx[mine]].max())
        if not any(released > updated and acquired > released and base == at and np.intersect1d(rel, acq).size
                   for base, rel, released in st.releases.get(int(other), ())
                   for at, acq, acquired in st.acquires.get(st.me, ())):
            _raise(st, storage, addrs, idx, mine, "atomic", "loads", _MEMORY_ORDER)


_ACQUIRING = (ir.MEM_SEMANTIC.ACQUIRE, ir.MEM_SEMANTIC.ACQUIRE_RELEASE)
_RELEASING = (ir.MEM_SEMANTIC.RELEASE, ir.MEM_SEMANTIC.ACQUIRE_RELEASE)


def _on_atomic(ptrs, mask, sem, scope) -> None:
    local = scope == ir.MEM_SYNC_SCOPE.CTA
    for st, storage, addrs, _, _ in _accesses(ptrs, _data(mask)):
        storage.before_write()
        idx = storage.index(addrs)
        _refuse(st, storage, idx, addrs, ("store", "read", "read2", "cta", *(("atomic",) if local else ())),
                "updates with a scope='cta' atomic" if local else "updates atomically")
        if local:
            storage.shadow("cta")[idx] = st.me
            continue
        st.clock += 1
        storage.shadow("atomic")[idx] = st.me
        storage.shadow("atomic_at")[idx] = st.clock
        if sem in _ACQUIRING:
            st.acquires.setdefault(st.me, []).append((storage.base, idx, st.clock))


def _after_atomic(ptrs, mask, sem, scope, old) -> None:
    """A releasing atomic's release, on the elements it changed: a release that leaves an element as it was (an add
    of 0) is one no other program can observe there, so an acquire there orders nothing after it."""
    if sem not in _RELEASING or scope == ir.MEM_SYNC_SCOPE.CTA:
        return
    lanes = np.ascontiguousarray(np.broadcast_to(True if mask is None else mask.data, ptrs.data.shape))
    before = np.broadcast_to(old.data, ptrs.data.shape)
    now = interpreter._interpreter.load(ptrs.data, lanes, np.zeros_like(before), before.dtype)
    changed = lanes & (_bits(np.ascontiguousarray(before)) != _bits(now))
    if changed.any():
        for st, storage, addrs, _, _ in _accesses(ptrs, changed):
            st.releases.setdefault(st.me, []).append((storage.base, storage.index(addrs), st.clock))


def install() -> None:
    """From now on every interpreted launch is watched for races between its programs (module docstring)."""
    builder = interpreter.InterpreterBuilder
    if getattr(builder, "_autotune_races", False):
        return
    set_dim, set_idx = builder.set_grid_dim, builder.set_grid_idx
    load, store = builder.create_masked_load, builder.create_masked_store
    rmw, cas, barrier = builder.create_atomic_rmw, builder.create_atomic_cas, builder.create_barrier
    grid_call = interpreter.GridExecutor.__call__

    def set_grid_dim(self, nx, ny, nz):
        set_dim(self, nx, ny, nz)
        launch = current_launch()
        _state[0] = _LaunchState(launch.kernel, (nx, ny, nz), launch.args) if launch else None

    def set_grid_idx(self, x, y, z):
        set_idx(self, x, y, z)
        if _state[0] is not None:
            _state[0].programs.append(self.grid_idx)
            _state[0].me = len(_state[0].programs)
            _state[0].next_stretch()

    def create_barrier(self):
        if _state[0] is not None:  # the program's stores so far are visible to all its threads from here
            _state[0].next_stretch()
        return barrier(self)

    def create_masked_load(self, ptrs, mask, other, cache_policy, is_volatile):
        _on_load(ptrs, mask)
        return load(self, ptrs, mask, other, cache_policy, is_volatile)

    def create_masked_store(self, ptrs, value, mask, cache_policy):
        _on_store(ptrs, value, mask)
        return store(self, ptrs, value, mask, cache_policy)

    def create_atomic_rmw(self, rmw_op, ptr, val, mask, sem, scope):
        _on_atomic(ptr, mask, sem, scope)
        old = rmw(self, rmw_op, ptr, val, mask, sem, scope)
        _after_atomic(ptr, mask, sem, scope, old)
        return old

    def create_atomic_cas(self, ptr, cmp, val, sem, scope):
        _on_atomic(ptr, None, sem, scope)
        old = cas(self, ptr, cmp, val, sem, scope)
        _after_atomic(ptr, None, sem, scope, old)
        return old

    def call(self, *args, **kwargs):
        try:
            return grid_call(self, *args, **kwargs)
        finally:
            _state[0] = None  # the shadows go with the launch

    builder.set_grid_dim, builder.set_grid_idx = set_grid_dim, set_grid_idx
    builder.create_masked_load, builder.create_masked_store = create_masked_load, create_masked_store
    builder.create_atomic_rmw, builder.create_atomic_cas = create_atomic_rmw, create_atomic_cas
    builder.create_barrier = create_barrier
    interpreter.GridExecutor.__call__ = call
    builder._autotune_races = True


def program_context() -> tuple[int, int] | None:
    """The program under way's ordinal and stretch (interp.interleave saves them when it stops the program)."""
    st = _state[0]
    return None if st is None else (st.me, st.stretch)


def enter_program_context(context: tuple[int, int] | None) -> None:
    st = _state[0]
    if st is not None and context is not None:
        st.me, st.stretch = context


def race_in(error: BaseException | None) -> str:
    """The RaceError's message if one is in the exception's chain (causes and contexts), else ''."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, RaceError):
            return str(error)
        error = error.__cause__ or error.__context__
    return ""

