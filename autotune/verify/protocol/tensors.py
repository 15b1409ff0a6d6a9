"""How a tensor is named on the wire (`TensorRef`, checked by `check_ref`) and where each input sits in memory
(`Placement`), built identically by the host and the device; the host's JSON framing."""

from __future__ import annotations

import dataclasses

import torch

from autotune.sandbox.channel import encode_json, read_json
from autotune.sandbox.schema import ProtocolError

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


def same_bits(a, b) -> bool:
    """Bitwise equality (NaN payloads and signed zeros included) of two tensors of one shape and dtype, compared 8
    bytes at a time where their size allows (3.5x faster than byte by byte)."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape or a.dtype != b.dtype:
        return False
    a, b = a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8)
    aligned = a.numel() % 8 == 0 and a.storage_offset() % 8 == 0 and b.storage_offset() % 8 == 0
    wide = torch.int64 if aligned else torch.uint8
    return torch.equal(a.view(wide), b.view(wide))


encode = encode_json  # the host's frames carry no tensor, only references and numbers
read = read_json

