"""The CUDA device: the one module of autotune with GPU-only lines (torch.cuda.*); CI runs none of them
beyond `available` and `device_count`, which answer "no" there.

The timed window is the practice of triton.testing.do_bench made stricter: CUDA events around one call,
with a device-wide synchronize before the start and before the end event, so that work the call queued on
other streams counts. The L2 flush buffer is twice the L2 or 256 MiB, whichever is larger.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from autotune.accel import Accelerator, Properties, register
from autotune.accel.datasheets import peak_bandwidth_gbps, peak_tflops

MIN_FLUSH_BYTES = 256 << 20
# The event methods the timed window calls, taken when this module is imported: the timing process imports it
# before the candidate, whose Python could otherwise replace them on the class (torch.cuda itself is frozen there).
_EVENT = torch.cuda.Event
_RECORD, _ELAPSED_MS, _WAIT = _EVENT.record, _EVENT.elapsed_time, _EVENT.synchronize
_SYNCHRONIZE = torch.cuda.synchronize


@register
class Cuda(Accelerator):
    name = "cuda"
    torch_device = "cuda"
    stand_in = False
    interprets_triton = False
    compile_backend = "inductor"
    sandbox_gpu = True

    def available(self) -> bool:
        try:
            return torch.cuda.is_available()
        except (RuntimeError, OSError):  # a broken CUDA install: the machine is treated as one without a GPU
            return False

    def device_count(self) -> int:
        return torch.cuda.device_count() if self.available() else 0

    def properties(self) -> Properties:
        p = torch.cuda.get_device_properties(0)
        return Properties(name=p.name, l2_bytes=int(getattr(p, "L2_cache_size", 0)),
                          sm_count=int(p.multi_processor_count),
                          shared_memory_per_block_bytes=int(getattr(p, "shared_memory_per_block_optin", 0)
                                                            or getattr(p, "shared_memory_per_block", 0)),
                          peak_bandwidth_gbps=peak_bandwidth_gbps(p.name), peak_tflops=peak_tflops(p.name),
                          stand_in=False)

    def runtime_version(self) -> str | None:
        return torch.version.cuda

    def driver_version(self) -> str | None:
        try:
            import pynvml  # shipped with nsight-python as nvidia-ml-py

            pynvml.nvmlInit()
            try:
                v = pynvml.nvmlSystemGetDriverVersion()
                return v.decode() if isinstance(v, bytes) else v
            finally:
                pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 (a probe: no driver library, no GPU, an old driver)
            return None

    def synchronize(self) -> None:
        torch.cuda.synchronize()

    def timed(self, fn: Callable | None, args: Sequence) -> tuple[float, Any]:
        start, end = _EVENT(enable_timing=True), _EVENT(enable_timing=True)
        _SYNCHRONIZE()
        _RECORD(start)
        out = fn(*args) if fn is not None else None
        _SYNCHRONIZE()
        _RECORD(end)
        _WAIT(end)
        return _ELAPSED_MS(start, end) * 1000.0, out

    def median_s(self, fn: Callable[[], Any]) -> float:
        import triton.testing

        return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") / 1e3

    def flush_bytes(self) -> int:
        return max(2 * self.properties().l2_bytes, MIN_FLUSH_BYTES)
