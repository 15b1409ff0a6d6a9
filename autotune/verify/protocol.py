"""Every frame of the checker's processes, defined once: host -> device (tensor references and placements, JSON
frames) and device -> judge (typed records; the judge's reader checks each against the schema derived here).

The host (autotune.verify.host.process) holds tensors with the cases' shapes, strides and storage offsets but none of
their values; the device (autotune.verify.device.process) holds the real data. A tensor is named on the wire by a
`TensorRef`: the host storage's address and size, the view's storage offset, shape, strides and dtype. The
device maps a host storage to its own buffer by the address and never trusts a ref it has not checked
(`check_ref`): a hostile host can send anything, and what it sends can only make its own verdict fail.

Where each input sits in memory is decided by the judge (`Placement`, made from the laid-out case tensor) and
built identically on both sides: a storage with a guard band of NaN after the input and, unless the case wants
storage offset 0, before it (`placement`).

The device's frames to the judge are the `Frame` records below: the device sends `record.wire()`, the judge's
reader checks the dict against `record_type.schema()` (sandbox.schema: types, sizes, text lengths) before the
judge reads it back with `parse`. A field with a default may be left out; nothing else may be.

The host's frames to the device (`HOST_FRAMES`: `Call`, `HostImportOps`, ... and the sandbox runner's own
`Isolation`, `HostError`, `HostResult`), the device's to the host (`HostCase`, `End`) and the judge's stream to the
device (`CaseItem`, `DryItem`, `CoverageCheck`) are `Message` records: the receiver reads each through one
function (`parse_host_frame`, `parse_to_host`, `parse_stream`) that checks every field against its spec. Of a
`Call`, the envelope is typed (index, call, a bounded list of events); its events, input and output references and
op counts are checked by the device's replay as before (`check_ref`, `scalar_ok`, its launch and op parsers).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from autotune.sandbox.channel import encode_json, read_json
from autotune.sandbox.schema import (
    ANY,
    ERROR_CHARS,
    DictOf,
    Either,
    Fields,
    Int,
    ListOf,
    ProtocolError,
    Schema,
    Spec,
    Text,
)

MAX_DIMS = 8
MAX_ELEMENTS = 1 << 40
MAX_BUFFER_BYTES = 16 << 30  # one storage the host may name (the device allocates it)
MAX_GRID = 1 << 31
GUARD_ELEMENTS = 4096  # at least this many elements of guard band on each side of an input (or its width)

DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.uint8, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2, torch.uint16, torch.uint32, torch.uint64)}


@dataclasses.dataclass(frozen=True)
class TensorRef:
    ptr: int  # the host storage's address: its identity for the device
    nbytes: int  # the host storage's size
    offset: int  # storage offset of the view, in elements
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    def to_wire(self) -> dict:
        return {"ref": [self.ptr, self.nbytes, self.offset, list(self.shape), list(self.stride), self.dtype]}


def ref_of(t: torch.Tensor) -> dict:
    """The wire form of a host tensor."""
    s = t.untyped_storage()
    return TensorRef(s.data_ptr(), s.nbytes(), int(t.storage_offset()), tuple(t.shape), tuple(t.stride()),
                     str(t.dtype).removeprefix("torch.")).to_wire()


def is_ref(value) -> bool:
    return isinstance(value, dict) and set(value) == {"ref"}


def check_ref(value) -> TensorRef:
    """A TensorRef from its wire form; ProtocolError unless every field is of the right type and the view lies
    inside its storage."""
    if not is_ref(value) or not isinstance(value["ref"], list) or len(value["ref"]) != 6:
        raise ProtocolError(f"not a tensor reference: {str(value)[:100]}")
    ptr, nbytes, offset, shape, stride, dtype = value["ref"]
    ints = [ptr, nbytes, offset]
    if not all(type(v) is int for v in ints) or dtype not in DTYPES:
        raise ProtocolError("a tensor reference with a bad address, size, offset or dtype")
    if not (isinstance(shape, list) and isinstance(stride, list) and len(shape) == len(stride) <= MAX_DIMS
            and all(type(v) is int for v in shape + stride)):
        raise ProtocolError("a tensor reference with a bad shape or strides")
    if ptr < 0 or not 0 <= nbytes <= MAX_BUFFER_BYTES or offset < 0 or min(shape + stride, default=0) < 0:
        raise ProtocolError("a tensor reference with a negative or oversized field")
    ref = TensorRef(ptr, nbytes, offset, tuple(shape), tuple(stride), dtype)
    if any(d == 0 for d in shape):
        return ref
    last = offset + sum((d - 1) * s for d, s in zip(shape, stride))
    if (last + 1) * ref.torch_dtype.itemsize > nbytes or last >= MAX_ELEMENTS:
        raise ProtocolError(f"a view of {list(shape)} at offset {offset} reaches past its {nbytes}-byte storage")
    return ref


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where one tensor argument of a case sits: `extent` elements of the laid-out tensor's own storage (a view of
    a fused qkv buffer is a slice of a larger one) at `storage_offset`, with guard bands when `guarded`."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int
    extent: int
    dtype: str
    guarded: bool  # floating inputs get NaN guard bands
    front: bool  # and one in front of them, unless the case wants storage offset 0

    @classmethod
    def of(cls, t: torch.Tensor, front: bool) -> Placement:
        return cls(tuple(t.shape), tuple(t.stride()), int(t.storage_offset()),
                   t.untyped_storage().nbytes() // t.element_size(), str(t.dtype).removeprefix("torch."),
                   t.is_floating_point(), front)

    def to_wire(self) -> list:
        return [list(self.shape), list(self.stride), self.storage_offset, self.extent, self.dtype, self.guarded,
                self.front]

    @classmethod
    def from_wire(cls, value) -> Placement:
        shape, stride, offset, extent, dtype, guarded, front = value
        return cls(tuple(shape), tuple(stride), offset, extent, dtype, guarded, front)

    def layout(self) -> tuple[int, int]:
        """(elements of the whole storage, the input's storage offset in it)."""
        if not self.guarded:
            return self.extent, self.storage_offset
        guard = max(GUARD_ELEMENTS, self.shape[-1] if self.shape else 1)
        lead = guard if self.front else 0
        return lead + self.extent + guard, lead + self.storage_offset


def scalar_ok(value, depth: int = 0) -> bool:
    """A launch or case argument that is not a tensor: a number, a string, None, a Triton dtype by name, or a
    short tuple of those."""
    if value is None or type(value) in (int, float, bool):
        return True
    if type(value) is str:
        return len(value) <= 200
    if isinstance(value, dict) and set(value) == {"tl_dtype"}:
        return type(value["tl_dtype"]) is str and len(value["tl_dtype"]) <= 40
    if isinstance(value, list) and depth < 2 and len(value) <= 64:
        return all(scalar_ok(v, depth + 1) or is_ref(v) for v in value)
    return False


encode = encode_json  # the host's frames carry no tensor, only references and numbers
read = read_json


# ------------------------------------------------------------------------------------- device -> judge

def spec(s: Any, default: Any = dataclasses.MISSING) -> Any:
    """A record field with its wire spec (autotune.sandbox.schema); a field with a default may be left out."""
    if default is dataclasses.MISSING:
        return dataclasses.field(metadata={"spec": s})
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata={"spec": s})
    return dataclasses.field(default=default, metadata={"spec": s})


def _optional(f: dataclasses.Field) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


class Record:
    """A typed record inside a frame: its wire form is a dict of its fields (records nested as dicts)."""

    @classmethod
    def fields_spec(cls) -> Fields:
        fs = dataclasses.fields(cls)  # type: ignore[arg-type]
        return Fields({f.name: _wire_spec(f.metadata["spec"]) for f in fs},
                      tuple(f.name for f in fs if _optional(f)))

    def wire(self) -> dict:
        out = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is None and f.default is None:
                continue  # left out: the reader gives the default
            out[f.name] = value.wire() if isinstance(value, Record) else value
        return out

    @classmethod
    def from_wire(cls, d: dict) -> Any:
        values = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.name in d:
                kind = f.metadata["spec"]
                nested = kind.record if isinstance(kind, Nested) else None
                values[f.name] = nested.from_wire(d[f.name]) if nested and d[f.name] is not None else d[f.name]
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class Nested:
    """The spec of a field that holds a Record (or None when `nullable`)."""

    record: type[Record]
    nullable: bool = True


def _wire_spec(s: Any) -> Any:
    if isinstance(s, Nested):
        return Either(None, s.record.fields_spec()) if s.nullable else s.record.fields_spec()
    return s


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


@dataclasses.dataclass(frozen=True)
class CallOutcome(Record):
    """One call of a case as the device ran it: the outputs and every input as the call left them."""

    outputs: list = spec(_TENSORS)
    inputs_after: list = spec(_TENSORS)


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


