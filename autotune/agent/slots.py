"""How many candidates are judged at once in one process, and on which GPU each judge runs.

`verify.workers` judges run at a time across all of a run's targets (targets search side by side, so
the limit is per process, not per target). Its default: on a GPU host one judge per visible GPU, each
pinned to its own device through CUDA_VISIBLE_DEVICES in the candidate's (and the baselines') child
environment, so that two timings never share a GPU; without a GPU, the CPUs this process may use minus
one, so that the machine stays usable while a run judges (the Triton interpreter keeps a core busy).

    slots = judge_slots(cfg)
    with slots.hold():        # blocks until a judge slot is free; pins the GPU for this thread's children
        verify(...)
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Iterator

from autotune.sandbox import runner as sandbox

_LOCK = threading.Lock()
_POOLS: dict[tuple[int, tuple[str, ...]], JudgeSlots] = {}


class JudgeSlots:
    """A counting limit on judges; with GPUs, each slot is one device id handed out and taken back."""

    def __init__(self, workers: int, gpus: tuple[str, ...] = ()):
        self.workers = max(int(workers), 1)
        self._free: queue.Queue[str | None] = queue.Queue()
        for i in range(self.workers):
            self._free.put(gpus[i % len(gpus)] if gpus else None)

    @contextlib.contextmanager
    def hold(self) -> Iterator[str | None]:
        gpu = self._free.get()
        token = sandbox.PINNED_GPU.set(gpu)
        try:
            yield gpu
        finally:
            sandbox.PINNED_GPU.reset(token)
            self._free.put(gpu)


def visible_gpus() -> tuple[str, ...]:
    """The GPU ids this process may use, as CUDA_VISIBLE_DEVICES names them (all of them when it is unset)."""
    from autotune import accel

    count = accel.get("cuda").device_count()  # 0 with a broken CUDA install too: judged on the CPU
    if not count:
        return ()
    named = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return tuple(named[:count]) if named else tuple(str(i) for i in range(count))


def usable_cpus() -> int:
    """The CPUs this process may run on (a SLURM or cgroup allotment, not the whole host), less one."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(cpus - 1, 1)


def default_workers(gpus: tuple[str, ...]) -> int:
    return len(gpus) if gpus else usable_cpus()


def judge_slots(cfg) -> JudgeSlots:
    """The process's judge slots for these settings (one pool per setting: targets share it)."""
    from autotune.env import resolve_device

    gpus = visible_gpus() if resolve_device(cfg.get("device", "auto")) == "cuda" else ()
    workers = cfg.verify.get("workers") or default_workers(gpus)
    key = (int(workers), gpus)
    with _LOCK:
        if key not in _POOLS:
            _POOLS[key] = JudgeSlots(int(workers), gpus)
        return _POOLS[key]
