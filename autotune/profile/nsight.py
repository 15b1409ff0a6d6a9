"""Optional per-kernel metrics from Nsight Compute (through nsight-python) for the top hot spots.

With `profile.nsight=true`, a GPU and `ncu` on PATH, each of the top `profile.nsight_top` targets has its
PyTorch reference re-run on its hottest shape under `nsight.analyze.kernel`, and the kernels it launches
are measured: duration (summed over the op's kernels) and DRAM bytes, hence DRAM throughput in GB/s.
Results go to `nsight.json` in the run folder. Anything missing (no GPU, no ncu, no nsight-python, no
counter permission) or failing gives one line saying why, never a failed profile.

The measuring runs in a child process whose first import is `nsight` (CHILD below), because nsight-python
must be imported before CUDA is initialised, and the profiling process has long since initialised it.
Not run on a GPU during development (no GPU there); the skip paths are tested.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

from omegaconf import DictConfig

DURATION = "gpu__time_duration.sum"  # ns
DRAM_BYTES = "dram__bytes.sum"  # bytes read + written to device memory
FILE = "nsight.json"
CHILD = "import nsight, sys; from autotune.profile.nsight import _child; _child(sys.argv[1], sys.argv[2])"


def unavailable_reason(device: str) -> str | None:
    """Why nsight metrics cannot be collected here, or None when they can."""
    if device != "cuda":
        return "no GPU (per-kernel metrics need CUDA)"
    if shutil.which("ncu") is None:
        return "Nsight Compute's `ncu` is not on PATH (install the CUDA toolkit's Nsight Compute)"
    if importlib.util.find_spec("nsight") is None:
        return "nsight-python is not installed (pip install nsight-python)"
    return None


def cases(record: dict, top: int) -> list[dict]:
    """The hottest shape of each of the top targets: [{"target", "shape", "dtype"}]."""
    return [{"target": h["target"], "shape": h["shapes"][0]["shape"], "dtype": h["shapes"][0]["dtype"]}
            for h in record["hotspots"][:top] if h["shapes"]]


def measure(cfg: DictConfig, record: dict, run_dir: Path) -> tuple[list[dict] | None, str]:
    """(metrics per target, a one-line note); metrics None when skipped or failed. Writes nsight.json."""
    try:
        return _measure(cfg, record, run_dir)
    except Exception as e:  # noqa: BLE001 (optional metrics never fail the profile that asked for them)
        return None, f"nsight skipped: {type(e).__name__}: {e}".splitlines()[0]


def _measure(cfg: DictConfig, record: dict, run_dir: Path) -> tuple[list[dict] | None, str]:
    from autotune import accel

    on_gpu = cfg.device in ("auto", "cuda") and accel.gpu_available()
    reason = unavailable_reason("cuda" if on_gpu else "cpu")
    todo = cases(record, int(cfg.profile.nsight_top))
    if reason is None and not todo:
        reason = "no hot spot with recorded shapes to measure"
    if reason:
        return None, f"nsight skipped: {reason}"
    spec, out = run_dir / ".nsight-spec.json", run_dir / FILE
    spec.write_text(json.dumps(todo))
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, str(spec), str(out)],
                              capture_output=True, text=True, timeout=float(cfg.profile.nsight_timeout_s))
    except subprocess.TimeoutExpired:
        return None, f"nsight skipped: measuring took over profile.nsight_timeout_s={cfg.profile.nsight_timeout_s}s"
    finally:
        spec.unlink(missing_ok=True)
    if done.returncode != 0 or not out.is_file():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"nsight skipped: the measuring process failed ({last})"
    metrics = json.loads(out.read_text())
    return metrics, f"nsight: measured {len(metrics)} target(s), see {FILE}"


def _dram_gbps(duration_ns: float, dram_bytes: float, case: int) -> dict:
    return {"dram_GBps": (dram_bytes / duration_ns if duration_ns else 0.0, "GB/s")}  # bytes/ns == GB/s


def _child(spec_path: str, out_path: str) -> None:
    """Measure each case's reference under Nsight Compute; runs in a fresh process (see the module doc)."""
    import nsight  # already imported first by CHILD; nothing here may initialise CUDA before it
    import torch

    from autotune import accel, targets
    from autotune.targets.base import parse_dtype

    gpu = accel.get("cuda")
    todo = json.loads(Path(spec_path).read_text())
    refs, inputs = [], []
    for case in todo:
        target = targets.get(case["target"])
        args = target.make_inputs(tuple(case["shape"]), parse_dtype(case["dtype"]),
                                  torch.Generator().manual_seed(0), "normal")
        inputs.append(tuple(gpu.to_device(a) for a in args))
        refs.append(target.reference)
        refs[-1](*inputs[-1])  # first-call work (allocator, library handles) stays out of the measurement
    gpu.synchronize()

    @nsight.analyze.kernel(configs=list(range(len(todo))), runs=3, metrics=[DURATION, DRAM_BYTES],
                           combine_kernel_metrics=lambda a, b: a + b, derive_metric=_dram_gbps)
    def bench(case: int) -> None:
        with nsight.annotate(todo[case]["target"]):
            refs[case](*inputs[case])

    frame = bench().to_dataframe()
    Path(out_path).write_text(json.dumps(_rows(todo, frame), indent=2) + "\n")


def _rows(todo: list[dict], frame) -> list[dict]:
    """nsight-python's long table (one row per annotation and metric) as one record per target."""
    rows = []
    for case in todo:
        mine = frame[frame["Annotation"] == case["target"]].set_index("Metric")
        rows.append({**case, "kernels": str(mine["Kernel"].iloc[0]) if len(mine) else "",
                     "duration_us": float(mine.loc[DURATION, "AvgValue"]) / 1e3,
                     "dram_bytes": float(mine.loc[DRAM_BYTES, "AvgValue"]),
                     "dram_GBps": float(mine.loc["dram_GBps", "AvgValue"]), "gpu": str(mine["GPU"].iloc[0])})
    return rows
