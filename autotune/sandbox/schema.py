"""Typed schemas of the frames a sandboxed child sends: what the parent checks before its own code touches one.

    from autotune.sandbox.schema import Schema, ListOf, DictOf, Either, Text, Int, Tensor
    CASE_START = Schema("case_start", {"index": Int(0, 10**6)})
    CASE_ERROR = Schema("case_error", {"index": int, "error": Text(4000), "compile": bool}, keep="first")
    run_isolated(module, payload, ..., schemas=[CASE_START, CASE_ERROR, ...])   # the Reader checks every frame

Every frame is first checked against the generic bounds (`bounded`: nesting depth, number of items, string
length, int range, plain strided CPU tensors whose elements fit their storage, and nothing but None, bool, int,
float, str, tensors, lists, tuples and dicts with str or int keys), then, where the caller gave schemas,
against its kind's: every declared field present (but `optional` ones), no other field, each of its type.
`Text(n)` truncates a longer string to n characters when it is received (error texts), everything else that
does not fit is a `ProtocolError`. The runner's own kinds (isolation, result, error) are in `RUNNER`; a
handler's result is checked against the caller's `result=` spec (`Schema.result`), or the generic bounds only.

Plain Python types stand for themselves: `int`, `float`, `bool`, `str` (Text(MAX_CHARS)), `None`,
`torch.Tensor`; a list `[spec]` is `ListOf(spec)`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

MAX_DEPTH = 16  # an honest frame nests 4 deep (case_result: dict > list > list > int)
MAX_ITEMS = 100_000  # values in one frame; an honest case_result holds a few hundred
MAX_CHARS = 1 << 20  # characters of one string before a Text spec truncates it
INT_RANGE = (-(1 << 63), (1 << 63) - 1)  # a larger int is a forged one (and str() of a huge one raises)


class ProtocolError(ValueError):
    """A frame that does not fit its bounds or its schema: nothing after it is trusted."""


def bounded(obj: Any, *, max_depth: int = MAX_DEPTH, max_items: int = MAX_ITEMS, max_chars: int = MAX_CHARS,
            max_storage_bytes: int | None = None) -> Any:
    """`obj` when every value in it is within the bounds; walks iteratively (a forged 50,000-deep list cannot
    blow the parent's stack) and counts every visit (a cycle runs into `max_items`)."""
    import torch

    stack, items = [(obj, 0)], 0
    storages: dict[int, int] = {}
    while stack:
        value, depth = stack.pop()
        items += 1
        if items > max_items:
            raise ProtocolError(f"more than {max_items} values in one frame")
        if depth > max_depth:
            raise ProtocolError(f"nested more than {max_depth} deep")
        kind = type(value)
        if value is None or kind in (bool, float):
            continue
        if kind is int:
            if not INT_RANGE[0] <= value <= INT_RANGE[1]:
                raise ProtocolError("an integer outside the 64-bit range")
        elif kind is str:
            if len(value) > max_chars:
                raise ProtocolError(f"a string of {len(value)} characters (at most {max_chars})")
        elif kind is torch.Tensor:
            _check_tensor(value, storages)
        elif kind in (list, tuple):
            stack.extend((v, depth + 1) for v in value)
        elif kind is dict:
            for k, v in value.items():
                if type(k) not in (str, int):
                    raise ProtocolError(f"a dict key of type {type(k).__name__}")
                stack.extend(((k, depth + 1), (v, depth + 1)))
        else:
            raise ProtocolError(f"a value of type {kind.__name__}")
    if max_storage_bytes is not None and sum(storages.values()) > max_storage_bytes:
        raise ProtocolError(f"tensors of {sum(storages.values())} bytes in a frame of {max_storage_bytes}")
    return obj


def _check_tensor(t, storages: dict) -> None:
    """A plain strided CPU tensor whose elements fit in its storage: numel x element size is the most memory
    any use of it can ask for (a stride-0 view of 2**40 elements over 4 bytes is refused)."""
    import torch

    if t.layout is not torch.strided or t.is_quantized or t.device.type != "cpu" or t.requires_grad:
        raise ProtocolError(f"a tensor that is not a plain strided CPU tensor ({t.layout}, {t.device})")
    storage = t.untyped_storage()
    if t.numel() * t.element_size() > storage.nbytes():
        raise ProtocolError(f"a tensor of {t.numel()} elements over a storage of {storage.nbytes()} bytes")
    storages[storage.data_ptr()] = storage.nbytes()


# ------------------------------------------------------------------------------------------------ specs

class Spec:
    def check(self, value: Any, where: str) -> Any:  # the value (maybe trimmed), or ProtocolError
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class Int(Spec):
    lo: int = INT_RANGE[0]
    hi: int = INT_RANGE[1]

    def check(self, value, where):
        if type(value) is not int or not self.lo <= value <= self.hi:
            raise ProtocolError(f"{where}: {_shown(value)} is not an integer in [{self.lo}, {self.hi}]")
        return value


@dataclasses.dataclass(frozen=True)
class Text(Spec):
    max_chars: int = MAX_CHARS

    def check(self, value, where):
        if type(value) is not str:
            raise ProtocolError(f"{where}: {_shown(value)} is not a string")
        return value if len(value) <= self.max_chars else value[:self.max_chars] + " [truncated]"


@dataclasses.dataclass(frozen=True)
class Leaf(Spec):
    kind: type

    def check(self, value, where):
        if type(value) is not self.kind:
            raise ProtocolError(f"{where}: {_shown(value)} is not a {self.kind.__name__}")
        return value


@dataclasses.dataclass(frozen=True)
class ListOf(Spec):
    item: Any
    max_len: int = MAX_ITEMS
    min_len: int = 0

    def check(self, value, where):
        if type(value) not in (list, tuple) or not self.min_len <= len(value) <= self.max_len:
            size = f"at most {self.max_len}" if not self.min_len else f"{self.min_len} to {self.max_len}"
            raise ProtocolError(f"{where}: {_shown(value)} is not a list of {size}")
        item = spec(self.item)
        return [item.check(v, f"{where}[{i}]") for i, v in enumerate(value)]


@dataclasses.dataclass(frozen=True)
class DictOf(Spec):
    key: Any
    value: Any
    max_len: int = MAX_ITEMS

    def check(self, value, where):
        if type(value) is not dict or len(value) > self.max_len:
            raise ProtocolError(f"{where}: {_shown(value)} is not a dict of at most {self.max_len}")
        k, v = spec(self.key), spec(self.value)
        return {k.check(a, f"{where} key"): v.check(b, f"{where}[{a!r}]") for a, b in value.items()}


@dataclasses.dataclass(frozen=True)
class Either(Spec):
    options: tuple

    def __init__(self, *options):
        object.__setattr__(self, "options", options)

    def check(self, value, where):
        problems = []
        for option in self.options:
            try:
                return spec(option).check(value, where)
            except ProtocolError as e:
                problems.append(str(e))
        raise ProtocolError(problems[0] if len(problems) == 1 else f"{where}: {_shown(value)} fits no option")


class _Anything(Spec):
    def check(self, value, where):
        return value  # already within the generic bounds


ANY = _Anything()


def spec(s) -> Spec:
    """A spec from the shorthand: a Spec as it is, a type, None, or `[item]`."""
    import torch

    if isinstance(s, Spec):
        return s
    if s is None:
        return Leaf(type(None))
    if isinstance(s, list) and len(s) == 1:
        return ListOf(s[0])
    if s is str:
        return Text()
    if s is int:
        return Int()
    if s in (bool, float, torch.Tensor):
        return Leaf(s)
    raise TypeError(f"not a frame spec: {s!r}")


@dataclasses.dataclass(frozen=True)
class Fields(Spec):
    """A record inside a frame: a dict with exactly these fields (but `optional` ones), each of its spec."""

    fields: dict
    optional: tuple = ()

    def check(self, value, where):
        if type(value) is not dict:
            raise ProtocolError(f"{where}: {_shown(value)} is not a record")
        extra = sorted(set(value) - set(self.fields))
        if extra:
            raise ProtocolError(f"{where}: fields not in its schema: {', '.join(map(str, extra))}"[:300])
        out = {}
        for name, s in self.fields.items():
            if name not in value:
                if name in self.optional:
                    continue
                raise ProtocolError(f"{where}: without its field {name!r}")
            out[name] = spec(s).check(value[name], f"{where}.{name}")
        return out


@dataclasses.dataclass(frozen=True)
class Schema:
    """The fields of one kind of frame. `keep`: "all" frames of this kind are kept for the caller (within the
    Reader's caps), only the "first" (error reports: a flood of them costs nothing), or "none"."""

    kind: str
    fields: dict
    optional: tuple = ()
    keep: str = "all"

    def check(self, frame: dict) -> dict:
        extra = sorted(set(frame) - set(self.fields) - {"kind"})
        if extra:
            raise ProtocolError(f"a {self.kind} frame with fields not in its schema: {', '.join(map(str, extra))}")
        out = {"kind": self.kind}
        for name, s in self.fields.items():
            if name not in frame:
                if name in self.optional:
                    continue
                raise ProtocolError(f"a {self.kind} frame without its field {name!r}")
            out[name] = spec(s).check(frame[name], f"{self.kind}.{name}")
        return out


ERROR_CHARS = 4000  # an error text kept from the child: a traceback's tail is what the verdict shows


def runner_schemas(result: Any = ANY) -> dict[str, Schema]:
    """The runner's own frames: what confinement was applied, the handler's exception, its result."""
    return {s.kind: s for s in (
        Schema("isolation", {"report": DictOf(str, Text(2000), max_len=64)}, keep="first"),
        Schema("error", {"error": Text(ERROR_CHARS)}, keep="first"),
        Schema("result", {"payload": result}, keep="first"),
    )}


def check_frame(frame: Any, schemas: dict[str, Schema] | None) -> dict:
    """A frame that passed the generic bounds, checked against its kind's schema (all kinds must have one when
    `schemas` is given; without, the runner's kinds are still checked)."""
    if type(frame) is not dict or type(frame.get("kind")) is not str:
        raise ProtocolError(f"a frame must be a dict with a string `kind`, not {_shown(frame)}")
    table = schemas if schemas is not None else runner_schemas()
    schema = table.get(frame["kind"])
    if schema is None:
        if schemas is None:
            return frame
        raise ProtocolError(f"a frame of a kind that has no schema ({len(frame['kind'])} characters)")
    return schema.check(frame)


def _shown(value: Any) -> str:
    """A short, safe description of a value for an error message (never its whole text)."""
    if type(value) in (int, float, bool) or value is None:
        return repr(value)[:40]
    size = f" of {len(value)}" if type(value) in (str, list, tuple, dict) else ""
    return f"a {type(value).__name__}{size}"
