"""The device layer: the few things that differ between a GPU and the CPU, behind one small interface.

    from autotune import accel
    dev = accel.get("cuda")            # or "cpu"; accel.get("auto"): cuda where torch sees a GPU, else cpu
    dev.properties()                   # Properties: name, L2, SMs, shared memory, datasheet peaks, stand_in
    us, out = dev.timed(fn, args)      # one call in a timed window (CUDA events / a CPU clock), in us
    dev.flush_buffer().zero_()         # evict the L2 between timed calls
    dev.generator(seed), dev.to_device(t), dev.synchronize(), dev.compile_backend, dev.interprets_triton

Two implementations register themselves here: `cuda.py` (the only module of autotune with GPU-only lines) and
`cpu.py`, a stand-in on which every path above runs in CI. Numbers taken on the stand-in are labelled
`stand_in` and never count as speed (autotune.verify.timing keeps such a candidate `unmeasured`).
Importing this package initialises no GPU.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch


@dataclasses.dataclass(frozen=True)
class Properties:
    """What the timing protocol and the roofline need to know of a device."""

    name: str  # "NVIDIA H100 80GB HBM3", or "cpu (stand-in)"
    l2_bytes: int  # last-level cache the flush must evict
    sm_count: int  # streaming multiprocessors (CPU: logical cores)
    shared_memory_per_block_bytes: int  # the most a block may use (CPU: 0, there is none)
    peak_bandwidth_gbps: float | None  # datasheet DRAM bandwidth; None where the name is not in the table
    peak_tflops: float | None  # datasheet dense bf16/fp16 tensor-core rate
    stand_in: bool  # True: not a GPU, figures taken here are not a GPU's

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a device has a name")
        if min(self.l2_bytes, self.sm_count, self.shared_memory_per_block_bytes) < 0:
            raise ValueError(f"negative size in {self}")


class Accelerator(abc.ABC):
    """One kind of device. Subclasses set the class attributes and the abstract methods, and register."""

    name: str  # the registry key: "cuda", "cpu"
    torch_device: str  # where tensors are allocated
    stand_in: bool  # figures taken here are stand-ins, never a GPU's
    interprets_triton: bool  # Triton kernels run under its CPU interpreter (TRITON_INTERPRET=1), not compiled
    compile_backend: str  # the torch.compile backend of the `compile` baseline
    sandbox_gpu: bool  # a sandboxed child must see the GPU (autotune.sandbox.run_isolated(gpu=...))

    @abc.abstractmethod
    def available(self) -> bool:
        """Whether this process can use the device."""

    @abc.abstractmethod
    def device_count(self) -> int:
        """Devices of this kind visible to this process."""

    @abc.abstractmethod
    def properties(self) -> Properties:
        """The first visible device's properties."""

    @abc.abstractmethod
    def runtime_version(self) -> str | None:
        """The device runtime's version (CUDA's), for the environment record; None on the CPU."""

    def driver_version(self) -> str | None:
        """The device driver's version, for the environment record; None where there is none."""
        return None

    @abc.abstractmethod
    def synchronize(self) -> None:
        """Wait until every queued kernel has finished."""

    @abc.abstractmethod
    def timed(self, fn: Callable | None, args: Sequence) -> tuple[float, Any]:
        """(microseconds, fn(*args)) of one call in a timed window that waits for all the device's work;
        `fn=None` times the empty window."""

    @abc.abstractmethod
    def median_s(self, fn: Callable[[], Any]) -> float:
        """A quick median time of fn() in seconds (the roofline and library tables, not the checker)."""

    @abc.abstractmethod
    def flush_bytes(self) -> int:
        """The size of the buffer whose zeroing evicts the last-level cache."""

    def flush_buffer(self) -> torch.Tensor:
        """A buffer that `zero_()` evicts the cache with (twice its size, or more)."""
        return torch.empty(self.flush_bytes(), dtype=torch.int8, device=self.torch_device)

    def generator(self, seed: int) -> torch.Generator:
        """A random generator on the device (fresh inputs are drawn where they live)."""
        return torch.Generator(device=self.torch_device).manual_seed(int(seed))

    def triton_env(self) -> dict[str, str]:
        """What a process's environment needs, before its first `import triton`, to run Triton kernels here."""
        return {"TRITON_INTERPRET": "1"} if self.interprets_triton else {}

    def to_device(self, value: Any) -> Any:
        """A tensor moved to the device; anything else as it is."""
        return value.to(self.torch_device) if isinstance(value, torch.Tensor) else value


_REGISTRY: dict[str, type[Accelerator]] = {}


def register(cls: type[Accelerator]) -> type[Accelerator]:
    """Class decorator: a new kind of device is a new module that registers itself."""
    _REGISTRY[cls.name] = cls
    return cls


def names() -> tuple[str, ...]:
    return tuple(sorted(_REGISTRY))


def get(name: str = "auto") -> Accelerator:
    """The device layer by name; "auto" is cuda where it is available, else cpu."""
    if name == "auto":
        name = "cuda" if _REGISTRY["cuda"]().available() else "cpu"
    try:
        return _REGISTRY[name]()
    except KeyError:
        raise ValueError(f"no device layer {name!r} (known: {', '.join(names())})") from None


def gpu_available() -> bool:
    """Whether this process sees a CUDA GPU."""
    return get("cuda").available()


from autotune.accel import cpu, cuda  # noqa: E402  (they register themselves with the names above)

__all__ = ["Accelerator", "Properties", "cpu", "cuda", "get", "gpu_available", "names", "register"]
