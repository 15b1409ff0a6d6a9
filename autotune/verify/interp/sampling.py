"""A drawn sample of a launch's programs, and exactly the outputs they wrote: how a served shape is checked whole on
the CPU without the interpreter running all of it.

A case at a served shape keeps every dimension a kernel indexes whole (every kv head, the longest context, M over
many row blocks) and cuts only independent work; where that is still too slow for the interpreter, each launch
of the call runs only some of its programs: along the grid's longest axis, `programs` indices drawn afresh per call
and the last (a grid's tail) besides (the same indices for every launch of the call whose axis has that length, and
that axis is the one sampled where an earlier launch drew it), every index of the other axes. A
launch given a storage that sampled programs left partly written (a second kernel reading the first's partial
results, or the autotuner's benchmark run and then the real one) starts as a sample too; the first of its programs
that reads a byte nothing valid wrote turns it into a whole launch (it runs every program, and those that read only
valid bytes make valid output), so a launch that only writes such a storage stays cheap. The rest of the grid is
never visited: the interpreter's loop stops when the sample is done.

What the sampled programs wrote is then all that is compared. Every storage allocated during the call gets a
map of per-byte states (INVALID, INPUT, WRITTEN): a store by a program that read nothing invalid makes its bytes
valid; a program that read
an invalid byte (an element some skipped program would have written) is tainted, and its stores are invalid too;
an atomic update in a sampled launch is invalid (skipped programs would have added to it), and a call whose sampled
launch added into an output with atomics runs whole (`atomics_into`); allocations are
invalid until written; a zero fill is good to read until a sampled launch given its storage ends (a skipped
program might have written there), copies carry the state along. An output's element is compared when a
sampled, untainted program wrote all its bytes; the inputs, which the judge made, are valid throughout. Of an
input the op writes in place (`Target.mutates`) what sampled, untainted programs wrote in this call is compared
(`Sample.written`): the rest still holds the input, where the reference has its result. A kernel cannot know
which programs run, so one that is wrong for some programs is wrong in the sample with the probability that it
picks them, drawn afresh on every call. What no sampled program wrote is never compared here: a grid that leaves
outputs unwritten shows only in a case that runs every program (a range case small enough, `verify.range_whole_work`,
or one whose skipped programs, `skipped_s` at the sample's pace, are cheap enough to run again whole:
`verify.whole_within_s`; a launch whose rest is that cheap runs it at once, `finish`).

    with Sample(programs=2, rng=rng) as sample:     # in the device, around a call's launches and ops
        sample.track(start, nbytes)                 # every storage the call allocates
        ... launches ...
        sample.written(view)                        # bool tensor: the elements to compare
"""

from __future__ import annotations

import functools
import time

import numpy as np
import torch
from triton.runtime import interpreter

from autotune.verify.interp import launch as interp

INVALID, INPUT, WRITTEN = 0, 1, 2  # a state byte: not (validly) written yet; as good to read as an input (the
# judge's, or a zero fill), but not a kernel's answer; written in this call by a sampled, untainted program


EDGES = 2  # programs a sample draws from the edges of power-of-two chunks (Sample._draw)


class UnwrittenRead(Exception):
    """A program read bytes of a storage the call allocated that nothing had written before its launch (no earlier
    launch was given it, no fill or copy wrote it): an output or scratch read before it is written, which on a GPU
    reads whatever the memory held. On the sample's terms it would only have tainted the program, taking its own
    later stores out of the comparison, so it is a finding instead."""


class Abandoned(Exception):
    """A tainted program (sampling: it read bytes only skipped programs would have written) reached an address outside
    every tensor of its launch: it computed it from those bytes, so nothing is known of the kernel from it; the
    call runs again whole, where every access is checked on valid data (raised by interp.bounds)."""


class _Done(Exception):
    """Raised by the grid loop's next set_grid_idx once the sample has run: the launch ends there."""


_active: list[Sample] = []


