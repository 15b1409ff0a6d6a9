"""Profiling: serve the model under torch.profiler, or read an existing trace, and write the run folder.

`profile_serving(cfg)` builds the model, serves `profile.warmup_requests` requests outside the profile
(one-time costs: allocator growth, first-call dispatch), then serves the workload under
`torch.profiler.profile` (CPU, plus CUDA on a GPU) with shapes recorded, inside a
`record_function("autotune::serve")` window whose duration is the serving time. The environment record and
the serve report go into the trace's metadata, so a trace alone says where it came from.
`profile_trace(cfg, path)` reads a trace someone else wrote (vLLM, SGLang, or ours).

Both write `<profile.out_dir>/<run>/` (run = `YYYYmmdd-HHMMSS-xxxx`): trace.json.gz (or the copied trace),
ops.csv (+ ops.parquet when pyarrow is present), hotspots.json, env.json, serve.json (when there is a
serve report), nsight.json (when profile.nsight measured anything). The op table is always computed from
the trace file as written, so a run and `autotune profile trace=<run>/trace.json.gz` agree. The folder is
built as `.<run>.partial` and renamed when complete: an interrupted or failed profile leaves no run that
looks finished.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig

from autotune import env
from autotune.config import as_dict
from autotune.errors import UserError
from autotune.profile import diagnose, nsight
from autotune.profile.hotspots import FILE as HOTSPOTS_FILE
from autotune.profile.hotspots import hotspots_record, outlier_notes, rank_hotspots
from autotune.profile.opmap import OpMap, build_map
from autotune.profile.optable import (
    META_ENVIRONMENT,
    META_SERVE,
    SERVE_SPAN,
    coverage,
    op_table,
    read_trace,
    serving_time_us,
)


@dataclasses.dataclass
class ProfileResult:
    run_dir: Path
    ops: pd.DataFrame  # the op table (optable.COLUMNS)
    hotspots: dict  # the content of hotspots.json
    serve_report: dict | None  # ServeReport.to_dict() of the profiled serving, None for a foreign trace
    environment: dict  # the environment that produced the trace
    nsight: list[dict] | None = None  # per-kernel metrics when profile.nsight measured them
    nsight_note: str | None = None  # why nsight did not run (or what it did)
    notes: list[str] = dataclasses.field(default_factory=list)  # what the trace cannot show (diagnose.notes)
    load_report: dict | None = None  # a live engine's client-side figures (engine.stats.LoadReport), load.json


def new_run_name() -> str:
    """A sortable, unique run name: `20261130-043512-ab12`."""
    return f"{dt.datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


@contextlib.contextmanager
def building(out_dir: Path, run: str) -> Iterator[Path]:
    """Yield a hidden `.<run>.partial` folder; rename it to `<run>` on success, remove it on any failure."""
    out_dir.mkdir(parents=True, exist_ok=True)
    partial = out_dir / f".{run}.partial"
    partial.mkdir()
    try:
        yield partial
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    partial.rename(out_dir / run)


def _serve_under_profiler(cfg: DictConfig, trace_path: Path) -> tuple[dict, dict]:
    """Serve warm-up requests, then the workload under torch.profiler; export the trace. (serve report, env)"""
    from autotune import kernels
    from autotune.serve import dispatch

    enabled = kernels.enable(cfg)  # {} unless kernels.enable=true: then merged kernels serve
    try:
        return _serve_profiled(cfg, trace_path, {name: k.id for name, k in enabled.items()})
    finally:
        for name in enabled:
            dispatch.use(name, None)


def _serve_profiled(cfg: DictConfig, trace_path: Path, enabled: dict[str, str]) -> tuple[dict, dict]:
    from torch.profiler import ProfilerActivity, profile, record_function

    from autotune import accel
    from autotune.serve import build_model, make_requests, serve

    device = env.resolve_device(cfg.device)
    model = build_model(cfg.model, device)
    requests = make_requests(cfg.workload, model.config.vocab_size, model.config.max_seq_len)
    # warm-up requests all arrive at once: they exist to run each code path once, not to wait for arrivals
    warmup = [dataclasses.replace(r, arrival_s=0.0, after=None) for r in requests[: cfg.profile.warmup_requests]]
    if warmup:
        serve(cfg, model=model, requests=warmup)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    environment = env.collect(as_dict(cfg.labels)).to_dict()
    environment["kernels_enabled"] = enabled  # which merged kernels the served model ran: {target: kernel id}
    with profile(activities=activities, record_shapes=True, with_stack=bool(cfg.profile.with_stack)) as prof:
        with record_function(SERVE_SPAN):
            report = serve(cfg, model=model, requests=requests)
            accel.get(device).synchronize()  # the window ends when the GPU's work has, not when it was queued
        serve_report = report.to_dict()
        prof.add_metadata_json(META_ENVIRONMENT, json.dumps(environment))
        prof.add_metadata_json(META_SERVE, json.dumps(serve_report))
    prof.export_chrome_trace(str(trace_path))
    return serve_report, environment


def check_settings(cfg: DictConfig) -> None:
    """Reject bad profile.* values before any serving is spent on them."""
    if not float(cfg.profile.assumed_speedup) > 0:
        raise UserError(f"profile.assumed_speedup={cfg.profile.assumed_speedup} must be > 0 "
                        "(the kernel speedup the Amdahl projection assumes, e.g. profile.assumed_speedup=2)")
    for key in ("warmup_requests", "top", "nsight_top"):
        if int(cfg.profile[key]) < 0:
            raise UserError(f"profile.{key}={cfg.profile[key]} is negative (use 0 or more)")


def profile_serving(cfg: DictConfig) -> ProfileResult:
    """Serve the configured model and workload under the profiler and write a run folder."""
    check_settings(cfg)
    out_dir, run = Path(cfg.profile.out_dir), new_run_name()
    with building(out_dir, run) as partial:
        serve_report, environment = _serve_under_profiler(cfg, partial / "trace.json.gz")
        trace = read_trace(partial / "trace.json.gz")
        result = _analyse(cfg, trace, out_dir / run, "trace.json.gz", partial, environment, serve_report)
    return result


def profile_trace(cfg: DictConfig, path: str | Path, environment: dict | None = None,
                  load_report: dict | None = None) -> ProfileResult:
    """Read an existing torch-profiler trace (ours, vLLM's, SGLang's) and write a run folder for it; a live
    engine's profile (autotune/engine/profile.py) passes its environment record and client-side figures."""
    check_settings(cfg)
    path = Path(path)
    trace = read_trace(path)
    diagnose.refuse_frontend(trace, str(path))
    with path.open("rb") as f:
        name = "trace.json.gz" if f.read(2) == b"\x1f\x8b" else "trace.json"  # keep the copy's bytes as given
    out_dir, run = Path(cfg.profile.out_dir), new_run_name()
    environment = environment or trace.get(META_ENVIRONMENT) or foreign_environment(trace, cfg)
    with building(out_dir, run) as partial:
        shutil.copyfile(path, partial / name)
        result = _analyse(cfg, trace, out_dir / run, name, partial, environment, trace.get(META_SERVE))
        if load_report is not None:
            _write_json(partial / "load.json", load_report)
            result.load_report = load_report
    return result


