"""The device's frames to the judge: `Frame` records; the judge's reader checks each against its derived schema."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import torch

from autotune.sandbox.schema import ERROR_CHARS, DictOf, Either, Int, ListOf, Schema, Text
from autotune.verify.protocol.records import Nested, Record, spec


class Frame(Record):
    """A frame: a record with a kind. `keep`: the reader keeps "all" frames of the kind or the "first" only."""

    kind: ClassVar[str]
    keep: ClassVar[str] = "all"

    @classmethod
    def schema(cls) -> Schema:
        f = cls.fields_spec()
        return Schema(cls.kind, f.fields, f.optional, cls.keep)

    def send(self, send: Any) -> None:
        """Through the sandbox runner's `send(kind, **fields)`."""
        send(self.kind, **self.wire())


_TENSORS = ListOf(Either(None, torch.Tensor), max_len=64)
_PAIRS = ListOf(ListOf(Int(), max_len=2, min_len=2), max_len=4096)
_OPS = DictOf(Text(200), Int(0), max_len=10_000)
_ERROR = Text(ERROR_CHARS)
_REFUSED = ListOf(Text(200), max_len=200)


@dataclasses.dataclass(frozen=True)
class CallOutcome(Record):
    """One call of a case as the device ran it: the outputs, each input the op writes in place as the call left it
    (None for the others), and which of the others the call changed (compared bitwise, where they lie, with the
    values the case sent: a read-only input does not travel back)."""

    outputs: list = spec(_TENSORS)
    inputs_after: list = spec(_TENSORS)
    inputs_changed: list = spec(ListOf(Int(0), max_len=64), [])


@dataclasses.dataclass(frozen=True)
class CaseStart(Frame):
    kind: ClassVar[str] = "case_start"
    index: int = spec(Int(0))


@dataclasses.dataclass(frozen=True)
class CaseEvidence(Frame):
    """A case's evidence: the first call's outputs and inputs after it, and the same for the repeat on the same
    inputs and the call after the refill when the case made them; how each output and input was laid out."""

    kind: ClassVar[str] = "case_result"
    index: int = spec(Int(0))
    first: CallOutcome = spec(Nested(CallOutcome, nullable=False))
    output_types: list = spec(ListOf(Text(100), max_len=64))
    launches: list = spec(ListOf(Int(0), max_len=3))  # per call
    output_strides: list = spec(ListOf(Either(None, [int]), 64))
    aliased: list = spec(_PAIRS)  # (output, input) pairs sharing memory
    reused: list = spec(_PAIRS)  # (call, output) pairs handed a storage kept from an earlier call
    clobbered: bool = spec(bool)  # a later call overwrote an output of the first
    guards_broken: list = spec([int])
    torch_ops: dict = spec(_OPS)
    long_calls: int = spec(Int(0))
    long_differs: int | None = spec(Either(None, Int(0)))
    repeat: CallOutcome | None = spec(Nested(CallOutcome), None)
    refill: CallOutcome | None = spec(Nested(CallOutcome), None)
    output_valid: list | None = spec(_TENSORS, None)  # a range case: which output elements its sample wrote
    inputs_written: list | None = spec(_TENSORS, None)  # ... and which elements of the inputs it writes
    sampled: str | None = spec(Text(500), None)
    # a sampled case too slow to run again whole (verify.rerun_within_s): the whole call's time at the sample's pace
    whole_estimate_s: float | None = spec(Either(None, float), None)
    # the input precisions (Triton's names: tf32, tf32x3, bf16x3 ...) at which the case's launches took fp32 tl.dot
    # operands below IEEE, and "half-precision operands" for a dot on fp16/bf16/fp8 tiles, from the compiled TTIR:
    # the judge holds an fp32 case with only the former to that precision's accuracy
    fp32_dots: list = spec(ListOf(Text(60), max_len=8), [])
    fused: bool = spec(bool, False)  # this case drew fp contraction: every multiply feeding an add one fma


@dataclasses.dataclass(frozen=True)
class CompileError(Frame):
    kind: ClassVar[str] = "compile_error"
    keep: ClassVar[str] = "first"
    error: str = spec(_ERROR)
    defence_refused: list = spec(_REFUSED, [])  # what the run-time defence refused (its record, not the text)


