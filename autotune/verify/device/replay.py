"""Replaying the host's calls on the real data: each reported launch is compiled by Triton's front end for sm_90
(autotune.verify.device.frontend), then interpreted with every access checked to lie inside its launch's tensor
arguments, and counted here, where the candidate cannot reach the count; allocations, copies and zero fills are
repeated; any other aten op is torch math, not run (its result is the host's NaN stand-in). A case's long run of
calls is compared by its events, not run: on a deterministic device the same events give the same outputs."""

from __future__ import annotations

import dataclasses
import secrets
import time
from typing import Any

import numpy as np
import torch
import triton.language as tl

from autotune.verify import protocol
from autotune.verify.device.buffers import Buffers, Placed, Refused, place, storage_span
from autotune.verify.device.coverage import Account
from autotune.verify.device.evidence import CaseRecord, aliased, outputs, reused, trace
from autotune.verify.device.frontend import FrontEnd
from autotune.verify.interp import bounds, contract
from autotune.verify.interp.launch import caused_by
from autotune.verify.interp.sampling import INPUT, Abandoned, Sample, ended_by_sample
from autotune.verify.protocol import same_bits

MAX_EVENTS_PER_CALL = protocol.MAX_EVENTS_PER_CALL
_TL_DTYPES = {str(getattr(tl, n)): getattr(tl, n) for n in dir(tl) if isinstance(getattr(tl, n), tl.dtype)}
ALLOCATING = frozenset({"aten.empty", "aten.empty_like", "aten.empty_strided", "aten.new_empty",
                        "aten.new_empty_strided", "aten.zeros", "aten.zeros_like", "aten.new_zeros", "aten.clone",
                        "aten.contiguous", "aten._to_copy"})
ZEROING = frozenset({"aten.zeros", "aten.zeros_like", "aten.new_zeros"})
COPYING = frozenset({"aten.clone", "aten.contiguous", "aten._to_copy"})


CUDA_GRID_YZ = 65535  # gridDim.y and gridDim.z limit (CUDA programming guide, compute capability table)


