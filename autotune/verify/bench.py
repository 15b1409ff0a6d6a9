"""GPU timing in an isolated process: the candidate's, or the baselines' (never both in one process).

Started by `timing.measure` through `sandbox.run_isolated("autotune.verify.bench", payload, gpu=True)`.
Mode "candidate" imports the candidate file (as the worker does); mode "baseline" imports the target's
reference and times it eager and under torch.compile; the same harness times both, so that neither
side's numbers come from a different protocol.

The protocol, per shape and function (the practice of triton.testing.do_bench, made stricter):
- compile, autotune and the first calls happen in a warm-up that is not timed;
- three input sets stay alive (pointers differ between iterations) and before every timed call, outside
  the timed window, the activations get fresh random contents and a buffer of twice the L2 size is
  zeroed (the L2 holds nothing of the inputs);
- a call is timed with CUDA events around it, with a device-wide synchronize before the end event, so
  that work on other streams counts; the median time of an empty (synchronize-only) window is subtracted;
- `repetitions` rounds of `rep_ms` worth of calls; per round the median; reported: the median over rounds
  and the spread (p80 - p20) over all calls, in microseconds;
- the last calls' inputs and outputs go back to the judge, which checks them against its reference again.
Not run during development (no GPU there); the pure helpers are tested on CPU.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import torch

from autotune.sandbox.runner import child_main

SETS = 3  # input sets kept alive at once
SAMPLES = 3  # timed calls whose inputs and outputs are checked again by the judge


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


def _timed(fn, args: list) -> tuple[float, object]:
    """One call in a timed window: events around it, a device-wide synchronize before the end event."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    out = fn(*args) if fn is not None else None
    torch.cuda.synchronize()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0, out


def _calibrate(fn, sets: list[list], timing: dict) -> tuple[float, int]:
    """(median time of an empty window in us, calls per round); warms up first (compile, autotune)."""
    for args in sets:
        fn(*args)
    empty = statistics.median(_timed(None, [])[0] for _ in range(20))
    estimate = statistics.median(_timed(fn, sets[0])[0] for _ in range(5))
    for i in range(max(1, int(timing["warmup_ms"] * 1000 / max(estimate, 1.0)))):
        fn(*sets[i % SETS])
    return empty, min(2000, max(20, int(timing["rep_ms"] * 1000 / max(estimate, 1.0))))


def time_function(fn, sets: list[list], timing: dict, flush: torch.Tensor, gen: torch.Generator) -> dict:
    fresh = activations(sets[0])
    empty, n_calls = _calibrate(fn, sets, timing)
    rounds, every, samples = [], [], []
    for r in range(int(timing["repetitions"])):
        times = []
        for i in range(n_calls):
            args = sets[i % SETS]
            _refresh(args, fresh, gen)  # new contents, outside the timed window
            flush.zero_()  # evict the L2, outside the timed window
            us, out = _timed(fn, args)
            times.append(max(0.0, us - empty))
            if r == int(timing["repetitions"]) - 1 and i >= n_calls - SAMPLES:
                samples.append({"args": [a.detach().cpu().clone() if isinstance(a, torch.Tensor) else a for a in args],
                                "outputs": _host(out)})
        rounds.append(statistics.median(times))
        every += times
    return {"median_us": statistics.median(rounds), "spread_us": percentile(every, 0.8) - percentile(every, 0.2),
            "rounds_us": rounds, "empty_us": empty, "calls_per_round": n_calls, "samples": samples}


def _host(out) -> list:
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    return [o.detach().cpu().clone() if type(o) is torch.Tensor else None for o in outs]


def _functions(payload: dict) -> dict:
    if payload["mode"] == "candidate":
        from autotune.verify.worker import load

        return {"candidate": load(payload["source"], payload["entry"], Path.cwd())}
    from autotune.targets import get

    reference = get(payload["target"]).reference
    fns = {}
    if "eager" in payload["baselines"]:
        fns["eager"] = reference
    if "compile" in payload["baselines"]:
        fns["compile"] = torch.compile(reference, dynamic=False)
    return fns


def bench(payload: dict, send) -> dict:
    if not torch.cuda.is_available():
        return {"error": "no GPU visible inside the isolated process (check /dev/nvidia* permissions)"}
    props = torch.cuda.get_device_properties(0)
    flush = torch.empty(max(2 * int(getattr(props, "L2_cache_size", 0)), 256 << 20), dtype=torch.int8, device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(int(payload["seed"]))
    fns = _functions(payload)
    shapes = []
    for k, case in enumerate(payload["shapes"]):
        send("shape_start", index=k)
        sets = [[a.to("cuda") if isinstance(a, torch.Tensor) else a for a in s] for s in case["sets"]]
        shapes.append({name: time_function(fn, sets, payload["timing"], flush, gen) for name, fn in fns.items()})
    return {"gpu": torch.cuda.get_device_name(0), "shapes": shapes}


if __name__ == "__main__":
    child_main(bench)