class Sample:
    def __init__(self, programs: int, rng: np.random.Generator, widen_within_s: float = 0.0,
                 finish_within_s: float = 0.0, whole_if_half: bool = False):
        self.programs, self.rng = programs, rng
        # a launch whose axis is no longer than its sample (drawn indices and the last) runs whole; `whole_if_half`:
        # also one whose axis the sample would hold half of
        self.whole_up_to = (programs + 1) * (2 if whole_if_half else 1)
        self.widen_within_s = widen_within_s  # a widened launch stops after this much time (0: it runs to the end)
        self.finish_within_s = finish_within_s  # a launch runs the rest of its grid after its sample within this
        self.finished_s = 0.0  # the time, at their samples' pace, of the programs launches ran after their samples
        self.indices: dict[int, np.ndarray] = {}  # axis length -> the indices drawn for it in this call
        self.starts: list[int] = []
        self.state_maps: list[tuple[int, int, np.ndarray]] = []  # (start, end, valid bytes)
        self.exposed: set[int] = set()  # starts of the storages something could have written before this launch
        self.atomic: set[int] = set()  # starts of the storages a sampled launch updated with atomics
        self.tainted = False
        self.drawn = 0  # drawn programs of the launch under way not yet started (0: it runs whole)
        self.in_draw = False  # the program under way is one of its launch's drawn ones
        self.drawn_tainted = False  # a drawn program of the call read bytes only skipped programs would have written
        self.launch_sampled = False
        self.left = 0  # programs still to run in the launch under way
        self.unvisited = 0  # programs of the launch under way outside its sample (0: it runs whole)
        self.may_widen = False  # the launch was given a partly written storage: a tainted read runs it whole
        self.notes: list[str] = []
        self.skipped = 0  # programs the call's launches left out
        self.skipped_s = 0.0  # the interpreter's time for them, at the pace of their launches' samples
        self.began = 0.0  # when the launch under way's first program started, and how many of its programs ran
        self.ran = 0
        self.widened_at = 0.0  # when the launch under way widened (0: it did not)

    def __enter__(self) -> Sample:
        if not getattr(interpreter.InterpreterBuilder, "_autotune_sampling", False):
            raise RuntimeError("the interpreter is not patched: call autotune.verify.interp.install.install() first")
        _active.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _active.pop()

    # storages ---------------------------------------------------------------------------------------
    def track(self, start: int, nbytes: int, state: int = INVALID) -> None:
        """A storage allocated in this call (nothing in it is valid yet), or an input the op writes in place
        (`state` INPUT: valid to read, and what the sampled programs write in it is told apart: `written`)."""
        self.state_maps = [s for s in self.state_maps if not (s[0] < start + nbytes and start < s[1])]
        self.state_maps.append((start, start + nbytes, np.full(nbytes, state, dtype=np.uint8)))
        if state != INVALID:
            self.exposed.add(start)
        else:
            self.exposed.discard(start)
        self.state_maps.sort(key=lambda s: s[0])
        self.starts = [s[0] for s in self.state_maps]

    def _bytes(self, t: torch.Tensor) -> torch.Tensor | None:
        """The state bytes of a view's elements, [numel, itemsize]; None for an untracked (valid) storage."""
        first = t.data_ptr()  # the view's first element (the device's buffers start past their storage's start)
        for start, end, states in self.state_maps:
            if start <= first < end:
                e = t.element_size()
                return torch.from_numpy(states).as_strided((*t.shape, e), (*(s * e for s in t.stride()), 1),
                                                           first - start)
        return None

    def written(self, t: torch.Tensor) -> torch.Tensor:
        """The elements of `t` that sampled, untainted programs wrote in this call (directly or through a copy):
        the ones to compare. A zero fill is not among them: a program that did not run might have overwritten it."""
        b = self._bytes(t)
        return torch.zeros(t.shape, dtype=torch.bool) if b is None else (b == WRITTEN).all(-1)

    def carry(self, t: torch.Tensor, source: torch.Tensor | None) -> None:
        """After an op wrote all of `t`: a zero fill (no source) is good to read, a copy has its source's state."""
        b = self._bytes(t)
        if b is None:
            return
        self._expose(t)
        if source is None:
            b.fill_(INPUT)
            return
        s = self._bytes(source)  # an element's state: its least byte's (a copy may change the dtype, or broadcast)
        state = torch.full(source.shape, INPUT, dtype=torch.uint8) if s is None else s.min(-1).values
        b.copy_(state.expand(t.shape).unsqueeze(-1).expand(b.shape))

    def after_launch(self, tensors) -> None:
        """After a launch that ran a sample: what its skipped programs might have written is no longer good to read
        in the storages it was given (a zero fill, the input an op writes in place); what sampled programs wrote
        stays."""
        for t in tensors:
            self._expose(t)  # a later launch may read what this one wrote (all of it, had it run whole)
        if not self.launch_sampled:
            return
        for t in tensors:
            for part in self._state_bytes_of(t):
                part[part == INPUT] = INVALID

    def widen(self) -> None:
        """A program of a launch given a partly written storage read an invalid byte (a second kernel summing the
        first's partial results, on another grid): the launch runs every program from here on, and each that reads
        only valid bytes makes valid output, so the sampled rows come through whatever the grids. What the sampled
        part's atomics marked invalid stays so (fewer values compared, never a wrong one)."""
        self.left += self.unvisited
        self.unvisited = 0
        self.may_widen = self.launch_sampled = False
        self.widened_at = time.thread_time()
        self.notes.append("a launch that read partial results ran whole")

    def stop_widened(self) -> None:
        """A widened launch has run `widen_within_s` (verify.widen_within_s): the programs it has not started are
        left out, as a sample's are (they were visited in a random order; what they would have written is not good
        to read), so that a second GEMM reading a first's scattered rows (a fused MoE's sorted tiles) does not run
        all of its grid for the few programs that read only valid rows."""
        self.unvisited += self.left
        self.left = 0
        self.launch_sampled = True
        self.widened_at = 0.0
        self.notes.append(f"a launch that read partial results ran {self.widen_within_s:g} s, then stopped")

    def finish(self) -> bool:
        """The launch under way ran its sample: run the rest of its grid now where, at the sample's pace, what
        it would leave out, with what the call's earlier launches left out or ran so, takes at most
        `finish_within_s` (verify.whole_within_s): the call would run again whole for that (replay.repeat_sampled),
        and the sample's programs would run twice. Not where the call runs again whole anyway (a drawn program
        read what only skipped programs would have written; a sampled launch's atomics)."""
        pace = (time.thread_time() - self.began) / max(1, self.ran)
        if (not self.unvisited or self.widened_at or self.drawn_tainted or self.atomic
                or self.skipped_s + self.finished_s + pace * self.unvisited > self.finish_within_s):
            return False
        self.finished_s += pace * self.unvisited
        self.left, self.unvisited = self.unvisited, 0
        self.launch_sampled = False
        return True

    def sample_ran(self) -> None:
        """The launch under way ran its sample: the programs it leaves out, and their time at the sample's pace
        (a call whose skipped programs would take little runs again whole: autotune.verify.device.replay)."""
        if self.unvisited:
            self.skipped += self.unvisited
            self.skipped_s += (time.thread_time() - self.began) / max(1, self.ran) * self.unvisited

    def _expose(self, t: torch.Tensor) -> None:
        storage = t.untyped_storage()
        first, end = storage.data_ptr(), storage.data_ptr() + storage.nbytes()
        self.exposed.update(start for start, stop, _ in self.state_maps if start < end and first < stop)

    def read(self, addrs: np.ndarray, width: int) -> None:
        """A program of the launch reads these bytes: one that nothing valid wrote taints it (and widens a launch
        given a partly written storage); one that nothing could have written yet is an UnwrittenRead."""
        if not self.tainted:
            self.tainted = self._invalid_read(addrs, width)
            self.drawn_tainted |= self.tainted and self.in_draw
        if self.tainted and self.may_widen and self.unvisited:
            self.widen()

    def _atomic(self, addrs: np.ndarray) -> None:
        if self.launch_sampled:
            self.atomic.update(start for start, _, _, _ in self._locate(addrs))

    def _mark(self, addrs: np.ndarray, width: int, value: int) -> None:
        for start, end, states, offs in self._locate(addrs):
            for w in range(width):
                states[np.minimum(offs + w, end - start - 1)] = value

    def _state_bytes_of(self, t: torch.Tensor) -> list[np.ndarray]:
        """The state bytes of `t`'s storage (views into each tracked storage it overlaps)."""
        storage = t.untyped_storage()
        first, end = storage.data_ptr(), storage.data_ptr() + storage.nbytes()
        return [states[max(first, start) - start:min(end, stop) - start]
                for start, stop, states in self.state_maps if start < end and first < stop]

    def atomics_into(self, t: torch.Tensor) -> bool:
        """Whether a sampled launch updated `t`'s storage with atomics: what the skipped programs would have added
        is unknown, so its elements are never compared from a sample, and the call runs whole instead."""
        storage = t.untyped_storage()
        first, end = storage.data_ptr(), storage.data_ptr() + storage.nbytes()
        return any(start in self.atomic for start, stop, _ in self.state_maps if start < end and first < stop)

    def _partly_valid(self, t: torch.Tensor) -> bool:
        return any(0 < np.count_nonzero(part) < part.size for part in self._state_bytes_of(t))

    def _invalid_read(self, addrs: np.ndarray, width: int) -> bool:
        invalid = False
        for start, _, states, offs in self._locate(addrs):
            if not states[offs].all():
                if start not in self.exposed:
                    raise UnwrittenRead(_unwritten(start + int(offs[~states[offs].astype(bool)][0])))
                invalid = True
        return invalid

    def _locate(self, addrs: np.ndarray):
        if not self.state_maps or addrs.size == 0:
            return
        which = np.searchsorted(np.array(self.starts, dtype=np.uint64), addrs, side="right").astype(np.intp) - 1
        for k in np.unique(which[which >= 0]):
            start, end, states = self.state_maps[k]
            sel = (which == k) & (addrs < np.uint64(end))
            if sel.any():
                yield start, end, states, (addrs[sel] - np.uint64(start)).astype(np.intp)

    # programs ---------------------------------------------------------------------------------------
    def _draw(self, n: int) -> np.ndarray:
        """`programs` indices of an axis of length n drawn afresh per call, and the last besides (where a grid's tail
        lives: a ragged last tile, the stream-K remainder, rows a rounded-down grid leaves), and EDGES drawn from the
        edges of power-of-two chunks, 2^k - 1 and 2^k from 32 up: a kernel that walks its rows, sequences or tiles
        in chunks of a power of two is wrong first at a chunk's last or the next one's first (a stop 48 attacker's
        search of cu_seqlens_q by chunks of 512 sequences lost the last of each: 1 program in 1024, and 1 in 5 of
        a call's samples run it). The last alone would be a sample a kernel could predict."""
        others = self.rng.choice(n - 1, self.programs, replace=False)
        edges = [e for k in range(5, n.bit_length()) for e in (2 ** k - 1, 2 ** k) if e < n - 1]
        edge = self.rng.choice(edges, min(EDGES, len(edges)), replace=False) if edges else np.zeros(0, np.int64)
        return np.unique(np.concatenate([others, [n - 1], edge]).astype(np.int64))

    def order(self, grid: tuple[int, int, int], args=()) -> np.ndarray | None:
        """The linear ids of the programs to run, in a random order; None to run the whole grid (an axis no
        longer than `whole_up_to`). Along the longest axis whose length an earlier
        launch of the call sampled, else the longest: a second kernel over the first's rows (one program per token,
        then per token and column block) runs the rows the first wrote, not a sample across them that reads what it
        skipped. A launch given a storage that sampled programs left partly written may widen to the whole grid
        (`widen`)."""
        seen = [a for a in range(3) if grid[a] in self.indices]
        axis = max(seen, key=lambda a: grid[a]) if seen else int(np.argmax(grid))
        n = grid[axis]
        self.may_widen = any(self._partly_valid(a) for a in args if isinstance(a, torch.Tensor))
        if n <= self.whole_up_to:
            self.launch_sampled = False
            return None
        if n not in self.indices:  # drawn once per call for each axis length
            self.indices[n] = self._draw(n)
        chosen = self.indices[n]
        coords = np.meshgrid(*[chosen if a == axis else np.arange(grid[a]) for a in range(3)], indexing="ij")
        ids = (coords[0] * grid[1] + coords[1]) * grid[2] + coords[2]
        self.launch_sampled = True
        self.notes.append(f"{len(chosen)} of {n} along grid axis {axis}")
        return self.rng.permutation(ids.reshape(-1))