def foreign_environment(trace: dict, cfg: DictConfig) -> dict[str, Any]:
    """What a foreign trace says about where it was taken (GPU, top-level metadata), and who read it."""
    devices = trace.get("deviceProperties") or []
    metadata = {k: v for k, v in trace.items() if k not in ("traceEvents", "deviceProperties")
                and isinstance(v, (str, int, float, bool))}
    reader = env.collect(as_dict(cfg.labels)).to_dict()
    return {"source": "foreign trace", "gpu": devices[0].get("name") if devices else None,
            "gpu_count": len(devices), "trace_metadata": metadata, "read_by": reader}


def op_map(cfg: DictConfig) -> OpMap:
    """The op-name mapping: the targets' own names plus profile.target_map and profile.target_map_file."""
    return build_map(as_dict(cfg.profile.target_map),
                     cfg.profile.get("target_map_file"))


def _analyse(cfg: DictConfig, trace: dict, run_dir: Path, trace_name: str, partial: Path,
             environment: dict, serve_report: dict | None) -> ProfileResult:
    """Op table and hot spots of a trace, written into the partial folder."""
    names = op_map(cfg)
    ops = op_table(trace, names)
    serving_us = serving_time_us(trace)
    speedup = float(cfg.profile.assumed_speedup)
    record = hotspots_record(run_dir.name, str((run_dir / trace_name).resolve()), serving_us, speedup,
                             environment, rank_hotspots(ops, serving_us, speedup),
                             coverage(trace, names).to_dict(), diagnose.configuration(trace))
    ops.to_csv(partial / "ops.csv", index=False)
    if _has_pyarrow():
        ops.to_parquet(partial / "ops.parquet", index=False)
    _write_json(partial / HOTSPOTS_FILE, record)
    _write_json(partial / "env.json", environment)
    if serve_report is not None:
        _write_json(partial / "serve.json", serve_report)
    result = ProfileResult(run_dir, ops, record, serve_report, environment,
                           notes=diagnose.notes(trace) + outlier_notes(ops))
    if cfg.profile.nsight:
        result.nsight, result.nsight_note = nsight.measure(cfg, record, partial)
    return result


def _write_json(path: Path, content: Any) -> None:
    path.write_text(json.dumps(content, indent=2, default=str) + "\n")


def _has_pyarrow() -> bool:
    try:
        import pyarrow  # noqa: F401 (imported only to learn whether it is installed)
    except ImportError:
        return False
    return True
