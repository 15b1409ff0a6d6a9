"""The environment record that every trace, verdict and proposal carries.

A number without its environment cannot be compared with anything, so each result says which GPU,
driver, CUDA, torch, triton, Python, project commit and host produced it, plus free labels from config
(`labels.cluster=...`, `labels.image=...`). Collecting it never initialises CUDA unless torch already
sees a GPU, and never fails: what cannot be read is recorded as None.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import platform
import socket
import sys
from pathlib import Path
from typing import Any


@dataclasses.dataclass(frozen=True)
class Environment:
    python: str
    torch: str | None
    triton: str | None
    cuda: str | None
    driver: str | None
    gpu: str | None
    gpu_count: int
    device: str
    project_commit: str | None
    project_dirty: bool | None
    host: str
    platform: str
    created_at: str
    labels: dict[str, str] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Environment:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def summary(self) -> str:
        """One line for tables and PR bodies."""
        where = self.gpu or f"CPU ({self.platform})"
        return (f"{where}; torch {self.torch}, triton {self.triton}, CUDA {self.cuda or '-'}, "
                f"driver {self.driver or '-'}, Python {self.python}, commit {(self.project_commit or '-')[:10]}"
                f"{' (dirty)' if self.project_dirty else ''}")


def _version(module: str) -> str | None:
    # Read from package metadata, not by importing: importing triton fixes its interpreter mode for the
    # whole process (TRITON_INTERPRET is read when triton.language's own @jit functions are defined), so an
    # environment record taken first would break loading kernels on CPU later (autotune.kernels.load).
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:  # noqa: BLE001 (a probe: unknown rather than failing the record)
        return None


def _gpu() -> tuple[str | None, str | None, int]:
    """(GPU name, CUDA runtime version, count) from torch; (None, None, 0) without a GPU."""
    try:
        from autotune import accel

        gpu = accel.get("cuda")
        count = gpu.device_count()
        return (gpu.properties().name, gpu.runtime_version(), count) if count else (None, None, 0)
    except Exception:  # noqa: BLE001 (a probe: a broken CUDA install reads as no GPU)
        return None, None, 0


def _driver() -> str | None:
    from autotune import accel

    return accel.get("cuda").driver_version()


def _commit() -> tuple[str | None, bool | None]:
    try:
        import git

        repo = git.Repo(Path(__file__).resolve().parent, search_parent_directories=True)
        return repo.head.commit.hexsha, repo.is_dirty(untracked_files=False)
    except Exception:  # noqa: BLE001 (a probe: not a git checkout, no git, a detached or empty repository)
        return None, None


def collect(labels: dict[str, Any] | None = None) -> Environment:
    gpu, cuda, count = _gpu()
    commit, dirty = _commit()
    return Environment(
        python=platform.python_version(),
        torch=_version("torch"),
        triton=_version("triton"),
        cuda=cuda,
        driver=_driver() if gpu else None,
        gpu=gpu,
        gpu_count=count,
        device="cuda" if gpu else "cpu",
        project_commit=commit,
        project_dirty=dirty,
        host=socket.gethostname(),
        platform=f"{platform.system()} {platform.machine()} ({sys.implementation.name})",
        created_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        labels={str(k): str(v) for k, v in (labels or {}).items()},
    )


def resolve_device(requested: str = "auto") -> str:
    """'cuda' or 'cpu' for a config value of auto|cpu|cuda; asking for cuda without a GPU is a UserError."""
    from autotune import accel
    from autotune.errors import UserError

    if requested == "auto":
        return "cuda" if accel.gpu_available() else "cpu"
    if requested == "cuda" and not accel.gpu_available():
        raise UserError("device=cuda but torch sees no GPU (use device=auto or device=cpu)")
    if requested not in ("cpu", "cuda"):
        raise UserError(f"unknown device '{requested}' (use auto, cpu or cuda)")
    return requested