def _unwritten(address: int) -> str:
    launch = interp.current_launch()
    kernel = launch.kernel if launch is not None else "a kernel"
    args = launch.args.items() if launch is not None else ()
    names = [n for n, a in args if isinstance(a, torch.Tensor) and 0 <= address - a.untyped_storage().data_ptr()
             < a.untyped_storage().nbytes()]
    where = f"`{names[0]}`" if names else "a tensor"
    return (f"kernel `{kernel}` read {where} where nothing had written (an output or scratch read before it is "
            "written: on a GPU it holds whatever the memory held; write it first, or fill it with torch.zeros)")


def _width(handle) -> int:
    return max(1, handle.get_element_ty().primitive_bitwidth // 8)


def _lanes(ptrs, mask) -> np.ndarray:
    p = np.asarray(ptrs.data, dtype=np.uint64)
    if mask is None:
        return p.reshape(-1)
    return p[np.broadcast_to(np.asarray(mask.data, dtype=bool), p.shape)]


def program_tainted() -> bool:
    """Whether the program under way read bytes only skipped programs would have written (a sample's partial results):
    what it computes from them is not compared, and its accesses say nothing of the whole launch's (the race
    detector leaves them out: installed before this module, its hooks run after these)."""
    return bool(_active) and _active[-1].tainted


def install() -> None:
    """Run only a sample's programs and track what they wrote (autotune.verify.interp.install)."""
    builder = interpreter.InterpreterBuilder
    if getattr(builder, "_autotune_sampling", False):
        return
    set_dim, set_idx = builder.set_grid_dim, builder.set_grid_idx
    load, store = builder.create_masked_load, builder.create_masked_store
    rmw, cas = builder.create_atomic_rmw, builder.create_atomic_cas

    def set_grid_dim(self, nx, ny, nz):
        set_dim(self, nx, ny, nz)
        s = _active[-1] if _active else None
        if s is None:
            return
        launch = interp.current_launch()
        order = s.order((nx, ny, nz), launch.args.values() if launch is not None else ())
        s.left = nx * ny * nz if order is None else len(order)
        s.unvisited = nx * ny * nz - s.left
        s.drawn = 0 if order is None else len(order)
        s.began, s.ran, s.widened_at = 0.0, 0, 0.0
        if order is not None:  # the permuted loop (autotune.verify.interp.launch) visits these first, then stops
            rest = s.rng.permutation(np.setdiff1d(np.arange(nx * ny * nz), order))  # run only if it widens
            self._autotune_order = np.concatenate([order, rest])

    def set_grid_idx(self, x, y, z):
        s = _active[-1] if _active else None
        if s is not None:
            if s.widened_at and s.widen_within_s and time.thread_time() - s.widened_at > s.widen_within_s:
                s.stop_widened()
            if s.left <= 0 and not s.finish():
                s.sample_ran()
                raise _Done()
            s.left -= 1
            s.ran += 1
            # this thread's time from the first program on: not the launch's set-up, nor the compiler beside it
            s.began = s.began or time.thread_time()
            s.tainted = False
            s.in_draw, s.drawn = s.drawn > 0, max(0, s.drawn - 1)
        return set_idx(self, x, y, z)

    @functools.wraps(load)
    def masked_load(self, ptrs, mask, other, cache_policy, is_volatile):
        s = _active[-1] if _active else None
        if s is not None and not s.tainted and s.state_maps:
            s.read(_lanes(ptrs, mask), _width(ptrs))
        return load(self, ptrs, mask, other, cache_policy, is_volatile)

    @functools.wraps(store)
    def masked_store(self, ptrs, value, mask, cache_policy):
        s = _active[-1] if _active else None
        if s is not None and s.state_maps:
            s._mark(_lanes(ptrs, mask), _width(ptrs), INVALID if s.tainted else WRITTEN)
        return store(self, ptrs, value, mask, cache_policy)

    @functools.wraps(rmw)
    def atomic_rmw(self, rmw_op, ptr, val, mask, sem, scope):
        s = _active[-1] if _active else None
        if s is not None and s.state_maps:
            lanes = _lanes(ptr, mask)
            s.read(lanes, _width(ptr))
            s._mark(lanes, _width(ptr), INVALID if (s.tainted or s.launch_sampled) else WRITTEN)
            s._atomic(lanes)
        return rmw(self, rmw_op, ptr, val, mask, sem, scope)

    @functools.wraps(cas)
    def atomic_cas(self, ptr, cmp, val, sem, scope):
        s = _active[-1] if _active else None
        if s is not None and s.state_maps:
            lanes = _lanes(ptr, None)
            s.read(lanes, _width(ptr))
            s._mark(lanes, _width(ptr), INVALID if (s.tainted or s.launch_sampled) else WRITTEN)
            s._atomic(lanes)
        return cas(self, ptr, cmp, val, sem, scope)

    builder.set_grid_dim, builder.set_grid_idx = set_grid_dim, set_grid_idx
    builder.create_masked_load, builder.create_masked_store = masked_load, masked_store
    builder.create_atomic_rmw, builder.create_atomic_cas = atomic_rmw, atomic_cas
    builder._autotune_sampling = True


def program_context() -> tuple[bool, bool] | None:
    """Whether the program under way is tainted and one of the drawn (interp.interleave saves this when it stops
    the program)."""
    return (_active[-1].tainted, _active[-1].in_draw) if _active else None


def enter_program_context(context: tuple[bool, bool] | None) -> None:
    if _active and context is not None:
        _active[-1].tainted, _active[-1].in_draw = context


def ended_by_sample(e: BaseException) -> bool:
    """Whether a launch stopped because its sample had run (not an error)."""
    return interp.caused_by(e, _Done)
