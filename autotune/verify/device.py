"""The device process: it holds the cases' real data and runs the candidate's kernels, and alone speaks to the judge.

The checker's sandboxed worker (autotune.verify.worker) forks the candidate's host process first, then reads
the judge's payload: the candidate's source and every case's inputs. It never imports the candidate and never
runs its Python: the kernels are built from the source's syntax tree (autotune.verify.loader) after the kernel
half of the allow-list has passed them. The host reports each call as a list of events (launches and
data-moving aten ops, autotune.verify.host); this process repeats them on its own buffers, which stand for the
host's storages (`Buffers`), and makes the evidence from them:

- every launch is compiled by Triton's front end for sm_90 first (autotune.verify.frontend), then interpreted
  with every access checked to lie inside the storage of one of the launch's tensor arguments; the launches
  are counted here, where the candidate cannot reach the count;
- allocations, copies and zero fills are repeated on the real data; any other aten op the host reports is
  torch math, refused, and not run: its result would be the host's NaN stand-in anyway;
- a call may use its inputs and what it allocated itself: a storage kept from an earlier call is state between
  calls, refused; outputs are compared with the judge's reference by the judge, from the copies sent here;
- a case may end with a long run of calls on the same inputs (thousands): each must report the same events as
  the first, which on a deterministic device means the same outputs, so they are compared, not run;
- launches the host reports at served and preset shapes that no case ran (`dry` calls: recorded, not run) are
  named on the judge's `coverage_check` (it then sends range cases at those shapes) and make the final
  coverage frame: each distinct launch signature (kernel, constexpr values, warps and stages, grid rank,
  pointer dtypes) and each autotune configuration must have run in at least one compared case.

Frames to the judge: `isolation` (this process's and the host's confinement), `import_ops`, `compile_error`,
`case_start`, `case_result`, `case_error`, `dry_uncovered`, `coverage`, and the runner's own.
"""

from __future__ import annotations

import collections
import dataclasses
import secrets
from pathlib import Path

import numpy as np
import torch
import triton.language as tl

from autotune.sandbox.channel import write_all
from autotune.sandbox.runner import trim_traceback
from autotune.verify import bounds, wire
from autotune.verify.frontend import FrontEnd
from autotune.verify.interp import caused_by
from autotune.verify.loader import KernelSourceError, load
from autotune.verify.races import race_in
from autotune.verify.sampling import INPUT, Sample, ended_by_sample

ALIGNMENT = 512  # bytes: what CUDA's caching allocator gives every block, so that no kernel can tell
MAX_EVENTS_PER_CALL = 100_000
HOST_FRAME_BYTES = 64 << 20  # a call's events and references: a few KB; a compile error's traceback: a few KB
TEXT_LIMIT = 4000  # characters of a host's error text passed on to the judge
UNCOVERED_LIMIT = 20  # dry calls (or autotune configurations) named in a coverage account
_TL_DTYPES = {str(getattr(tl, n)): getattr(tl, n) for n in dir(tl) if isinstance(getattr(tl, n), tl.dtype)}
ALLOCATING = frozenset({"aten.empty", "aten.empty_like", "aten.empty_strided", "aten.new_empty",
                        "aten.new_empty_strided", "aten.zeros", "aten.zeros_like", "aten.new_zeros", "aten.clone",
                        "aten.contiguous", "aten._to_copy"})
ZEROING = frozenset({"aten.zeros", "aten.zeros_like", "aten.new_zeros"})
COPYING = frozenset({"aten.clone", "aten.contiguous", "aten._to_copy"})


class Refused(Exception):
    """What the host asked for breaks a rule of the checker (a policy violation, not a crash)."""