@dataclasses.dataclass(frozen=True)
class CompileError(Frame):
    kind: ClassVar[str] = "compile_error"
    keep: ClassVar[str] = "first"
    error: str = spec(_ERROR)


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


@dataclasses.dataclass(frozen=True)
class SetupError(Frame):
    """The worker could not set up (no GPU inside the sandbox): not the candidate's fault."""

    kind: ClassVar[str] = "setup_error"
    keep: ClassVar[str] = "first"
    error: str = spec(_ERROR)


@dataclasses.dataclass(frozen=True)
class PolicyError(Frame):
    """The device refused to build a kernel (the kernel half of the allow-list)."""

    kind: ClassVar[str] = "policy_error"
    keep: ClassVar[str] = "first"
    error: str = spec(_ERROR)


@dataclasses.dataclass(frozen=True)
class HostProtocol(Frame):
    kind: ClassVar[str] = "host_protocol"
    keep: ClassVar[str] = "first"
    error: str = spec(_ERROR)


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
    """The dry calls whose launches no planned case ran: the judge adds a case at each of their shapes."""

    kind: ClassVar[str] = "dry_uncovered"
    keep: ClassVar[str] = "first"
    dry_index: list = spec(ListOf(Int(0), max_len=20))


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


# ------------------------------------------------- host -> device, device -> host, judge -> device
#
# The messages between the worker's two processes (JSON through `encode`/`read`) and the judge's stream to the
# device (pickled by the sandbox runner) are `Message` records too: the sender builds the record and sends
# `record.to_wire()`; the receiver reads the wire dict back through ONE function (`parse_host_frame`,
# `parse_to_host`, `parse_stream`), which checks every field against its spec and raises ProtocolError for a
# frame of an unknown kind or a field that does not fit. A host frame's error texts and reports are cut to their
# bounds on the way in (as the device always did), never refused: an honest traceback may be long. A field with
# a default may be left out; fields a record does not name are ignored.


@dataclasses.dataclass(frozen=True)
class Tail(Spec):
    """A text from the host, any value as its string, its last `max_chars` characters ("" for none)."""

    max_chars: int

    def check(self, value, where):
        return str(value)[-self.max_chars:] if value is not None else ""


class Flag(Spec):
    def check(self, value, where):
        return bool(value)


class MaybeIndex(Spec):
    """An int, or None for anything else."""

    def check(self, value, where):
        return value if type(value) is int else None


@dataclasses.dataclass(frozen=True)
class Report(Spec):
    """A dict of texts (the host's isolation report), cut to `max_len` items, keys and values to their lengths;
    {} for anything but a dict."""

    max_len: int
    key_chars: int
    value_chars: int

    def check(self, value, where):
        if not isinstance(value, dict):
            return {}
        return {str(k)[:self.key_chars]: Tail(HOST_TEXT).check(v, where)[:self.value_chars]
                for k, v in list(value.items())[:self.max_len]}


class OpCounts(Spec):
    """The aten ops the host counted: at most 200, names cut to 120 characters, counts ints; {} for anything
    but a dict."""

    def check(self, value, where):
        if not isinstance(value, dict):
            return {}
        return {str(k)[:120]: v for k, v in list(value.items())[:200] if type(v) is int}


class Configs(Spec):
    """The host's autotune configurations by kernel: at most 64 kernels (names cut to 100 characters), 256
    configurations each, each a dict (read by device.coverage); {} for anything but a dict."""

    def check(self, value, where):
        if not isinstance(value, dict):
            return {}
        return {str(k)[:100]: [c for c in v[:256] if isinstance(c, dict)] for k, v in list(value.items())[:64]
                if isinstance(v, list)}