@dataclasses.dataclass(frozen=True)
class CaseError(Frame):
    """A case (or a dry call) raised. The flags say what the error is: a kernel that does not compile, a defence
    switched off (`tampered`), a rule broken (`refused`), an access outside its tensors, a race."""

    kind: ClassVar[str] = "case_error"
    keep: ClassVar[str] = "first"
    index: int | None = spec(Either(None, Int(0)))
    error: str = spec(_ERROR)
    compile: bool = spec(bool, False)
    tampered: bool = spec(bool, False)
    refused: bool = spec(bool, False)
    out_of_bounds: bool = spec(bool, False)
    dry: bool = spec(bool, False)
    race: str = spec(_ERROR, "")
    defence_refused: list = spec(_REFUSED, [])  # as CompileError's


@dataclasses.dataclass(frozen=True)
class FirstError(Frame):
    """A failure that ends the worker's run: only the first frame of its kind is kept."""

    keep: ClassVar[str] = "first"
    error: str = spec(_ERROR)


@dataclasses.dataclass(frozen=True)
class SetupError(FirstError):
    """The worker could not set up (no GPU inside the sandbox): not the candidate's fault."""

    kind: ClassVar[str] = "setup_error"


@dataclasses.dataclass(frozen=True)
class PolicyError(FirstError):
    """The device refused to build a kernel (the kernel half of the allow-list)."""

    kind: ClassVar[str] = "policy_error"


@dataclasses.dataclass(frozen=True)
class HostProtocol(FirstError):
    """The host broke the protocol (a malformed or unknown frame)."""

    kind: ClassVar[str] = "host_protocol"


@dataclasses.dataclass(frozen=True)
class HostGone(Frame):
    kind: ClassVar[str] = "host_gone"
    keep: ClassVar[str] = "first"


@dataclasses.dataclass(frozen=True)
class HostIsolation(Frame):
    kind: ClassVar[str] = "host_isolation"
    keep: ClassVar[str] = "first"
    report: dict = spec(DictOf(Text(40), Text(300), max_len=20))


@dataclasses.dataclass(frozen=True)
class Coverage(Frame):
    """The launch signatures seen at served shapes that no compared case ran, and autotune configurations never
    run (each at most 20, named)."""

    kind: ClassVar[str] = "coverage"
    keep: ClassVar[str] = "first"
    uncovered: list = spec(ListOf(DictOf(Text(40), Either(Int(0), Text(500)), max_len=4), max_len=20))
    configs_not_run: list = spec(ListOf(DictOf(Text(40), Text(500), max_len=4), max_len=20))
    signatures_run: int = spec(Int(0))


@dataclasses.dataclass(frozen=True)
class DryUncovered(Frame):
    """The dry calls at served shapes whose launches no case ran so far (the first to make each such launch): the judge
    adds cases at their shapes. `alike[i]`: the probes (dry calls at smaller shapes, `DryItem.probe`) that made
    dry_index[i]'s launch too: a case at one of those runs it for less."""

    kind: ClassVar[str] = "dry_uncovered"
    keep: ClassVar[str] = "first"
    dry_index: list = spec(ListOf(Int(0), max_len=20))
    alike: list = spec(ListOf(ListOf(Int(0), max_len=64), max_len=20), [])


@dataclasses.dataclass(frozen=True)
class ImportOps(Frame):
    """The aten ops the candidate's module ran while it was imported."""

    kind: ClassVar[str] = "import_ops"
    keep: ClassVar[str] = "first"
    torch_ops: dict = spec(_OPS)


@dataclasses.dataclass(frozen=True)
class AuditLog(Frame):
    kind: ClassVar[str] = "audit_log"
    keep: ClassVar[str] = "first"
    denied: list = spec(ListOf(Text(500), max_len=10_000))


@dataclasses.dataclass(frozen=True)
class Result(Frame):
    kind: ClassVar[str] = "result"
    keep: ClassVar[str] = "first"
    payload: dict = spec(DictOf(str, Int(0), max_len=4))


DEVICE_FRAMES: tuple[type[Frame], ...] = (CaseStart, CaseEvidence, CompileError, CaseError, SetupError, PolicyError,
                                          HostProtocol, HostGone, HostIsolation, Coverage, DryUncovered, ImportOps,
                                          AuditLog, Result)
_BY_KIND = {f.kind: f for f in DEVICE_FRAMES}


def device_schemas() -> list[Schema]:
    """What the judge's reader checks each device frame against."""
    return [f.schema() for f in DEVICE_FRAMES]


def parse(frame: dict) -> Frame | None:
    """The record of a frame that passed its schema; None for the sandbox runner's own kinds."""
    kind = _BY_KIND.get(frame.get("kind", ""))
    return kind.from_wire({k: v for k, v in frame.items() if k != "kind"}) if kind is not None else None

