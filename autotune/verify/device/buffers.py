"""The device's memory: a buffer per host storage, 512-byte aligned as CUDA's caching allocator aligns blocks (so that
no kernel can tell the two apart), filled as fresh memory is under torch's deterministic mode; the cases' inputs
placed with their NaN guard bands; and the rule that a call uses only its inputs and what it allocated."""

from __future__ import annotations

import dataclasses

import torch

from autotune.verify import protocol
from autotune.verify.interp.sampling import Sample

ALIGNMENT = 512  # bytes: what CUDA's caching allocator gives every block


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

    def view(self, ref: protocol.TensorRef) -> torch.Tensor:
        dtype = ref.torch_dtype
        if self.shift % dtype.itemsize:
            raise protocol.ProtocolError("a view not aligned to its dtype")
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

    def bind(self, ref: protocol.TensorRef, buffer: Buffer) -> None:
        self.by_ptr[ref.ptr] = buffer

    def get(self, ref: protocol.TensorRef, fresh: bool = False) -> Buffer:
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
        ref = protocol.check_ref(value)
        return self.get(ref, fresh).view(ref)


@dataclasses.dataclass
class Placed:
    """A case's input on the device, where the judge's placement puts it."""

    buffer: Buffer
    inner: torch.Tensor
    outside: torch.Tensor | None  # bool mask of the guard bands and padding (None: not guarded)
    place: protocol.Placement

    def intact(self) -> bool:
        if self.outside is None:
            return True
        flat = self.buffer.raw[self.buffer.shift:self.buffer.shift + self.buffer.nbytes].view(self.inner.dtype)
        return bool(torch.isnan(flat[self.outside]).all())


def place(t: torch.Tensor, front: bool, case: int) -> Placed:
    """The judge's laid-out input `t` copied into an aligned buffer with its guard bands (protocol.Placement)."""
    p = protocol.Placement.of(t, front)
    total, offset = p.layout()
    buf = Buffer.fresh(total * t.element_size(), t.dtype, ("input", case))
    ref = protocol.TensorRef(0, buf.nbytes, offset, p.shape, p.stride, p.dtype)
    inner = buf.view(ref)
    inner.copy_(t)
    outside = None
    if p.guarded:
        outside = torch.ones(total, dtype=torch.bool)
        outside.as_strided(p.shape, p.stride, offset).fill_(False)
    return Placed(buf, inner, outside, p)


def storage_span(t: torch.Tensor) -> tuple[int, int]:
    s = t.untyped_storage()
    return s.data_ptr(), s.data_ptr() + s.nbytes()


def overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    (a0, a1), (b0, b1) = storage_span(a), storage_span(b)
    return a0 < b1 and b0 < a1 and a1 > a0 and b1 > b0
