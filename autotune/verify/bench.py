"""Timing in an isolated process: the candidate's, or the baselines' (never both in one process).

Started by `timing.measure` through `sandbox.run_isolated("autotune.verify.bench", payload, gpu=...)`, on the
device layer the payload names (autotune.accel: "cuda" on a GPU, "cpu" for the stand-in CI runs). Mode
"candidate" imports the candidate file; mode "baseline" times the target's reference eager, under
torch.compile and, where installed and it has the op, Liger-Kernel's. The same harness times both, so that
neither side's numbers come from a different protocol.

The protocol, per shape and function (the practice of triton.testing.do_bench, made stricter):
- compile, autotune and the first calls happen in a warm-up that is not timed;
- three input sets stay alive (pointers differ between iterations) and before every timed call, outside
  the timed window, the activations get fresh random contents and a buffer of twice the L2 size is
  zeroed (the L2 holds nothing of the inputs);
- a call is timed by the device layer's window (CUDA events with a device-wide synchronize before the end
  event, so that work on other streams counts); the median time of an empty window is subtracted;
- `repetitions` rounds of `rep_ms` worth of calls; per round the median; reported: the median over rounds
  and the spread (p80 - p20) over all calls, in microseconds;
- the last calls' inputs and outputs go back to the judge, which checks them against its reference again.
Every record says which device took it and whether it is a stand-in (`device`, `stand_in`).
"""

from __future__ import annotations

import collections
import dataclasses
import importlib
import statistics
from collections.abc import Callable
from pathlib import Path

import torch

from autotune import accel
from autotune.sandbox import audit, confine
from autotune.sandbox.runner import child_main, trim_traceback

SETS = 3  # input sets kept alive at once
SAMPLES = 3  # timed calls whose inputs and outputs are checked again by the judge
BASELINES = ("eager", "compile", "liger")

# Library kernels, per target: (module, callable, adapter to the target's arguments). Liger-Kernel's
# functional ops take the same tensors in a few layouts.
LIBRARIES: dict[str, tuple[str, str, Callable]] = {
    "rms_norm": ("liger_kernel.ops.rms_norm", "LigerRMSNormFunction", lambda f, x, w, eps: f.apply(x, w, eps)),
    "silu_and_mul": ("liger_kernel.ops.swiglu", "LigerSiLUMulFunction", lambda f, x: f.apply(*x.chunk(2, dim=-1))),
}

# The modules of the code that times the candidate: sealed before it is imported (autotune.sandbox.audit).
_SEALED = ("__main__", "autotune.verify.bench", "autotune.accel", "autotune.accel.cpu", "autotune.accel.cuda",
           "autotune.sandbox", "autotune.sandbox.runner", "autotune.sandbox.channel", "autotune.sandbox.audit",
           "autotune.sandbox.confine")


def activations(args: list) -> list[int]:
    """Indices of the activation arguments (the largest tensors); weights, cos/sin stay as given."""
    sizes = [a.numel() if isinstance(a, torch.Tensor) and a.is_floating_point() else -1 for a in args]
    largest = max(sizes)
    return [i for i, n in enumerate(sizes) if n == largest and n > 0]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def _refresh(args: list, fresh: list[int], gen: torch.Generator) -> None:
    for i in fresh:
        args[i].normal_(generator=gen)


def _calibrate(fn, sets: list[list], timing: dict, dev: accel.Accelerator) -> tuple[float, int]:
    """(median time of an empty window in us, calls per round); warms up first (compile, autotune)."""
    for args in sets:
        fn(*args)
    empty = statistics.median(dev.timed(None, [])[0] for _ in range(20))
    estimate = statistics.median(dev.timed(fn, sets[0])[0] for _ in range(5))
    for i in range(max(1, int(timing["warmup_ms"] * 1000 / max(estimate, 1.0)))):
        fn(*sets[i % SETS])
    return empty, min(2000, max(20, int(timing["rep_ms"] * 1000 / max(estimate, 1.0))))


def time_function(fn, sets: list[list], timing: dict, flush: torch.Tensor, gen: torch.Generator,
                  dev: accel.Accelerator) -> dict:
    fresh = activations(sets[0])
    empty, n_calls = _calibrate(fn, sets, timing, dev)
    rounds: list[float] = []
    every: list[float] = []
    samples = []
    last = int(timing["repetitions"]) - 1
    for r in range(last + 1):
        times = []
        for i in range(n_calls):
            args = sets[i % SETS]
            _refresh(args, fresh, gen)  # new contents, outside the timed window
            flush.zero_()  # evict the L2, outside the timed window
            us, out = dev.timed(fn, args)
            times.append(max(0.0, us - empty))
            if r == last and i >= n_calls - SAMPLES:
                samples.append({"args": [a.detach().cpu().clone() if isinstance(a, torch.Tensor) else a for a in args],
                                "outputs": _host(out)})
        rounds.append(statistics.median(times))
        every += times
    return {"median_us": statistics.median(rounds), "spread_us": percentile(every, 0.8) - percentile(every, 0.2),
            "rounds_us": rounds, "empty_us": empty, "calls_per_round": n_calls, "samples": samples}


