"""A typed record with its wire spec: the base of every frame (autotune.sandbox.schema checks the specs)."""

from __future__ import annotations

import dataclasses
from typing import Any

from autotune.sandbox.schema import Either, Fields


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