@dataclasses.dataclass
class Buffer:
    """The device's memory for one host storage: `nbytes` at a 512-byte aligned address."""

    raw: torch.Tensor  # uint8, nbytes + ALIGNMENT
    shift: int  # bytes from raw's start to the aligned start
    nbytes: int
    born: tuple  # ("input", case) or ("call", case, call)

    @classmethod
    def fresh(cls, nbytes: int, dtype: torch.dtype, born: tuple) -> Buffer:
        raw = torch.empty(nbytes + ALIGNMENT, dtype=torch.uint8)
        shift = (-raw.data_ptr()) % ALIGNMENT
        buf = cls(raw, shift, nbytes, born)
        buf.fill_unwritten(dtype)
        return buf

    @property
    def start(self) -> int:
        return self.raw.data_ptr() + self.shift

    def view(self, ref: wire.TensorRef) -> torch.Tensor:
        dtype = ref.torch_dtype
        if self.shift % dtype.itemsize:
            raise wire.ProtocolError("a view not aligned to its dtype")
        t = torch.empty(0, dtype=dtype)
        t.set_(self.raw.untyped_storage(), self.shift // dtype.itemsize + ref.offset, ref.shape, ref.stride)
        return t

    def fill_unwritten(self, dtype: torch.dtype) -> None:
        """What fresh memory holds under torch's deterministic mode: NaN for floats, the largest value for ints."""
        whole = self.raw[self.shift:self.shift + self.nbytes]
        n = self.nbytes // dtype.itemsize
        if n == 0:
            return
        typed = whole[:n * dtype.itemsize].view(dtype)
        if dtype.is_floating_point:
            typed.fill_(float("nan"))
        elif dtype == torch.bool:
            typed.fill_(True)
        else:
            typed.fill_(torch.iinfo(dtype).max)


class Buffers:
    """Host storage address -> the device's buffer for it."""

    def __init__(self):
        self.by_ptr: dict[int, Buffer] = {}
        self.now: tuple = ()  # ("call", case, call) while a call is repeated
        self.sample: Sample | None = None  # a range case's call: new buffers hold nothing valid until written

    def bind(self, ref: wire.TensorRef, buffer: Buffer) -> None:
        self.by_ptr[ref.ptr] = buffer

    def get(self, ref: wire.TensorRef, fresh: bool = False) -> Buffer:
        """The buffer for this reference; a new one (unwritten memory) for a storage not seen before, or when the
        host says it just allocated it (`fresh`)."""
        buf = self.by_ptr.get(ref.ptr)
        if fresh or buf is None or buf.nbytes != ref.nbytes:
            buf = Buffer.fresh(ref.nbytes, ref.torch_dtype, self.now)
            self.by_ptr[ref.ptr] = buf
            if self.sample is not None:
                self.sample.track(buf.start, buf.nbytes)
        elif buf.born[0] == "call" and buf.born != self.now:
            raise Refused("a call used a tensor kept from an earlier call (a candidate keeps no state between calls: "
                          "allocate what a call needs in that call)")
        elif buf.born[0] == "input" and buf.born[1] != self.now[1]:
            raise Refused("a call used an input of an earlier case (a candidate keeps no state between calls)")
        return buf

    def view(self, value, fresh: bool = False) -> torch.Tensor:
        ref = wire.check_ref(value)
        return self.get(ref, fresh).view(ref)


@dataclasses.dataclass
class Placed:
    """A case's input on the device, where the judge's placement puts it."""

    buffer: Buffer
    inner: torch.Tensor
    outside: torch.Tensor | None  # bool mask of the guard bands and padding (None: not guarded)
    place: wire.Placement

    def intact(self) -> bool:
        if self.outside is None:
            return True
        flat = self.buffer.raw[self.buffer.shift:self.buffer.shift + self.buffer.nbytes].view(self.inner.dtype)
        return bool(torch.isnan(flat[self.outside]).all())


def place(t: torch.Tensor, front: bool, case: int) -> Placed:
    """The judge's laid-out input `t` copied into an aligned buffer with its guard bands (wire.Placement)."""
    p = wire.Placement.of(t, front)
    total, offset = p.layout()
    buf = Buffer.fresh(total * t.element_size(), t.dtype, ("input", case))
    ref = wire.TensorRef(0, buf.nbytes, offset, p.shape, p.stride, p.dtype)
    inner = buf.view(ref)
    inner.copy_(t)
    outside = None
    if p.guarded:
        outside = torch.ones(total, dtype=torch.bool)
        outside.as_strided(p.shape, p.stride, offset).fill_(False)
    return Placed(buf, inner, outside, p)


@dataclasses.dataclass
class Launch:
    kernel: str
    args: list
    kwargs: dict
    grid: tuple[int, ...]


class Device:
    """Repeats the host's calls on the real data (see the module docstring)."""

    def __init__(self, kernels, send, on_gpu: bool):
        self.kernels, self.send, self.on_gpu = kernels, send, on_gpu
        self.front = None if on_gpu else FrontEnd(kernels.compiled)
        self.cases: dict[int, dict] = {}  # the case the judge sent last (one at a time)
        self.buffers = Buffers()
        self.kept: list[tuple[torch.Tensor, torch.Tensor]] = []  # every output of the run and its first bits
        self.placed: list[Placed | None] = []
        self.case: dict | None = None
        self.frame: dict = {}
        self.long_trace: list | None = None  # the first long call's (autotune.verify.judge: Case.long)
        self.executed: set = set()
        self.dry: dict = {}  # signature -> the dry case index it was first seen at
        self.configs: dict[str, list[dict]] = {}
        self.launched_configs: set = set()

    # ------------------------------------------------------------------------------------------ calls
    def on_call(self, msg: dict) -> bool:
        """One call reported by the host; True when the case is finished (its result sent, or a dry call noted)."""
        events = msg.get("events")
        if not isinstance(events, list) or len(events) > MAX_EVENTS_PER_CALL:
            raise wire.ProtocolError("a call with a malformed event list")
        if msg.get("dry"):
            for ev in events:
                if isinstance(ev, dict) and "launch" in ev:
                    self.dry.setdefault(self.signature(self.parse_launch(ev, resolve=False)), msg.get("index"))
            return True
        index, k = msg.get("index"), msg.get("call")
        if k == 0:
            self.start_case(index, msg.get("inputs"))
        elif self.case is None or index != self.case["index"] or k != self.frame["calls_seen"]:
            raise wire.ProtocolError(f"call {k!r} of case {index!r} out of order")
        self.frame["calls_seen"] += 1
        kind = self.case["sequence"][k] if k < len(self.case["sequence"]) else "long"
        if kind == "long":
            self.compare_trace(k, events, msg.get("outputs"))
        else:
            self.run_call(kind, events, msg)
        if self.frame["calls_seen"] == self.case["calls"]:
            self.finish_case()
            return True
        return False

    def start_case(self, index, inputs) -> None:
        case = self.cases.get(index)
        if case is None or not isinstance(inputs, list) or len(inputs) != len(case["args"]):
            raise wire.ProtocolError(f"a call for an unknown case {index!r}")
        self.send("case_start", index=index)
        self.case, self.long_trace = case, None
        self.buffers.now = ("call", index, 0)
        self.placed = [place(a, case["front_guard"], index) if isinstance(a, torch.Tensor) else None
                       for a in case["args"]]
        for value, p in zip(inputs, self.placed):
            if p is None:
                continue
            ref = wire.check_ref(value)
            want = wire.TensorRef(ref.ptr, p.buffer.nbytes, p.place.layout()[1], p.place.shape, p.place.stride,
                                  p.place.dtype)
            if ref != want:
                raise wire.ProtocolError(f"the host's input {ref} is not where the case put it ({want})")
            self.buffers.bind(ref, p.buffer)
        self.frame = {"index": index, "calls_seen": 0, "launches": [], "aliased": [], "reused": [],
                      "torch_ops": collections.Counter(), "output_types": [], "inputs": inputs}

    def args_now(self) -> list:
        return [p.inner if p is not None else a for p, a in zip(self.placed, self.case["args"])]

    def restore(self, values: list) -> None:
        for p, new in zip(self.placed, values):
            if p is not None:
                p.inner.copy_(new)

    def run_call(self, kind: str, events: list, msg: dict) -> None:
        k = self.frame["calls_seen"] - 1
        self.buffers.now = ("call", self.case["index"], k)
        if kind == "repeat":
            self.restore(self.case["args"])
        elif kind == "refill":
            self.restore(self.case["refill_args"])
        launches, outs, types = self.repeat_sampled(events, msg) if self.case.get("sample") else (
            self.repeat_events(events), *self.outputs(msg.get("outputs")))
        self.record_ops(msg.get("torch_ops"))
        key = {"first": "", "repeat": "repeat_", "refill": "refill_"}[kind]
        snapshot = [o.detach().clone() if o is not None else None for o in outs]
        self.frame[f"{key}outputs"] = snapshot
        self.frame[f"{key}inputs_after"] = [p.inner.detach().clone() if p is not None else None for p in self.placed]
        self.frame["launches"].append(launches)
        self.frame["aliased"] += self.aliased(outs)
        self.frame["reused"] += self.reused(outs, k)
        if kind == "first":
            self.frame["output_types"] = types
            self.frame["output_strides"] = [list(o.stride()) if o is not None else None for o in outs]
            self.first_outs = list(zip(outs, snapshot))

    def repeat_sampled(self, events: list, msg: dict) -> tuple[int, list, list[str]]:
        """A range case's call (its only one: range cases make no repeat or refill): each launch runs a drawn
        sample of its programs (autotune.verify.sampling), and only what they wrote is compared (of an input the op
        writes in place: what they wrote there); when nothing they wrote can be (a split-K sum with atomics spread
        over every program of the longest axis), the call runs again whole."""
        rng = np.random.default_rng(secrets.randbits(64))
        in_place = [(i, self.placed[i]) for i in self.case.get("mutates") or () if self.placed[i] is not None]
        before = [(p, p.inner.clone()) for _, p in in_place]
        with Sample(int(self.case["sample"]), rng) as sample:
            self.buffers.sample = sample
            try:
                for _, p in in_place:
                    sample.track(p.buffer.start, p.buffer.nbytes, INPUT)
                launches = self.repeat_events(events)
                outs, types = self.outputs(msg.get("outputs"))
                valid = [sample.written(o) if o is not None else None for o in outs]
                written = {i: sample.written(p.inner) for i, p in in_place}
            finally:
                self.buffers.sample = None
        if outs and not any(v is not None and bool(v.any()) for v in valid):
            self.frame["sampled"] = "nothing the sampled programs wrote could be compared alone: run whole"
            for p, value in before:
                p.inner.copy_(value)
            return self.repeat_events(events), *self.outputs(msg.get("outputs"))
        compared = sum(int(v.sum()) for v in valid if v is not None)
        total = sum(v.numel() for v in valid if v is not None)
        self.frame["sampled"] = (f"programs sampled ({'; '.join(dict.fromkeys(sample.notes)) or 'none needed'}): "
                                 f"{compared} of {total} output values compared")
        self.frame["output_valid"] = valid
        self.frame["inputs_written"] = [written.get(i) for i in range(len(self.placed))]
        return launches, outs, types

    def finish_case(self) -> None:
        f = self.frame
        frame = {"index": f["index"], "outputs": f.get("outputs"), "output_types": f["output_types"],
                 "launches": f["launches"], "output_strides": f.get("output_strides"), "aliased": f["aliased"],
                 "reused": f["reused"], "inputs_after": f.get("inputs_after"),
                 "repeat_outputs": f.get("repeat_outputs"), "repeat_inputs_after": f.get("repeat_inputs_after"),
                 "refill_outputs": f.get("refill_outputs"), "refill_inputs_after": f.get("refill_inputs_after"),
                 "clobbered": not all(c is None or same_bits(o, c) for o, c in self.first_outs),
                 "guards_broken": [i for i, p in enumerate(self.placed) if p is not None and not p.intact()],
                 "torch_ops": dict(f["torch_ops"]), "long_calls": self.case.get("long", 0),
                 "long_differs": f.get("long_differs"), "output_valid": f.get("output_valid"),
                 "sampled": f.get("sampled"), "inputs_written": f.get("inputs_written")}
        for key in ("repeat_outputs", "repeat_inputs_after", "refill_outputs", "refill_inputs_after", "output_valid",
                    "sampled", "inputs_written"):
            if frame[key] is None:  # calls the case did not make
                del frame[key]
        self.send("case_result", **frame)
        self.case = None

    # ------------------------------------------------------------------------------------------ events
    def repeat_events(self, events: list) -> int:
        """Run the call's launches and data ops in order; the number of launches."""
        launches = 0
        for ev in events:
            if not isinstance(ev, dict):
                raise wire.ProtocolError("an event that is not a record")
            if "launch" in ev:
                self.launch(self.parse_launch(ev, resolve=True))
                launches += 1
            elif "op" in ev:
                self.data_op(ev)
            else:
                raise wire.ProtocolError("an event that is neither a launch nor an op")
        return launches

    def data_op(self, ev: dict) -> None:
        name, args, out = ev.get("op"), ev.get("args") or [], ev.get("out")
        if not isinstance(name, str) or not isinstance(args, list):
            raise wire.ProtocolError("a malformed op")
        sample = self.buffers.sample
        if name in ALLOCATING:
            result = self.buffers.view(out, fresh=True)
            if name in ZEROING:
                self._write(result, None)
            elif name in COPYING:
                self._write(result, self.buffers.view(args[0]))
        elif name == "aten.zero_":
            self._write(self.buffers.view(args[0]), None)
        elif name == "aten.copy_":
            self._write(self.buffers.view(args[0]), self.buffers.view(args[1]))
        elif wire.is_ref(out):  # math in torch (the host's record of the call names it): not run here, so its
            self.buffers.view(out, fresh=True)  # result is unwritten memory, as the host's NaN stand-ins made it

    def _write(self, target: torch.Tensor, source: torch.Tensor | None) -> None:
        """A zero fill (no source) or a copy, with its validity carried along in a range case's call."""
        if source is None:
            target.zero_()
        else:
            target.copy_(source)
        sample = self.buffers.sample
        if sample is not None:
            sample.carry(target, source)

    def parse_launch(self, ev: dict, resolve: bool) -> Launch:
        name = ev.get("launch")
        if name not in self.kernels.interpreted:
            raise Refused(f"a launch of `{name}`, which is not a top-level @triton.jit kernel of the file")
        grid = ev.get("grid")
        if not (isinstance(grid, list) and 1 <= len(grid) <= 3 and all(type(g) is int and 0 <= g < wire.MAX_GRID
                                                                      for g in grid)):
            raise wire.ProtocolError("a launch with a malformed grid")
        args, kwargs = ev.get("args"), ev.get("kwargs")
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise wire.ProtocolError("a launch with malformed arguments")
        value = self.value if resolve else self.value_for_signature
        return Launch(name, [value(a) for a in args], {str(k): value(v) for k, v in kwargs.items()}, tuple(grid))

    def value(self, v):
        if wire.is_ref(v):
            return self.buffers.view(v)
        if isinstance(v, dict) and "tl_dtype" in v and v["tl_dtype"] in _TL_DTYPES:
            return _TL_DTYPES[v["tl_dtype"]]
        if isinstance(v, list) and wire.scalar_ok(v):
            return tuple(self.value(x) for x in v)
        if wire.scalar_ok(v):
            return v
        raise wire.ProtocolError(f"a launch argument the checker cannot pass: {str(v)[:80]}")

    def value_for_signature(self, v):
        if wire.is_ref(v):
            ref = wire.check_ref(v)
            return ("tensor", ref.dtype)
        if isinstance(v, list):
            return tuple(self.value_for_signature(x) for x in v)
        return self.value(v)

    def launch(self, launch: Launch) -> None:
        fn = self.kernels.interpreted[launch.kernel]
        self.executed.add(self.signature(launch))
        self.note_config(launch)
        if self.front is not None:
            self.front.check(launch.kernel, tuple(launch.args), dict(launch.kwargs))
        tensors = [a for a in [*launch.args, *launch.kwargs.values()] if isinstance(a, torch.Tensor)]
        with bounds.accesses_within([_storage_span(t) for t in tensors], launch.kernel):
            try:
                fn.run(*launch.args, grid=launch.grid, warmup=False, **launch.kwargs)
            except Exception as e:
                if not ended_by_sample(e):  # the sample had run: the launch stopped there, on purpose
                    raise
        if self.buffers.sample is not None:
            self.buffers.sample.after_launch(tensors)

    def signature(self, launch: Launch) -> tuple:
        """What makes two launches of one kernel the same code path on a GPU: its constexpr values, warps and
        stages, grid rank and pointer dtypes; a configuration among the kernel's @triton.autotune configs left
        out (that every one of them runs somewhere is checked on its own: an autotuner may pick any at a served
        shape), one that is not (a pruner or hook made it) kept in."""
        fn = self.kernels.compiled[launch.kernel]
        params = [p.name for p in fn.params]
        bound = dict(zip(params, launch.args)) | {k: v for k, v in launch.kwargs.items() if k in params}
        listed = self.config_of(launch) is not None
        tuned = {k for c in self.configs.get(launch.kernel, []) for k in (c.get("kwargs") or {})} if listed else ()
        constexprs = tuple((p, _plain(bound.get(p))) for p in self.kernels.constexpr_args[launch.kernel]
                           if p not in tuned)
        dtypes = tuple(_plain(v)[1] for v in bound.values()
                       if isinstance(v, torch.Tensor) or (isinstance(v, tuple) and v[:1] == ("tensor",)))
        options = () if listed else (launch.kwargs.get("num_warps"), launch.kwargs.get("num_stages"))
        return (launch.kernel, constexprs, options, len(launch.grid), dtypes)

    def config_of(self, launch: Launch) -> int | None:
        """The index of the autotune configuration this launch ran with, or None (none listed matches)."""
        for i, config in enumerate(self.configs.get(launch.kernel, [])):
            wanted = config.get("kwargs") or {}
            if all(_plain(launch.kwargs.get(k)) == _plain(self.value(v)) for k, v in wanted.items()) and all(
                    launch.kwargs.get(k) in (None, config.get(k)) for k in ("num_warps", "num_stages")):
                return i
        return None

    def note_config(self, launch: Launch) -> None:
        if (i := self.config_of(launch)) is not None:
            self.launched_configs.add((launch.kernel, i))

    # ------------------------------------------------------------------------------------------ evidence
    def outputs(self, refs) -> tuple[list, list[str]]:
        if not isinstance(refs, list) or len(refs) > 64:
            raise wire.ProtocolError("a malformed list of outputs")
        outs, types = [], []
        for r in refs:
            if wire.is_ref(r):
                outs.append(self.buffers.view(r))
                types.append("Tensor")
            else:
                outs.append(None)
                types.append(str((r or {}).get("type", "object"))[:60] if isinstance(r, dict) else "object")
        return outs, types

    def aliased(self, outs: list) -> list[list[int]]:
        return [[j, i] for j, o in enumerate(outs) for i, p in enumerate(self.placed)
                if o is not None and p is not None and _overlap(o, p.inner)]

    def reused(self, outs: list, call: int) -> list[list[int]]:
        found = []
        for j, o in enumerate(outs):
            if o is None:
                continue
            if any(_overlap(o, kept) for kept, _ in self.kept):
                found.append([call, j])
            self.kept.append((o, o.detach().clone()))
        return found

    def record_ops(self, ops) -> None:
        if isinstance(ops, dict):
            for k, v in list(ops.items())[:200]:
                if isinstance(k, str) and type(v) is int:
                    self.frame["torch_ops"][k[:120]] += v

    def trace(self, events: list, outputs) -> list:
        """The call's events with each storage named by its role (input i, or the n-th other storage), not its
        address: two calls with the same trace compute the same outputs on this device."""
        names: dict[int, str] = {}
        inputs = self.frame["inputs"]
        for i, v in enumerate(inputs):
            if wire.is_ref(v):
                names[wire.check_ref(v).ptr] = f"input {i}"

        def canon(v):
            if wire.is_ref(v):
                ref = wire.check_ref(v)
                role = names.setdefault(ref.ptr, f"storage {len(names)}")
                return (role, ref.offset, ref.shape, ref.stride, ref.dtype)
            if isinstance(v, list):
                return tuple(canon(x) for x in v)
            if isinstance(v, dict):
                return tuple(sorted((str(k), canon(x)) for k, x in v.items()))
            return v

        return [canon(ev) for ev in events] + [("outputs", canon(outputs))]

    def compare_trace(self, k: int, events: list, outputs) -> None:
        """A call of the case's long run, compared with that run's first (not with the case's first call, which
        may tune an autotuned kernel: its benchmark launches happen once per key, as on a GPU)."""
        trace = self.trace(events, outputs)
        if self.long_trace is None:
            self.long_trace = trace
        elif self.frame.get("long_differs") is None and trace != self.long_trace:
            self.frame["long_differs"] = k

    def coverage(self) -> dict:
        uncovered = [{"dry_index": i, "signature": _describe(sig)} for sig, i in self.dry.items()
                     if sig not in self.executed]
        unrun = [{"kernel": name, "config": _describe_config(c)} for name, cs in self.configs.items()
                 for i, c in enumerate(cs) if (name, i) not in self.launched_configs]
        return {"uncovered": uncovered[:UNCOVERED_LIMIT], "configs_not_run": unrun[:UNCOVERED_LIMIT],
                "signatures_run": len(self.executed)}


def _storage_span(t: torch.Tensor) -> tuple[int, int]:
    s = t.untyped_storage()
    return s.data_ptr(), s.data_ptr() + s.nbytes()


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    (a0, a1), (b0, b1) = _storage_span(a), _storage_span(b)
    return a0 < b1 and b0 < a1 and a1 > a0 and b1 > b0


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a is None or a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def _plain(v):
    if isinstance(v, tl.constexpr):
        v = v.value
    if isinstance(v, tl.dtype):
        return str(v)
    if isinstance(v, torch.Tensor):
        return ("tensor", str(v.dtype).removeprefix("torch."))
    if isinstance(v, (list, tuple)):
        return tuple(_plain(x) for x in v)
    return v


def _describe(sig: tuple) -> str:
    kernel, constexprs, options, rank, dtypes = sig
    warps, stages = options or (None, None)
    parts = [f"{k}={v}" for k, v in constexprs] + [f"num_warps={warps}"] * (warps is not None) + [
        f"num_stages={stages}"] * (stages is not None)
    return f"{kernel}[{rank}-D grid]({', '.join(parts)}) on {'/'.join(dict.fromkeys(dtypes))} tensors"


def _describe_config(c: dict) -> str:
    kw = ", ".join(f"{k}={v}" for k, v in (c.get("kwargs") or {}).items())
    return f"triton.Config({{{kw}}}, num_warps={c.get('num_warps')}, num_stages={c.get('num_stages')})"


# ---------------------------------------------------------------------------------------------- the process

def _text(value) -> str:
    return str(value)[-TEXT_LIMIT:] if value is not None else ""


def work(payload: dict, send, links) -> dict:
    """The device's side of the check: build the kernels, then take the judge's cases one by one, hand each
    (without its data) to the host, and repeat what the host reports on the data."""
    torch._C._set_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    on_gpu = payload["device"] == "cuda"
    if on_gpu and not torch.cuda.is_available():
        send("setup_error", error="no GPU is visible inside the isolated process (check /dev/nvidia* permissions "
                                  "for an unprivileged uid, or run with device=cpu)")
        return {"cases_run": 0}
    try:
        kernels = load(payload["source"], Path.cwd() / "kernels.py")
    except (KernelSourceError, SyntaxError) as e:
        send("policy_error", error=f"{e}")
        return {"cases_run": 0}
    except Exception as e:
        send("compile_error", error=trim_traceback(e))
        return {"cases_run": 0}
    device = Device(kernels, send, on_gpu)
    done = 0
    while (frame := links.receive()) is not None:
        if "coverage_check" in frame:  # every case before it is done: which dry calls made a launch none ran
            send("dry_uncovered", dry_index=sorted({i for sig, i in device.dry.items()
                                                    if sig not in device.executed})[:UNCOVERED_LIMIT])
            continue
        item = frame.get("case") or frame.get("dry")
        if "case" in frame:
            device.cases = {item["index"]: item}
        if not _tell_host(links, {"kind": "case", **item["host"]}):
            follow(device, links.from_host, send)  # the host is gone: what it said last says why
            return {"cases_run": done}
        ended = follow(device, links.from_host, send)
        if ended != "case":
            return {"cases_run": done}
        done += "case" in frame
    _tell_host(links, {"kind": "end"})
    follow(device, links.from_host, send)
    return {"cases_run": done}


def _tell_host(links, msg: dict) -> bool:
    """Hand the host a message; False when it is gone."""
    try:
        write_all(links.to_host, wire.encode(msg))
        return True
    except BrokenPipeError:
        return False


def follow(device: Device, host_fd: int, send) -> str:
    """Relay and repeat the host's frames until the case under way is finished ("case"), the host is done
    ("done"), or it fails or breaks the protocol ("stop")."""
    while True:
        try:
            msg = wire.read(host_fd, limit=HOST_FRAME_BYTES)
        except wire.ProtocolError as e:  # a frame that does not decode: the host broke the protocol
            send("host_protocol", error=f"the candidate's process sent a malformed frame: {e}")
            return "stop"
        if msg is None:
            send("host_gone")
            return "stop"
        try:
            ended = _on_host_frame(device, msg, send)
        except wire.ProtocolError as e:
            send("host_protocol", error=str(e)[:TEXT_LIMIT])
            return "stop"
        except Refused as e:
            send("case_error", index=device.case["index"] if device.case else None, refused=True, error=str(e))
            return "stop"
        except BaseException as e:
            send("case_error", index=device.case["index"] if device.case else None, compile=_is_compile_error(e),
                 out_of_bounds=caused_by(e, bounds.OutOfBounds), race=race_in(e),
                 error=trim_traceback(e, keep_files=("kernels.py",)))
            return "stop"
        if ended:
            return ended


def _on_host_frame(device: Device, msg: dict, send) -> str:
    """One frame of the host's, relayed (bounded) or repeated; what it ended ('' for nothing)."""
    kind = msg.get("kind")
    if kind == "call":
        return "case" if device.on_call(msg) else ""
    if kind == "isolation":
        report = msg.get("report") if isinstance(msg.get("report"), dict) else {}
        send("host_isolation", report={str(k)[:40]: _text(v)[:300] for k, v in list(report.items())[:20]})
    elif kind == "import_ops":
        device.configs = _configs(msg.get("autotune"))
        ops = msg.get("torch_ops") if isinstance(msg.get("torch_ops"), dict) else {}
        send("import_ops", torch_ops={str(k)[:120]: v for k, v in list(ops.items())[:200] if type(v) is int})
    elif kind in ("compile_error", "case_error", "error"):
        index = msg.get("index")
        if type(index) is int and index in device.cases and not msg.get("dry") and (
                device.case is None or device.case["index"] != index):
            send("case_start", index=index)  # the host failed before its first report of the case
        if kind == "compile_error":
            send("compile_error", error=_text(msg.get("error")))
        else:
            send("case_error", index=index if type(index) is int else None, dry=bool(msg.get("dry")),
                 tampered=bool(msg.get("tampered")), error=_text(msg.get("error")))
        return "stop"
    elif kind == "host_done":
        send("coverage", **device.coverage())
        return "done"
    elif kind == "audit_log":
        send("audit_log", denied=[_text(d)[:200] for d in (msg.get("denied") or [])[:200]])
    elif kind != "result":
        raise wire.ProtocolError(f"an unknown frame kind {str(kind)[:40]!r}")
    return ""


def _configs(value) -> dict[str, list[dict]]:
    if not isinstance(value, dict):
        return {}
    return {str(k)[:100]: [c for c in v[:256] if isinstance(c, dict)] for k, v in list(value.items())[:64]
            if isinstance(v, list)}


# What Triton's compiler rejects shows up under the interpreter as an InterpreterError caused by one of these
# (measured: a typo `tl.lod` -> AttributeError, an undefined name -> NameError).
_REJECTED_BY_A_COMPILER = ("NameError", "AttributeError", "TypeError", "SyntaxError", "UnboundLocalError",
                           "ImportError", "NotImplementedError", "CompilationError")


def _is_compile_error(e: BaseException) -> bool:
    """The kernel did not compile: Triton's CompilationError (the front end, or a GPU), or the interpreter's
    equivalent."""
    seen, interpreted = set(), False
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        name = type(e).__name__
        if name == "CompilationError" or (interpreted and name in _REJECTED_BY_A_COMPILER):
            return True
        interpreted = interpreted or name == "InterpreterError"
        e = e.__cause__ or e.__context__
    return False