def _host(out) -> list:
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    return [o.detach().cpu().clone() if type(o) is torch.Tensor else None for o in outs]


def _arm(dev: accel.Accelerator) -> audit.Guard:
    """The run-time layer the checker's host arms before it imports the candidate (audit hook, every loaded module
    frozen), with the timing code's modules sealed. Imported first: what Triton imports lazily on a kernel's
    first launch (the gluon import reads its caller's frame, which the hook denies; as the checker's worker
    does), and the host's loader. Not at the top of this module: `timing` imports it, and a process that
    imports triton before TRITON_INTERPRET is set cannot interpret kernels (autotune.kernels.interpreter_on)."""
    import triton.compiler.code_generator
    import triton.experimental.gluon._runtime
    import triton.language.extra.libdevice  # noqa: F401

    from autotune.verify.host import process  # noqa: F401

    workdir = str(Path.cwd())
    guard = audit.Guard(read=[workdir, *confine.python_paths()], write=[workdir], gpu=dev.sandbox_gpu)
    audit.freeze_modules()
    audit.seal_modules(_SEALED)
    guard.arm()
    return guard


def _candidate(payload: dict) -> dict[str, Callable]:
    """The candidate's entry function, imported as the checker's host process imports it (autotune.verify.host).

    Here its launcher runs with the real timing inputs: these are fresh random sets drawn for timing alone
    (not the correctness cases) and its outputs go back to the judge to be checked again, so nothing here is
    worth hiding from it. What is worth guarding is the timer, which shares this process: `_arm` runs first;
    the static allow-list already kept torch.cuda.*, monkey-patching and the like out of the source, and a
    time below the roofline floor is not believed."""
    from autotune.verify.host.process import load

    _, fn = load(payload["source"], payload["entry"], Path.cwd(), collections.Counter())
    return {"candidate": fn}


def _baselines(payload: dict, dev: accel.Accelerator) -> tuple[dict[str, Callable], dict[str, str]]:
    """(the baselines to time, {baseline: why it is absent}); an optional library that is not installed, or
    has no such op, is absent, not an error."""
    from autotune.targets import get

    target = payload["target"]
    reference = get(target).reference
    fns: dict[str, Callable] = {}
    absent: dict[str, str] = {}
    for name in payload["baselines"]:
        if name == "eager":
            fns[name] = reference
        elif name == "compile":
            fns[name] = torch.compile(reference, dynamic=False, backend=dev.compile_backend)
        elif name == "liger":
            found = _library(target)
            if isinstance(found, str):
                absent[name] = found
            else:
                fns[name] = found
        else:
            absent[name] = f"unknown baseline (known: {', '.join(BASELINES)})"
    return fns, absent


def _library(target: str) -> Callable | str:
    """Liger-Kernel's op for the target, or why there is none."""
    if target not in LIBRARIES:
        return f"Liger-Kernel has no {target} op"
    module, attr, call = LIBRARIES[target]
    try:
        op = getattr(importlib.import_module(module), attr)
    except ImportError as e:
        return f"liger-kernel is not installed ({e.name})"
    return lambda *args: call(op, *args)


def _time_all(fns: dict[str, Callable], sets: list[list], payload: dict, flush: torch.Tensor,
              gen: torch.Generator, dev: accel.Accelerator, absent: dict[str, str], label: dict) -> dict[str, dict]:
    """Each function's figures at one shape, labelled with the device that took them."""
    timed = {}
    for name, fn in fns.items():
        if name in absent:
            continue
        try:
            timed[name] = time_function(fn, sets, payload["timing"], flush, gen, dev)
        except Exception as e:
            if name != "liger":  # the candidate's and the reference's failures are real; a library's is a finding
                raise
            absent[name] = f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
            continue
        timed[name].update(label)
    return timed


def bench(payload: dict, send) -> dict:
    dev = accel.get(payload.get("accel", "cuda"))
    if not dev.available():
        return {"error": f"no {dev.name} device visible inside the isolated process (check /dev/nvidia* "
                         "permissions)"}
    props = dev.properties()
    flush = dev.flush_buffer()
    gen = dev.generator(int(payload["seed"]))
    label = {"device": props.name, "stand_in": props.stand_in}
    absent: dict[str, str] = {}
    guard = None
    try:
        if payload["mode"] == "candidate":
            guard = _arm(dev)
            fns = _candidate(payload)
        else:
            fns, absent = _baselines(payload, dev)
        shapes = []
        for k, case in enumerate(payload["shapes"]):
            send("shape_start", index=k)
            sets = [[dev.to_device(a) for a in s] for s in case["sets"]]
            shapes.append(_time_all(fns, sets, payload, flush, gen, dev, absent, label))
    except Exception as e:
        if guard is None:
            raise
        with guard.trusted():  # formatting a traceback reads its frames, which the hook denies the candidate
            return {"failed": trim_traceback(e, keep_files=(str(Path.cwd() / "candidate.py"),))}
    return {**label, "properties": dataclasses.asdict(props), "compile_backend": dev.compile_backend,
            "absent": absent, "shapes": shapes}


if __name__ == "__main__":
    child_main(bench)
