"""The messages between the worker's processes and the judge's stream to the device: `Message` records, each read
through one validating parse."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, ClassVar

from autotune.sandbox.schema import ANY, Either, Int, ListOf, ProtocolError, Spec, Text
from autotune.verify.protocol.records import Nested, Record, _optional, spec

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
    """The aten ops the host counted: at most 200, counts ints; {} for anything but a dict. A name that is not an
    op's (`aten.add`, `aten.copy_ (dtype conversion)`) is counted as NOT_AN_OP, which no rule allows: the host's
    record was tampered with, and its text never reaches a verdict."""

    def check(self, value, where):
        if not isinstance(value, dict):
            return {}
        counts: dict[str, int] = {}
        for k, v in list(value.items())[:200]:
            if type(v) is int:
                name = str(k) if _OP_NAME.fullmatch(str(k)) else NOT_AN_OP
                counts[name] = counts.get(name, 0) + v
        return counts


_OP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,100}( \(dtype conversion\))?")
NOT_AN_OP = "(a name that is no op's)"


class Configs(Spec):
    """The host's autotune configurations by kernel: at most 64 kernels (names cut to 100 characters), 256
    configurations each, each a dict (read by device.coverage); {} for anything but a dict."""

    def check(self, value, where):
        if not isinstance(value, dict):
            return {}
        return {str(k)[:100]: [c for c in v[:256] if isinstance(c, dict)] for k, v in list(value.items())[:64]
                if isinstance(v, list)}


class Lines(Spec):
    """The host's audit log, its refusals: at most 200 lines of at most 200 characters; missing or empty: none."""

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
class HostFailure(Message):
    """What the host reports of a failure: its text, the case it was in, whether it was a dry call or a defence
    switched off, and what the run-time defence refused. The three kinds below carry the same fields."""

    error: str = spec(Tail(HOST_TEXT), "")
    index: int | None = spec(MaybeIndex(), None)
    dry: bool = spec(Flag(), False)
    tampered: bool = spec(Flag(), False)
    defence_refused: list = spec(Lines(), [])  # what the run-time defence itself refused (audit.Guard.refused)


@dataclasses.dataclass(frozen=True)
class HostCompileError(HostFailure):
    """The candidate did not import."""

    kind: ClassVar[str] = "compile_error"


@dataclasses.dataclass(frozen=True)
class HostCaseError(HostFailure):
    """A call of a case raised (or a defence was switched off: `tampered`)."""

    kind: ClassVar[str] = "case_error"


@dataclasses.dataclass(frozen=True)
class HostError(HostFailure):
    """The sandbox runner's report of the host handler's exception."""

    kind: ClassVar[str] = "error"


@dataclasses.dataclass(frozen=True)
class HostDone(Message):
    kind: ClassVar[str] = "host_done"
    defence_refused: list = spec(Lines(), [])  # refusals the candidate caught and went on after


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
    whole_within_ms: int = spec(Int(0), 0)  # a sampled call runs again whole when its skipped programs take this
    rerun_within_ms: int = spec(Int(0), 0)  # ... and where it must (nothing compared alone), only within this
    widen_within_ms: int = spec(Int(0), 0)  # a launch widened to read partial results stops after this (0: never)
    mutates: list = spec(ListOf(Int(0), max_len=MAX_OUTPUTS), [])
    refill_args: list | None = spec(Either(None, ListOf(ANY, max_len=MAX_OUTPUTS)), None)


@dataclasses.dataclass(frozen=True)
class DryItem(StreamFrame):
    """A dry call at a served shape: the host's launches are noted for the coverage account, not run. A `probe` is a
    dry call at a smaller shape the judge offers in place of a served one whose launch no case ran: its launches
    are not demanded, only matched (DryUncovered.alike). The host is not told which dry calls are probes."""

    kind: ClassVar[str] = "dry"
    index: int = spec(Int(0))
    host: HostCase = spec(Nested(HostCase, nullable=False))
    probe: bool = spec(bool, False)


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
