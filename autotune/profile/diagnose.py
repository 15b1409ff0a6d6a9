"""What a trace cannot show, said plainly: a frontend trace, shapes not recorded, ops hidden in compiled regions.

- A vLLM server writes one trace per process; the API server's (the frontend) holds Python events and no
  torch ops, so nothing in it can map to a target: `refuse_frontend` says so and which file to give instead.
- Without `record_shapes` the op table has no shapes, so the checker would fall back to default shapes.
- With torch.compile (vLLM's default, no `--enforce-eager`) the small ops run inside Inductor's generated
  code, one `## Call CompiledFxGraph <key> ##` region per graph. Where the trace records Inductor's kernels
  (a GPU's, or a CPU's with `cpp.enable_kernel_profile`: `engine.compiled=true`), they map to targets by the ops
  they fuse (profile/inductor.py) and the profile measured the configuration users serve; where it does not, their
  share is reported with the flags that make them visible.

`configuration(trace)` names which of the two a profile measured: "eager" or "compiled"; hotspots.json keeps it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.errors import UserError
from autotune.profile import inductor
from autotune.profile.optable import HOST_CATEGORIES, complete_events, serving_time_us

COMPILED_MARKERS = ("CompiledFxGraph", "Torch-Compiled Region")

SHAPES_HOWTO = ("vLLM: --profiler-config '{\"profiler\": \"torch\", \"torch_profiler_dir\": DIR, "
                "\"torch_profiler_record_shapes\": true}'; SGLang: {\"record_shapes\": true} in the "
                "POST /start_profile body; torch: profile(record_shapes=True)")


def refuse_frontend(trace: Mapping[str, Any], path: str) -> None:
    """UserError for a trace without a single torch op: an API server's (frontend) trace, not a worker's."""
    if any(e["cat"] == "cpu_op" for e in complete_events(trace)):
        return
    python = sum(1 for e in trace["traceEvents"] if isinstance(e, dict) and e.get("cat") == "python_function")
    raise UserError(f"trace {path} has no torch ops ({python} Python events): it is a frontend trace, e.g. "
                    "vLLM's API server process, which runs no model. Give the worker's trace from the same "
                    "profiler directory (vLLM and SGLang write one file per process; the worker's is the one "
                    "with cpu_op events, usually the largest)")


def notes(trace: Mapping[str, Any]) -> list[str]:
    """One line per thing the reader should know about this trace's hot spots."""
    found = []
    if not shapes_recorded(trace):
        found.append("shapes were not recorded in this trace, so the hot spots have none (the checker would use "
                     f"the targets' default shapes); profile again with shapes on: {SHAPES_HOWTO}")
    compiled_us, regions = compiled_time_us(trace)
    kernels = inductor_kernels(trace)
    if regions and kernels:
        serving = serving_time_us(trace)
        share = compiled_us / serving if serving > 0 else 0.0
        found.append(f"the compiled configuration (torch.compile, vLLM's default): {100 * share:.1f}% of the serving "
                     f"time is inside {regions} compiled region call(s), whose {kernels} Inductor kernel call(s) map "
                     "to targets by the ops they fuse; a fused norm's or SiLU-and-mul's case is read from the GEMMs "
                     "beside it, rotary's is not recorded (the checker takes the target's own shapes for it)")
    elif regions:
        serving = serving_time_us(trace)
        share = compiled_us / serving if serving > 0 else 0.0
        found.append(f"{100 * share:.1f}% of the serving time is inside {regions} torch.compile region call(s) "
                     "(CompiledFxGraph), whose fused ops the op table cannot see; to attribute them as served, have "
                     "Inductor record its kernels (vLLM: --compilation-config '{\"inductor_compile_config\": "
                     "{\"cpp.enable_kernel_profile\": true}}' on a CPU, as engine.compiled=true launches it), or "
                     "rerun vLLM with --enforce-eager, and add --compilation-config '{\"ir_enable_torch_wrap\": "
                     "true}' so RMSNorm shows as vllm_ir::rms_norm / vllm_ir::fused_add_rms_norm (SGLang: "
                     "--disable-cuda-graph, without --enable-torch-compile)")
    return found


def inductor_kernels(trace: Mapping[str, Any]) -> int:
    """How many recorded calls of Inductor-generated kernels the trace holds."""
    return sum(1 for e in complete_events(trace) if e["cat"] == "cpu_op" and inductor.KERNEL.match(e["name"]))


def configuration(trace: Mapping[str, Any]) -> str:
    """Which serving configuration the trace measured: "compiled" (torch.compile regions) or "eager"."""
    return "compiled" if compiled_time_us(trace)[1] else "eager"


def shapes_recorded(trace: Mapping[str, Any]) -> bool:
    """The profiler's own `record_shapes` metadata (torch 2.x writes it), else whether any op has dims."""
    if "record_shapes" in trace:
        return bool(trace["record_shapes"])
    return any("Input Dims" in e.get("args", {}) for e in complete_events(trace) if e["cat"] == "cpu_op")


def compiled_time_us(trace: Mapping[str, Any]) -> tuple[float, int]:
    """(time, count) of the outermost compiled-region events: nested markers are not counted twice."""
    marked = sorted((e for e in complete_events(trace)
                     if e["cat"] in HOST_CATEGORIES and any(m in e["name"] for m in COMPILED_MARKERS)),
                    key=lambda e: (str(e.get("pid")), str(e.get("tid")), e["ts"], -e["dur"]))
    total, count, end, thread = 0.0, 0, float("-inf"), None
    for e in marked:
        if (e.get("pid"), e.get("tid")) != thread:
            thread, end = (e.get("pid"), e.get("tid")), float("-inf")
        if e["ts"] >= end:  # not inside the previous outermost region
            total, count, end = total + float(e["dur"]), count + 1, e["ts"] + e["dur"]
    return total, count
