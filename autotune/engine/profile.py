"""`autotune profile engine=vllm|sglang`: drive a live server with the workload under its own profiler.

The server (engine.url, or launched with engine.launch=true) first answers `profile.warmup_requests` requests
outside the profile (its first requests pay one-time costs), then the workload inside the profiled window
(`POST /start_profile` ... `/stop_profile`). The client measures every request (autotune/engine/stats.py:
TTFT, TPOT, ITL, end to end, tokens/s, errors); the worker's trace is read by the same code as any trace
(`autotune profile trace=PATH`: op table, hot spots, coverage), and the run folder gets `load.json` (the
client's figures) and the engine's version, flags and model in `env.json` under "engine", beside the
machine's environment. A launched server's log is kept as `server.log`.

    result, load = profile_engine(compose(["engine=vllm", "engine.url=http://127.0.0.1:8000"]))
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import secrets
import shutil
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from autotune import env
from autotune.config import as_dict
from autotune.engine.endpoints import profiling
from autotune.engine.launch import Server, plugin_notes, serving
from autotune.engine.load import Endpoint, run_load
from autotune.engine.settings import EngineSettings
from autotune.engine.stats import LoadReport
from autotune.engine.workload import EngineRequest, engine_requests, model_vocab_size
from autotune.errors import UserError


def profile_engine(cfg: DictConfig, settings: EngineSettings | None = None):
    """(ProfileResult of the worker's trace, the client's LoadReport) for the configured engine and workload."""
    from autotune.profile.profiler import check_settings, profile_trace

    check_settings(cfg)
    settings = settings or EngineSettings.of(cfg.engine)
    if settings.launch and not settings.log_dir:  # kept where the message says when it dies (the workdir goes)
        settings = dataclasses.replace(settings, log_dir=str(Path(cfg.profile.out_dir) / ".engine-logs"))
    workdir = Path(cfg.profile.out_dir) / f".engine-{dt.datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
    try:
        with serving(settings, workdir) as server:
            report, trace = measure_profiled(cfg, server)
            environment = environment_record(cfg, server)
            log = server.log_path
        result = profile_trace(cfg, trace, environment=environment, load_report=report.to_dict())
        if log is not None and log.is_file():
            shutil.copyfile(log, result.run_dir / "server.log")
    finally:
        if settings.launch:
            shutil.rmtree(workdir, ignore_errors=True)  # the raw traces: the worker's was copied into the run
    result.notes.extend(trace_notes(trace) + plugin_notes(environment["engine"]))
    return result, report


def measure(cfg: DictConfig, server: Server, *, profiled: bool) -> tuple[LoadReport, Path | None]:
    """Warm-up requests, then the workload (inside the profiler's window when profiled); the report and trace."""
    requests = requests_for(cfg, server)
    endpoint = endpoint_of(server)
    warmup = [dataclasses.replace(r, arrival_s=0.0, after=None) for r in requests[: int(cfg.profile.warmup_requests)]]
    if warmup:
        run_load(endpoint, warmup)
    trace = None
    if profiled and server.settings.profile:
        with profiling(server) as window:
            results, duration_s = run_load(endpoint, requests)
        trace = window.trace
    else:
        results, duration_s = run_load(endpoint, requests)
    report = LoadReport.of(results, duration_s)
    if report.num_requests and report.failed == report.num_requests:
        raise UserError(f"every request to the {server.settings.name} server at {server.url} failed: "
                        f"{report.errors[0][0]}")
    return report, trace


def measure_profiled(cfg: DictConfig, server: Server) -> tuple[LoadReport, Path]:
    """measure() inside the profiler's window: the report and the worker's trace, which a profile needs (with
    engine.profile=false there is none: `autotune bench` measures without one)."""
    if not server.settings.profile:
        raise UserError(f"engine.profile=false: profiling the {server.settings.name} server needs its trace "
                        "(set engine.profile=true)")
    report, trace = measure(cfg, server, profiled=True)
    assert trace is not None  # profiling() found it, or raised
    return report, trace


def requests_for(cfg: DictConfig, server: Server) -> list[EngineRequest]:
    vocab = server.settings.vocab_size or model_vocab_size(server.settings.model) or server.vocab_size
    time_scale = float(OmegaConf.select(cfg, "serve.time_scale", default=1.0) or 1.0)
    return engine_requests(cfg.workload, vocab, server.max_model_len, time_scale)


def endpoint_of(server: Server) -> Endpoint:
    s = server.settings
    key = os.environ.get(s.api_key_env) if s.api_key_env else None
    assert server.model is not None  # launch.describe named it from /v1/models
    return Endpoint(server.url, server.model, key, s.request_timeout_s)


def environment_record(cfg: DictConfig, server: Server) -> dict:
    """The machine's environment record with the engine's version, flags and model under "engine"."""
    labels = as_dict(cfg.labels) if "labels" in cfg else {}
    record = env.collect(labels).to_dict()
    record["engine"] = server.record()
    return record


def trace_notes(trace: Path) -> list[str]:
    """What the worker's trace says about how its profiler was set: Python stacks on (vLLM's default) make traces
    several times larger; one of 1.5 GB got a vLLM worker OOM-killed while it wrote it."""
    import gzip

    try:
        with (gzip.open(trace) if trace.read_bytes()[:2] == b"\x1f\x8b" else open(trace, "rb")) as f:
            head = f.read(1 << 16)  # the trace's metadata comes before its events
    except OSError:
        return []
    if b'"with_stack": 1' not in head and b'"with_stack": true' not in head:
        return []
    return [f"the server's profiler recorded Python stacks ({trace.stat().st_size / 1e6:.1f} MB trace): they make "
            "traces several times larger and add nothing to the hot spots; restart vLLM with "
            "--profiler-config '{... \"torch_profiler_with_stack\": false}' (engine.launch=true does), SGLang with "
            "SGLANG_PROFILE_WITH_STACK=False"]