class LaunchLimit(RuntimeError):
    """A launch a GPU refuses: a grid beyond CUDA's limits (checked at every launch, the dry calls at served shapes
    included, which carry the served grid)."""


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
        # the front end on a GPU too: it is where a case learns the precision of its fp32 tl.dot (TTIR); 0.03 s each
        self.front = FrontEnd(kernels.compiled)
        self.cases: dict[int, protocol.CaseItem] = {}  # the case the judge sent last (one at a time)
        self.buffers = Buffers()
        self.kept: list[tuple[torch.Tensor, torch.Tensor]] = []  # every output of the run and its first bits
        self.placed: list[Placed | None] = []
        self.case: Any = None  # the judge's record of the case under way (protocol.CaseItem), None between cases
        self.record = CaseRecord(-1, [])
        self.first_outs: list = []
        self.long_trace: list | None = None  # the first long call's (autotune.verify.judge: Case.long)
        self.account = Account(kernels, self.value)
        self.dry_probe = False  # the dry call under way is a probe (protocol.DryItem.probe: the judge's word)

    # ------------------------------------------------------------------------------------------ calls
    def on_call(self, msg: protocol.Call) -> bool:
        """One call reported by the host (its envelope checked by protocol.parse_host_frame, its events and
        references here); True when the case is finished (its result sent, or a dry call noted)."""
        events = msg.events
        if msg.dry:
            for ev in events:
                if isinstance(ev, dict) and "launch" in ev:
                    self.account.seen_dry(self.parse_launch(ev, resolve=False), msg.index, self.dry_probe)
            return True
        index, k = msg.index, msg.call
        if k == 0:
            self.start_case(index, msg.inputs)
        elif self.case is None or index != self.case.index or k != self.record.calls_seen:
            raise protocol.ProtocolError(f"call {k!r} of case {index!r} out of order")
        self.record.calls_seen += 1
        kind = self.case.sequence[k] if k < len(self.case.sequence) else "long"
        if kind == "long":
            self.compare_trace(k, events, msg.outputs)
        else:
            self.run_call(kind, events, msg)
        if self.record.calls_seen == self.case.calls:
            self.finish_case()
            return True
        return False

    def start_case(self, index, inputs) -> None:
        case = self.cases.get(index)
        if case is None or not isinstance(inputs, list) or len(inputs) != len(case.args):
            raise protocol.ProtocolError(f"a call for an unknown case {index!r}")
        protocol.CaseStart(index).send(self.send)
        fused = contract.draw()  # this case's fp contraction: every multiply-then-add fused, or none
        self.case, self.long_trace = case, None
        self.buffers.now = ("call", index, 0)
        self.placed = [place(a, case.front_guard, index) if isinstance(a, torch.Tensor) else None
                       for a in case.args]
        for value, p in zip(inputs, self.placed):
            if p is None:
                continue
            ref = protocol.check_ref(value)
            want = protocol.TensorRef(ref.ptr, p.buffer.nbytes, p.place.layout()[1], p.place.shape, p.place.stride,
                                  p.place.dtype)
            if ref != want:
                raise protocol.ProtocolError(f"the host's input {ref} is not where the case put it ({want})")
            self.buffers.bind(ref, p.buffer)
        self.record = CaseRecord(index, inputs, fused=fused)

    def args_now(self) -> list:
        return [p.inner if p is not None else a for p, a in zip(self.placed, self.case.args)]

    def restore(self, values: list) -> None:
        for p, new in zip(self.placed, values):
            if p is not None:
                p.inner.copy_(new)

    def run_call(self, kind: str, events: list, msg: protocol.Call) -> None:
        k = self.record.calls_seen - 1
        self.buffers.now = ("call", self.case.index, k)
        if kind == "repeat":
            self.restore(self.case.args)
        elif kind == "refill":
            self.restore(self.case.refill_args)
        launches, outs, types = self.repeat_sampled(events, msg) if self.case.sample else (
            self.repeat_events(events), *outputs(self.buffers, msg.outputs))
        r = self.record
        r.record_ops(msg.torch_ops)
        snapshot = [o.detach().clone() if o is not None else None for o in outs]
        sent = self.case.refill_args if kind == "refill" else self.case.args  # what the call was given
        written = set(self.case.mutates)
        r.calls[kind] = protocol.CallOutcome(
            snapshot, [p.inner.detach().clone() if p is not None and i in written else None
                       for i, p in enumerate(self.placed)],
            [i for i, p in enumerate(self.placed) if p is not None and i not in written
             and not same_bits(sent[i], p.inner)])
        r.launches.append(launches)
        r.aliased += aliased(outs, self.placed)
        r.reused += reused(outs, k, self.kept)
        if kind == "first":
            r.output_types = types
            r.output_strides = [list(o.stride()) if o is not None else None for o in outs]
            self.first_outs = list(zip(outs, snapshot))

    def repeat_sampled(self, events: list, msg: protocol.Call) -> tuple[int, list, list[str]]:
        """A range case's call (its only one: range cases make no repeat or refill): each launch runs a drawn
        sample of its programs (autotune.verify.interp.sampling), and only what they wrote is compared (of an input
        the op writes in place: what they wrote there). Every output is compared where no launch left a program
        out. A call of one launch runs the rest of its grid after its sample where that takes at most
        `verify.whole_within_s` at the sample's pace (Sample.finish); the call runs again whole when the skipped
        programs would take at most that at their samples' pace (a grid that leaves outputs unwritten, as a
        persistent kernel's rounded-down share does, shows then), and when nothing the sample wrote can be compared
        alone (a split-K sum with atomics spread over every program of the longest axis) unless that would take the
        interpreter more than `verify.rerun_within_s` at the sample's pace: then what the sample wrote is compared
        and the evidence says how long the whole call would take (`whole_estimate_s`), so that the judge runs it
        whole at a smaller size instead (a fused MoE's second GEMM and its sum read the first's sorted tiles, which
        a sample leaves scattered: 3 minutes of the interpreter for 682 tokens of 4096 channels)."""
        rng = np.random.default_rng(secrets.randbits(64))
        began = time.thread_time()
        in_place = [(i, self.placed[i]) for i in self.case.mutates if self.placed[i] is not None]
        before = [(p, p.inner.clone()) for _, p in in_place]
        outs: list = []
        kernels = sum(isinstance(ev, dict) and "launch" in ev for ev in events)
        # a call of one launch runs the rest of its grid at once where cheap: in one of more, an earlier launch
        # run so would be time lost where a later one stays sampled
        finish_within_s = self.case.whole_within_ms / 1000 if kernels == 1 else 0.0
        # and in one of more that may run again whole, an axis the sample would hold half of runs whole at once: a
        # sample saves at most half there, and the call's rerun costs it whole again (a fused MoE's 4-token calls)
        whole_if_half = kernels > 1 and bool(self.case.whole_within_ms)
        with Sample(self.case.sample, rng, self.case.widen_within_ms / 1000, finish_within_s, whole_if_half) as sample:
            self.buffers.sample = sample
            try:
                for _, p in in_place:
                    sample.track(p.buffer.start, p.buffer.nbytes, INPUT)
                launches = self.repeat_events(events)
                outs, types = outputs(self.buffers, msg.outputs)
                valid = [sample.written(o) if o is not None else None for o in outs]
                written = {i: sample.written(p.inner) for i, p in in_place}
            except Exception as e:
                if not caused_by(e, Abandoned):
                    raise
                sample.drawn_tainted = True  # a tainted program's garbage address: see below
            finally:
                self.buffers.sample = None
        if not sample.skipped and not sample.drawn_tainted:
            self.record.sampled = ("every program ran (no launch's grid was longer than its sample, or the rest of it "
                                   "took at most verify.whole_within_s at its sample's pace)")
            return launches, outs, types
        atomics = any(o is not None and sample.atomics_into(o) for o in outs)
        compared = sum(int(v.sum()) for v in valid if v is not None) if outs else 0
        total = sum(v.numel() for v in valid if v is not None) if outs else 0
        cheap = sample.skipped_s * 1000 <= self.case.whole_within_ms
        whole_s = time.thread_time() - began + sample.skipped_s  # the whole call, at the sample's pace
        # a drawn program that read what only skipped programs would have written takes its own stores out of the
        # comparison: a kernel could arrange that for all drawn programs but the grid's last
        must = sample.drawn_tainted or bool(outs and (atomics or compared == 0))
        short = ("a drawn program read what only skipped programs would have written" if sample.drawn_tainted
                 else "a sampled launch added into an output with atomics" if atomics
                 else "nothing the sampled programs wrote could be compared alone" if compared == 0 else "")
        if must and not cheap and outs and self.case.rerun_within_ms and whole_s * 1000 > self.case.rerun_within_ms:
            self.record.whole_estimate_s = round(whole_s, 1)
            self.record.sampled = (f"programs sampled ({'; '.join(dict.fromkeys(sample.notes))}): {short}, and the "
                                   f"whole call would take the interpreter about {whole_s:.0f} s, over "
                                   f"verify.rerun_within_s: {compared} of {total} output values compared here, and "
                                   "the call runs whole at a smaller size")
            self.record.output_valid = valid
            self.record.inputs_written = [written.get(i) for i in range(len(self.placed))]
            return launches, outs, types
        if cheap or must:
            self.record.sampled = (f"{short}: run whole" if short else
                                   f"run whole: its samples' pace put the {sample.skipped} skipped programs at "
                                   f"{sample.skipped_s:.1f} s of the interpreter's time, within verify.whole_within_s")
            for p, value in before:
                p.inner.copy_(value)
            return self.repeat_events(events), *outputs(self.buffers, msg.outputs)
        self.record.sampled = (f"programs sampled ({'; '.join(dict.fromkeys(sample.notes))}, {sample.skipped} "
                               f"programs left out, {sample.skipped_s:.1f} s at the sample's pace): {compared} of "
                               f"{total} output values compared")
        self.record.output_valid = valid
        self.record.inputs_written = [written.get(i) for i in range(len(self.placed))]
        return launches, outs, types

    def finish_case(self) -> None:
        self.front.settle(wait=False, case=self.case.index)  # refusals the compiler's passes have made so far
        clobbered = not all(c is None or same_bits(o, c) for o, c in self.first_outs)
        broken = [i for i, p in enumerate(self.placed) if p is not None and not p.intact()]
        self.record.evidence(self.case.long, clobbered, broken).send(self.send)
        self.case = None

    # ------------------------------------------------------------------------------------------ events
    def repeat_events(self, events: list) -> int:
        """Run the call's launches and data ops in order; the number of launches."""
        launches = 0
        for ev in events:
            if not isinstance(ev, dict):
                raise protocol.ProtocolError("an event that is not a record")
            if "launch" in ev:
                self.launch(self.parse_launch(ev, resolve=True))
                launches += 1
            elif "op" in ev:
                self.data_op(ev)
            else:
                raise protocol.ProtocolError("an event that is neither a launch nor an op")
        return launches

    def data_op(self, ev: dict) -> None:
        name, args, out = ev.get("op"), ev.get("args") or [], ev.get("out")
        if not isinstance(name, str) or not isinstance(args, list):
            raise protocol.ProtocolError("a malformed op")
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
        elif protocol.is_ref(out):  # math in torch (the host's record of the call names it): not run here, so its
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
        if not (isinstance(grid, list) and 1 <= len(grid) <= 3 and all(type(g) is int and 0 <= g < protocol.MAX_GRID
                                                                      for g in grid)):
            raise protocol.ProtocolError("a launch with a malformed grid")
        if any(g > CUDA_GRID_YZ for g in grid[1:]):
            raise LaunchLimit(f"`{name}` launched with grid {tuple(grid)}: CUDA runs at most {CUDA_GRID_YZ} programs "
                              "along grid axes 1 and 2 (2**31 - 1 along axis 0), so on a GPU this launch fails "
                              "('invalid argument'); put the long axis first")
        args, kwargs = ev.get("args"), ev.get("kwargs")
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise protocol.ProtocolError("a launch with malformed arguments")
        value = self.value if resolve else self.value_for_signature
        return Launch(str(name), [value(a) for a in args], {str(k): value(v) for k, v in kwargs.items()}, tuple(grid))

    def value(self, v):
        if protocol.is_ref(v):
            return self.buffers.view(v)
        if isinstance(v, dict) and "tl_dtype" in v and v["tl_dtype"] in _TL_DTYPES:
            return _TL_DTYPES[v["tl_dtype"]]
        if isinstance(v, list) and protocol.scalar_ok(v):
            return tuple(self.value(x) for x in v)
        if protocol.scalar_ok(v):
            return v
        raise protocol.ProtocolError(f"a launch argument the checker cannot pass: {str(v)[:80]}")

    def value_for_signature(self, v):
        if protocol.is_ref(v):
            ref = protocol.check_ref(v)
            return ("tensor", ref.dtype)
        if isinstance(v, list):
            return tuple(self.value_for_signature(x) for x in v)
        return self.value(v)

    def launch(self, launch: Launch) -> None:
        fn = self.kernels.interpreted[launch.kernel]
        self.account.ran(launch)
        case = self.case.index if self.case is not None else None
        self.record.fp32_dots |= self.front.check(launch.kernel, tuple(launch.args), dict(launch.kwargs), case)
        tensors = [a for a in [*launch.args, *launch.kwargs.values()] if isinstance(a, torch.Tensor)]
        failed: Exception | None = None
        with bounds.accesses_within([storage_span(t) for t in tensors], launch.kernel):
            try:
                fn.run(*launch.args, grid=launch.grid, warmup=False, **launch.kwargs)
            except Exception as e:  # noqa: BLE001 - raised below, once the compiler has had its say
                if not ended_by_sample(e):  # the sample had run: the launch stopped there, on purpose
                    failed = e
        # a launch the compiler refuses fails so, whatever the interpreter made of it: one that failed waits for
        # the compiler's passes; the others go on beside them (the case's evidence and the run's end wait)
        self.front.settle(wait=failed is not None, case=case)
        if failed is not None:
            raise failed
        if self.buffers.sample is not None:
            self.buffers.sample.after_launch(tensors)

    def compare_trace(self, k: int, events: list, outputs) -> None:
        """A call of the case's long run, compared with that run's first (not with the case's first call, which
        may tune an autotuned kernel: its benchmark launches happen once per key, as on a GPU)."""
        found = trace(events, outputs, self.record.inputs)
        if self.long_trace is None:
            self.long_trace = found
        elif self.record.long_differs is None and found != self.long_trace:
            self.record.long_differs = k
