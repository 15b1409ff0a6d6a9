"""The bandwidth roofline, measured, and the example kernels timed beside library kernels.

On a GPU, times come from `triton.testing.do_bench` (CUDA events, L2 cleared before each call, median).
On the CPU (the dry run) the same code runs with small sizes and says that nothing was measured: the
copy/reduce figures are the host's memory, and interpreter times are never reported as kernel times.
"""

from __future__ import annotations

import importlib
import importlib.util
import statistics
import time
from pathlib import Path

import torch

from autotune.targets import get as get_target
from autotune.targets.base import parse_dtype

# Library kernels to compare with, per target: (module, callable name, adapter to the target's arguments).
# Liger-Kernel's functional ops (liger_kernel.ops.*) take the same tensors in a few layouts.
LIGER = {
    "rms_norm": ("liger_kernel.ops.rms_norm", "LigerRMSNormFunction",
                 lambda f, x, w, eps: f.apply(x, w, eps)),
    "silu_and_mul": ("liger_kernel.ops.swiglu", "LigerSiLUMulFunction",
                     lambda f, x: f.apply(*x.chunk(2, dim=-1))),
}


def median_seconds(fn, device: str) -> float:
    """Median time of fn() in seconds: do_bench on a GPU, a plain clock on the CPU (dry run only)."""
    if device == "cuda":
        import triton.testing

        return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") / 1e3
    fn()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def roofline(device: str, nbytes: int) -> dict:
    """Copy (read + write) and read-reduce bandwidth over `nbytes` of fp32 random data, in GB/s."""
    from autotune.verify.timing import peak_bandwidth_gbps

    x = torch.rand(nbytes // 4, device=device)  # random, not zeros: zeros can run faster than data
    y = torch.empty_like(x)
    copy_s = median_seconds(lambda: y.copy_(x), device)
    reduce_s = median_seconds(lambda: x.sum(), device)
    gpu = torch.cuda.get_device_name(0) if device == "cuda" else None
    return {"device": device, "gpu": gpu, "bytes": nbytes, "measured": device == "cuda",
            "copy_gbps": 2 * nbytes / copy_s / 1e9, "reduce_gbps": nbytes / reduce_s / 1e9,
            "datasheet_gbps": peak_bandwidth_gbps(gpu, None) if gpu else None}


def fraction_of_roofline(target: str, shape, dtype: str, candidate_us: float, roofline_gbps: float) -> float:
    """The kernel's effective bandwidth (ideal bytes moved / its time) over the measured roofline: the target's
    bandwidth floor at that roofline over the kernel's time."""
    return get_target(target).floor_us(tuple(shape), parse_dtype(dtype), roofline_gbps) / candidate_us


def load_kernel(path: Path, entry: str):
    """An example kernel's entry function (our own committed, tested files, not agent output)."""
    spec = importlib.util.spec_from_file_location(f"selfcheck_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, entry)


def library_table(examples: dict[str, Path], device: str, dtype: str = "bfloat16") -> list[dict]:
    """Per target with a Liger kernel and per default shape: eager, our example and Liger, in us (GPU only)."""
    rows = []
    for name, (module, attr, call) in LIGER.items():
        if name not in examples:
            continue
        try:
            liger = getattr(importlib.import_module(module), attr)
        except ImportError as e:
            rows.append({"target": name, "note": f"liger-kernel not installed ({e.name})"})
            continue
        target, ours = get_target(name), load_kernel(examples[name], name)
        for shape in target.default_shapes:
            args = [a.to(device) if isinstance(a, torch.Tensor) else a
                    for a in target.make_inputs(shape, parse_dtype(dtype), torch.Generator().manual_seed(0), "normal")]
            rows.append(_library_row(name, shape, dtype, device, target.reference, ours,
                                     lambda *a, f=liger: call(f, *a), args))
    return rows


def _library_row(name, shape, dtype, device, reference, ours, liger, args) -> dict:
    ref = reference(*args)
    agree = {who: _close(fn(*args), ref) for who, fn in (("ours", ours), ("liger", liger))}
    row = {"target": name, "shape": list(shape), "dtype": dtype, "agrees_with_reference": agree}
    if device == "cuda":
        row.update({f"{who}_us": median_seconds(lambda fn=fn: fn(*args), device) * 1e6
                    for who, fn in (("eager", reference), ("ours", ours), ("liger", liger))})
    else:
        row["note"] = "timing: not measured (no GPU)"
    return row


def _close(got, ref) -> bool:
    got = got[0] if isinstance(got, (tuple, list)) else got
    ref = ref[0] if isinstance(ref, (tuple, list)) else ref
    return bool(torch.allclose(got.float(), ref.float(), rtol=2e-2, atol=2e-2))  # a sanity check, not the checker
