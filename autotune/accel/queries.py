"""Device queries a launcher makes, answered as the GPU it will run on.

Production launchers size their grids by the device: vLLM's persistent matmul and Triton's persistent-kernel tutorial
launch `torch.cuda.get_device_properties(...).multi_processor_count` programs. Without a GPU (the Triton interpreter)
that call raises, so such a launcher could not be judged, or would be judged on a path it never takes. Where kernels
run without a GPU, `answer(facts)` makes the call return `facts`: the GPU's the kernel is judged for (`SM90`, the H200
the interpreter compiles for: autotune.verify.device.frontend's target and shared memory come from here), so a
launcher takes on the CPU the path it takes there. Where a GPU is visible the real call answers and nothing is
patched. The checker's host process (which has no GPU, even on a GPU machine) gets the judging machine's facts
(`of_device`) from the judge.
"""

from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass(frozen=True)
class DeviceFacts:
    """What a launcher may ask of the device, named as torch's `_CudaDeviceProperties` names it."""

    name: str
    major: int
    minor: int
    multi_processor_count: int
    total_memory: int
    L2_cache_size: int  # torch's attribute name
    warp_size: int
    max_threads_per_multi_processor: int
    regs_per_multiprocessor: int
    shared_memory_per_block: int
    shared_memory_per_block_optin: int  # cudaDevAttrMaxSharedMemoryPerBlockOptin: what Triton's launcher checks
    shared_memory_per_multiprocessor: int

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# An H200 as torch reports it (sm_90, 132 SMs, 50 MiB of L2, 227 KiB of shared memory a block may opt into, about
# 139.8 GiB of memory)
SM90 = DeviceFacts(name="NVIDIA H200", major=9, minor=0, multi_processor_count=132, total_memory=150_109_880_320,
                   L2_cache_size=52_428_800, warp_size=32, max_threads_per_multi_processor=2048,
                   regs_per_multiprocessor=65536, shared_memory_per_block=49152, shared_memory_per_block_optin=232448,
                   shared_memory_per_multiprocessor=233472)


def of_device() -> DeviceFacts:
    """The first visible GPU's facts, or SM90's where there is none."""
    if not torch.cuda.is_available():
        return SM90
    p = torch.cuda.get_device_properties(0)
    return DeviceFacts(**{f.name: getattr(p, f.name, getattr(SM90, f.name)) for f in dataclasses.fields(DeviceFacts)})


def answer(facts: DeviceFacts = SM90) -> None:
    """Make `torch.cuda.get_device_properties` return `facts` in this process, unless a GPU is visible here."""
    if torch.cuda.is_available():
        return

    def get_device_properties(device=None) -> DeviceFacts:  # any device: the one GPU judged for
        return facts

    vars(torch.cuda)["get_device_properties"] = get_device_properties  # vars(): it answers DeviceFacts, not torch's
