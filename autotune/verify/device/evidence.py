"""The evidence of a case, assembled as the device repeats its calls: each call's outputs and inputs after it,
launches per call, outputs aliasing inputs or kept from an earlier call, the torch ops the host reported, and the
long run's agreement; sent to the judge as one `protocol.CaseEvidence`."""

from __future__ import annotations

import collections
import dataclasses

import torch

from autotune.verify import protocol
from autotune.verify.device.buffers import Buffers, Placed, overlap


@dataclasses.dataclass
class CaseRecord:
    index: int
    inputs: list  # the host's references to the case's inputs (wire form)
    calls_seen: int = 0
    calls: dict[str, protocol.CallOutcome] = dataclasses.field(default_factory=dict)  # "first", "repeat", "refill"
    launches: list[int] = dataclasses.field(default_factory=list)  # per call
    aliased: list[list[int]] = dataclasses.field(default_factory=list)
    reused: list[list[int]] = dataclasses.field(default_factory=list)
    torch_ops: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    output_types: list[str] = dataclasses.field(default_factory=list)
    output_strides: list = dataclasses.field(default_factory=list)
    long_differs: int | None = None  # the first call of the long run that did not repeat its first
    sampled: str | None = None  # a range case: what its sample compared
    whole_estimate_s: float | None = None  # ... and, where it was too slow to run again whole, the whole call's time
    output_valid: list | None = None
    inputs_written: list | None = None
    fp32_dots: set[str] = dataclasses.field(default_factory=set)  # reduced input precisions of fp32 tl.dot
    fused: bool = False  # the case's draw of fp contraction (interp/contract.py)

    def record_ops(self, ops) -> None:
        if isinstance(ops, dict):
            for k, v in list(ops.items())[:200]:
                if isinstance(k, str) and type(v) is int:
                    self.torch_ops[k[:120]] += v

    def evidence(self, long_calls: int, clobbered: bool, guards_broken: list[int]) -> protocol.CaseEvidence:
        return protocol.CaseEvidence(
            index=self.index, first=self.calls["first"], output_types=self.output_types, launches=self.launches,
            output_strides=self.output_strides, aliased=self.aliased, reused=self.reused, clobbered=clobbered,
            guards_broken=guards_broken, torch_ops=dict(self.torch_ops), long_calls=long_calls,
            long_differs=self.long_differs, repeat=self.calls.get("repeat"), refill=self.calls.get("refill"),
            output_valid=self.output_valid, inputs_written=self.inputs_written, sampled=self.sampled,
            whole_estimate_s=self.whole_estimate_s, fp32_dots=sorted(self.fp32_dots), fused=self.fused)


def outputs(buffers: Buffers, refs) -> tuple[list, list[str]]:
    """The call's outputs on the device (None for a non-tensor) and their type names."""
    if not isinstance(refs, list) or len(refs) > 64:
        raise protocol.ProtocolError("a malformed list of outputs")
    outs: list[torch.Tensor | None] = []
    types: list[str] = []
    for r in refs:
        if protocol.is_ref(r):
            outs.append(buffers.view(r))
            types.append("Tensor")
        else:
            outs.append(None)
            types.append(str((r or {}).get("type", "object"))[:60] if isinstance(r, dict) else "object")
    return outs, types


def aliased(outs: list, placed: list[Placed | None]) -> list[list[int]]:
    """(output, input) pairs whose storages overlap."""
    return [[j, i] for j, o in enumerate(outs) for i, p in enumerate(placed)
            if o is not None and p is not None and overlap(o, p.inner)]


def reused(outs: list, call: int, kept: list[tuple[torch.Tensor, torch.Tensor]]) -> list[list[int]]:
    """(call, output) pairs whose storage an earlier call's output had; every output joins `kept`."""
    found = []
    for j, o in enumerate(outs):
        if o is None:
            continue
        if any(overlap(o, k) for k, _ in kept):
            found.append([call, j])
        kept.append((o, o.detach().clone()))
    return found


def trace(events: list, outputs, inputs: list) -> list:
    """The call's events with each storage named by its role (input i, or the n-th other storage), not its
    address: two calls with the same trace compute the same outputs on this device."""
    names: dict[int, str] = {}
    for i, v in enumerate(inputs):
        if protocol.is_ref(v):
            names[protocol.check_ref(v).ptr] = f"input {i}"

    def canon(v):
        if protocol.is_ref(v):
            ref = protocol.check_ref(v)
            role = names.setdefault(ref.ptr, f"storage {len(names)}")
            return (role, ref.offset, ref.shape, ref.stride, ref.dtype)
        if isinstance(v, list):
            return tuple(canon(x) for x in v)
        if isinstance(v, dict):
            return tuple(sorted((str(k), canon(x)) for k, x in v.items()))
        return v

    return [canon(ev) for ev in events] + [("outputs", canon(outputs))]