class Lines(Spec):
    """The host's audit log: at most 200 lines of at most 200 characters; missing or empty: none."""

    def check(self, value, where):
        if not value:
            return []
        if not isinstance(value, list):
            raise ProtocolError(f"{where}: not a list")
        return [Tail(HOST_TEXT).check(d, where)[:200] for d in value[:200]]


HOST_TEXT = 4000  # characters of a host's error text passed on to the judge
MAX_EVENTS_PER_CALL = 100_000
MAX_OUTPUTS = 64


class Message(Record):
    """A message between the checker's processes: a record with a kind, on the wire as a dict with "kind"."""

    kind: ClassVar[str]

    def to_wire(self) -> dict:
        return {"kind": self.kind, **self.wire()}

    def send(self, send: Any) -> None:
        """Through the sandbox runner's `send(kind, **fields)` (the host's frames)."""
        send(self.kind, **self.wire())

    @classmethod
    def check(cls, d: dict) -> Any:
        """The record of a wire dict, every field checked against its spec (a field left out is None to it, or
        its default when it has one)."""
        values = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            s = f.metadata["spec"]
            if f.name not in d and _optional(f):
                continue
            if isinstance(s, Nested):  # a record inside (a stream frame's `host`)
                inner = d.get(f.name)
                if type(inner) is not dict or not issubclass(s.record, Message):
                    raise ProtocolError(f"{cls.kind}.{f.name}: {str(inner)[:100]} is not a record")
                values[f.name] = s.record.check(inner)
            else:
                values[f.name] = _spec(s).check(d.get(f.name), f"{cls.kind}.{f.name}")
        return cls(**values)


def _spec(s: Any) -> Spec:
    from autotune.sandbox.schema import spec as to_spec

    return to_spec(s)


def _parse(frame: Any, table: Mapping[str, type[Message]], who: str) -> Any:
    if type(frame) is not dict:
        raise ProtocolError(f"{who} sent a frame that is not a record")
    name = frame.get("kind")
    kind = table.get(name) if isinstance(name, str) else None
    if kind is None:
        raise ProtocolError(f"an unknown frame kind {str(frame.get('kind'))[:40]!r}")
    return kind.check(frame)


# host -> device

@dataclasses.dataclass(frozen=True)
class Call(Message):
    """One call of the entry function as the host ran it: its launches and data ops (`events`, each checked by
    the device's replay: autotune.verify.device.replay), the references of its inputs and outputs, the aten ops
    it ran (counted by device.evidence)."""

    kind: ClassVar[str] = "call"
    index: int = spec(Int(0))
    call: int = spec(Int(0))
    events: list = spec(ListOf(ANY, max_len=MAX_EVENTS_PER_CALL))
    inputs: Any = spec(ANY, None)  # the references of the inputs (check_ref), checked against the case's
    outputs: Any = spec(ANY, None)  # references or {"type": name}: device.evidence.outputs
    torch_ops: Any = spec(ANY, None)  # op name -> count: device.evidence.CaseRecord.record_ops
    dry: bool = spec(Flag(), False)


@dataclasses.dataclass(frozen=True)
class Isolation(Message):
    """The sandbox runner's report of the host's confinement."""

    kind: ClassVar[str] = "isolation"
    report: dict = spec(Report(20, 40, 300), {})


@dataclasses.dataclass(frozen=True)
class HostImportOps(Message):
    kind: ClassVar[str] = "import_ops"
    torch_ops: dict = spec(OpCounts(), {})
    autotune: dict = spec(Configs(), {})


@dataclasses.dataclass(frozen=True)
class HostCompileError(Message):
    """The candidate did not import."""

    kind: ClassVar[str] = "compile_error"
    error: str = spec(Tail(HOST_TEXT), "")
    index: int | None = spec(MaybeIndex(), None)
    dry: bool = spec(Flag(), False)
    tampered: bool = spec(Flag(), False)


@dataclasses.dataclass(frozen=True)
class HostCaseError(Message):
    """A call of a case raised (or a defence was switched off: `tampered`)."""

    kind: ClassVar[str] = "case_error"
    error: str = spec(Tail(HOST_TEXT), "")
    index: int | None = spec(MaybeIndex(), None)
    dry: bool = spec(Flag(), False)
    tampered: bool = spec(Flag(), False)


