"""The CPU stand-in: every path of the device layer runs here, in CI, and says that it is a stand-in.

Allocation on the host, no synchronisation to do, a monotonic clock for the timed window, a flush buffer twice
the size of the CPU's L2, Triton under its interpreter, torch.compile without code generation (`aot_eager`:
Dynamo's graph capture runs, as on a GPU, but no C++ compiler, which the sandbox does not show and which
costs ~40 s per graph here). No figure taken here is a GPU's: the properties say `stand_in`.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from autotune.accel import Accelerator, Properties, register

NAME = "cpu (stand-in)"
DEFAULT_L2_BYTES = 1 << 20
_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")


@register
class Cpu(Accelerator):
    name = "cpu"
    torch_device = "cpu"
    stand_in = True
    interprets_triton = True
    compile_backend = "aot_eager"
    sandbox_gpu = False

    def available(self) -> bool:
        return True

    def device_count(self) -> int:
        return 1

    def properties(self) -> Properties:
        return Properties(name=NAME, l2_bytes=l2_bytes(), sm_count=os.cpu_count() or 1,
                          shared_memory_per_block_bytes=0, peak_bandwidth_gbps=None, peak_tflops=None, stand_in=True)

    def runtime_version(self) -> str | None:
        return None

    def synchronize(self) -> None:
        pass  # the host's work is done when the call returns

    def timed(self, fn: Callable | None, args: Sequence) -> tuple[float, Any]:
        start = time.perf_counter_ns()
        out = fn(*args) if fn is not None else None
        return (time.perf_counter_ns() - start) / 1e3, out

    def median_s(self, fn: Callable[[], Any]) -> float:
        fn()
        return statistics.median(self.timed(fn, ())[0] for _ in range(5)) / 1e6

    def flush_bytes(self) -> int:
        return 2 * l2_bytes()


def l2_bytes(caches: Path = _CACHES) -> int:
    """The CPU's level-2 cache in bytes (Linux sysfs), else 1 MiB."""
    for index in sorted(caches.glob("index*")):
        try:
            if (index / "level").read_text().strip() == "2":
                return _size((index / "size").read_text())
        except (OSError, ValueError):
            continue
    return DEFAULT_L2_BYTES


def _size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale
