"""Serve the configured model under torch.profiler and rank the ops worth a kernel, or read a trace.

`autotune profile` builds the model (`model=`), serves `profile.warmup_requests` requests outside the
profile, then serves the workload (`workload=`) under torch.profiler (CPU, plus CUDA on a GPU) with input
shapes recorded. It prints the hot spots ranked by share of serving time, with the end-to-end gain a kernel
`profile.assumed_speedup` times faster could give (Amdahl); the share of the time spent in ops that the targets
cover, with the biggest uncovered ops by name; and the serving latencies (TTFT, TPOT, tokens/s).

`autotune profile engine=vllm engine.url=URL` (or engine=sglang, or engine.launch=true engine.model=PATH
engine.python=PATH to start the server here) drives a live server with the workload through its OpenAI API,
streamed, measures TTFT, TPOT, ITL and end to end p50/p95/p99, tokens/s and errors on the client's side, and
profiles the server's worker around that window (autotune/engine/: conf/engine/*.yaml for the settings).

`autotune profile trace=PATH` reads an existing torch-profiler trace instead (.json or .json.gz: ours, or
one written by vLLM or SGLang: the worker's trace, with shapes recorded). Other engines' op names map to
targets as each target declares (vLLM's `_C::` and `vllm_ir::` ops, SGLang's `sgl_kernel::` ops, with the
argument that holds the case and its shape rule); an unfused RMSNorm (aten::pow, mean, add, rsqrt, mul)
counts as rms_norm / fused_add_rms_norm. Add your own names with a file, `profile.target_map_file=PATH`
(YAML/JSON `{op name: target}`, `{op name: {target: T, input: K}}` or `{op name: {target: T, like: OP}}`), or on the
command line with the colons escaped: '+profile.target_map={my_engine\\:\\:rms_norm: rms_norm}'. The serving time of a
foreign trace is the span of its profiled window. Notes after the table say when shapes were not recorded
or time hides in torch.compile regions (rerun with --enforce-eager).

Outputs, in `<profile.out_dir>/<run>/` (default traces/, run = e.g. 20261130-043512-ab12):
  trace.json.gz   the trace (open it in https://ui.perfetto.dev); carries the environment and serve report
  ops.csv         the op table, one row per (op, input shapes, dtype): op, target, input_shapes, dtype,
                  calls, total_us, self_us, device_us (GPU kernel time; empty on CPU), share
                  (also ops.parquet when pyarrow is installed; read either with pandas)
  hotspots.json   the ranked targets with the shapes seen (the checker's shapes come from the newest one)
  env.json        environment record: GPU, driver, CUDA, torch, triton, Python, commit, host, labels.*
  serve.json      the serving report (latencies per request and percentiles)
  nsight.json     with profile.nsight=true, a GPU and Nsight Compute: per-kernel duration and DRAM GB/s
  load.json       engine=vllm|sglang: the client's figures (per request, and TTFT/TPOT/ITL/e2e percentiles,
                  tokens/s, errors); env.json then holds the engine's version, flags and model under "engine"
  server.log      engine.launch=true: the server's output
A run folder appears only when complete; a failed or interrupted profile leaves none.

Main settings (conf/profile/default.yaml; override as key=value):
  profile.out_dir=traces  profile.warmup_requests=2  profile.assumed_speedup=2.0  profile.top=10
  profile.with_stack=false  profile.nsight=false  profile.nsight_top=3  device=auto|cpu|cuda
  profile.target_map_file=PATH
  workload.num_requests=16  serve.max_batch_size=8  labels.cluster=NAME (recorded in env.json)
"""

from __future__ import annotations

import os

from omegaconf import DictConfig
from rich.console import Console, JustifyMethod
from rich.table import Table

from autotune import text
from autotune.env import Environment
from autotune.errors import UserError
from autotune.profile.hotspots import hotspots_in
from autotune.profile.profiler import ProfileResult, profile_serving, profile_trace
from autotune.records import Coverage, ProfiledShape

USAGE = "autotune profile [trace=PATH] [key=value ...]"


def main(argv: list[str]) -> int:
    """The command's entry (every command's is `main(argv)` in its stage's command.py)."""
    from autotune.config import from_argv
    from autotune.errors import UserError

    cfg, rest = from_argv(argv)
    if rest:
        raise UserError(f"unexpected argument(s) {' '.join(rest)} (usage: {USAGE})")
    return profile(cfg)


def profile(cfg: DictConfig) -> int:
    result = profile_trace(cfg, cfg.trace) if cfg.trace else _profile(cfg)
    console = text.console()
    enabled = result.environment.get("kernels_enabled") or {}
    if enabled:  # the hot spots below include them: say so before the table ranks them
        where = ("under the Triton interpreter (no GPU): their times are the interpreter's, far slower than any GPU's"
                 if os.environ.get("TRITON_INTERPRET") == "1" else "compiled by Triton for the GPU")
        console.print(f"merged kernels served ({', '.join(f'{t} {k}' for t, k in enabled.items())}), {where}",
                      soft_wrap=True)
    console.print(hotspot_table(result.hotspots, int(cfg.profile.top)))
    if "coverage" in result.hotspots:
        console.print(coverage_table(Coverage.from_dict(result.hotspots["coverage"]), int(cfg.profile.top)))
    _print_serving(console, result)
    if result.nsight_note:
        console.print(result.nsight_note)
    for note in result.notes:
        console.print(f"note: {note}", soft_wrap=True)
    _print_files(console, result)
    return 0


_SHORT_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def _top_shapes(shapes: tuple[ProfiledShape, ...], n: int = 2) -> str:
    """The most-timed shapes, one per line: `8x4096 bf16 ×120`."""
    lines = [f"{'x'.join(map(str, s.shape))} {_SHORT_DTYPES.get(s.dtype, s.dtype)} ×{s.calls}" for s in shapes[:n]]
    return "\n".join(lines + ([f"(+{len(shapes) - n} more)"] if len(shapes) > n else [])) or "-"


def hotspot_table(record: dict, top: int) -> Table:
    """The ranked hot spots as a rich Table."""
    speedup = record["assumed_speedup"]
    table = Table(title=f"hot spots (run {record['run']}, {record.get('configuration', 'eager')} configuration)",
                  caption=f"serving time {record['serving_time_us'] / 1e3:.1f} ms; gain: the end-to-end time a "
                          f"kernel {speedup:g}x faster would save (Amdahl)")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("#", "right"), ("target", "left"), ("share of serving time", "right"), ("calls", "right"), ("ms", "right"),
        ("top shapes ×calls", "left"), ("gain", "right"))
    for name, justify in columns:
        table.add_column(name, justify=justify, no_wrap=True)
    for rank, h in enumerate(hotspots_in(record)[:top], start=1):
        table.add_row(str(rank), h.target, f"{100 * h.share:.1f}%", str(h.calls), f"{h.total_us / 1e3:.2f}",
                      _top_shapes(h.shapes), f"{100 * h.projected_gain:.1f}%")
    if not record["hotspots"]:
        table.add_row("-", "none found", "", "", "", "foreign op names?", "")
        table.caption = ("no op maps to a target: see the notes below, or add the trace's op names with "
                         "+profile.target_map or profile.target_map_file=PATH")
    return table


def coverage_table(cov: Coverage, top: int) -> Table:
    """The share of op time the targets cover, and the biggest uncovered ops: where a new target would pay."""
    table = Table(title=f"targets cover {100 * cov.share:.1f}% of the time spent in ops "
                        f"({cov.covered_us / 1e3:.1f} of {cov.ops_us / 1e3:.1f} ms)",
                  caption="uncovered: the outermost ops that are not targets, by time outside any target op")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("uncovered op", "left"), ("share of op time", "right"), ("ms", "right"))
    for name, justify in columns:
        table.add_column(name, justify=justify, no_wrap=True)
    for op, us in cov.uncovered[:top]:
        table.add_row(op, f"{100 * us / cov.ops_us:.1f}%", f"{us / 1e3:.2f}")
    rest = cov.uncovered[top:]
    if rest:
        us = sum(t for _, t in rest)
        table.add_row(f"({len(rest)} more ops)", f"{100 * us / cov.ops_us:.1f}%", f"{us / 1e3:.2f}")
    return table


def _profile(cfg: DictConfig) -> ProfileResult:
    """The built-in engine under torch.profiler, or a live engine (engine=vllm|sglang) under its own profiler."""
    if cfg.get("engine") is not None and cfg.engine.name != "builtin":
        from autotune.engine import profile_engine

        return profile_engine(cfg)[0]
    if cfg.workload.get("name") == "agent":
        raise UserError("workload=agent replays chat requests to a live engine: add engine=vllm (or sglang) with "
                        "engine.url=URL or engine.launch=true")
    return profile_serving(cfg)


def _print_serving(console: Console, result: ProfileResult) -> None:
    if result.load_report is not None:
        from autotune.engine.stats import LoadReport

        console.print(LoadReport.from_dict(result.load_report).table())
        console.print("(measured by the client while the server's profiler ran, which slows it: compare with runs "
                      "profiled the same way; `autotune bench` measures without the profiler)", soft_wrap=True)
        return
    if result.serve_report is None:
        console.print("serving latency: not in this trace (it was not written by `autotune profile`)")
        return
    from autotune.serve import ServeReport

    try:
        console.print(ServeReport.from_dict(result.serve_report).table())
    except (TypeError, KeyError):  # a report written by another version of the serve stage
        console.print(f"serving report: {result.serve_report.get('wall_s', '?')} s wall (see serve.json)")
        return
    console.print("(latencies measured under the profiler, which slows CPU ops: compare them with runs profiled "
                  "the same way, not with unprofiled serving)", soft_wrap=True)


def _print_files(console: Console, result: ProfileResult) -> None:
    files = ", ".join(sorted(p.name for p in result.run_dir.iterdir()))
    console.print(f"wrote {result.run_dir}/ ({files})", soft_wrap=True)
    console.print(f"environment: {environment_line(result.environment)}", soft_wrap=True)


def environment_line(environment: dict) -> str:
    """One line for the environment record, or what a foreign trace says about its machine."""
    engine = environment.get("engine")
    if engine:
        flags = " ".join(a for a in engine.get("flags") or [] if len(a) < 60)
        return (f"{engine.get('name')} {engine.get('version') or '(version unknown)'} serving {engine.get('model')}"
                f"{' with ' + flags if flags else ''}; client: "
                + environment_line({k: v for k, v in environment.items() if k != "engine"}))
    if environment.get("source") == "foreign trace":
        return f"foreign trace, GPU {environment.get('gpu') or 'not recorded'}"
    try:
        return Environment.from_dict(environment).summary()
    except TypeError:  # a record from an older version lacking fields
        return ", ".join(f"{k} {v}" for k, v in environment.items() if k in ("gpu", "torch", "triton", "cuda"))