@dataclasses.dataclass(frozen=True)
class HostError(Message):
    """The sandbox runner's report of the host handler's exception."""

    kind: ClassVar[str] = "error"
    error: str = spec(Tail(HOST_TEXT), "")
    index: int | None = spec(MaybeIndex(), None)
    dry: bool = spec(Flag(), False)
    tampered: bool = spec(Flag(), False)


@dataclasses.dataclass(frozen=True)
class HostDone(Message):
    kind: ClassVar[str] = "host_done"


@dataclasses.dataclass(frozen=True)
class HostAuditLog(Message):
    kind: ClassVar[str] = "audit_log"
    denied: list = spec(Lines(), [])


@dataclasses.dataclass(frozen=True)
class HostResult(Message):
    """The sandbox runner's last frame (the handler's result): not read."""

    kind: ClassVar[str] = "result"


HOST_FRAMES: tuple[type[Message], ...] = (Call, Isolation, HostImportOps, HostCompileError, HostCaseError, HostError,
                                          HostDone, HostAuditLog, HostResult)
_HOST_KINDS = {f.kind: f for f in HOST_FRAMES}


def parse_host_frame(frame: Any) -> Message:
    """A host frame's record, every field checked; ProtocolError for an unknown kind or a field that does not
    fit."""
    return _parse(frame, _HOST_KINDS, "the host")


# device -> host

@dataclasses.dataclass(frozen=True)
class HostCase(Message):
    """A case (or a dry call) handed to the host, without its data: `args`, each `{"place": Placement wire}` for
    a tensor or the scalar itself."""

    kind: ClassVar[str] = "case"
    index: int = spec(Int(0))
    calls: int = spec(Int(0))
    args: list = spec(ListOf(ANY, max_len=MAX_OUTPUTS))
    dry: bool = spec(bool, False)


@dataclasses.dataclass(frozen=True)
class End(Message):
    """No more cases."""

    kind: ClassVar[str] = "end"


_TO_HOST = {f.kind: f for f in (HostCase, End)}


def parse_to_host(frame: Any) -> Message:
    return _parse(frame, _TO_HOST, "the device")


# judge -> device (the stream: one key naming the frame's kind, its fields under it)

class StreamFrame(Message):
    def to_wire(self) -> dict:
        return {self.kind: self.wire()}


@dataclasses.dataclass(frozen=True)
class CaseItem(StreamFrame):
    """A case for the device: its data (`args`, `refill_args`), the calls it makes (`sequence`: "first",
    "repeat", "refill"; then `long` more compared by their events), and what the host gets (`host`)."""

    kind: ClassVar[str] = "case"
    index: int = spec(Int(0))
    args: list = spec(ListOf(ANY, max_len=MAX_OUTPUTS))
    front_guard: bool = spec(bool)
    sequence: list = spec(ListOf(Text(10), max_len=16))
    calls: int = spec(Int(0))
    host: HostCase = spec(Nested(HostCase, nullable=False))
    long: int = spec(Int(0), 0)
    sample: int = spec(Int(0), 0)
    mutates: list = spec(ListOf(Int(0), max_len=MAX_OUTPUTS), [])
    refill_args: list | None = spec(Either(None, ListOf(ANY, max_len=MAX_OUTPUTS)), None)


@dataclasses.dataclass(frozen=True)
class DryItem(StreamFrame):
    """A dry call at a served shape: the host's launches are noted for the coverage account, not run."""

    kind: ClassVar[str] = "dry"
    index: int = spec(Int(0))
    host: HostCase = spec(Nested(HostCase, nullable=False))


@dataclasses.dataclass(frozen=True)
class CoverageCheck(StreamFrame):
    """Every case before it is done: the device names the dry calls whose launches no case ran."""

    kind: ClassVar[str] = "coverage_check"


_STREAM = {f.kind: f for f in (CaseItem, DryItem, CoverageCheck)}


def parse_stream(frame: Any) -> Message:
    """A judge's stream frame (`{kind: fields}`) as its record."""
    if type(frame) is not dict or len(frame) != 1:
        raise ProtocolError("a stream frame that is not one record")
    (kind, fields), = frame.items()
    if type(fields) is not dict:
        raise ProtocolError(f"a stream frame {str(kind)[:40]!r} without its record")
    return _parse({**fields, "kind": kind}, _STREAM, "the judge")
