"""The bandwidth roofline, measured, and the example kernels timed beside library kernels.

Times come from the device layer (autotune.accel): on a GPU `triton.testing.do_bench` (CUDA events, L2 cleared
before each call, median); on the CPU stand-in (the dry run) the same code with small sizes and a host clock,
every figure labelled `stand_in`: the copy/reduce figures are the host's memory and interpreter times are not
kernel times.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
from collections.abc import Callable
from pathlib import Path

import torch

from autotune.accel import Accelerator
from autotune.targets import get as get_target
from autotune.targets.base import parse_dtype
from autotune.verify.bench import LIBRARIES


def roofline(dev: Accelerator, nbytes: int) -> dict:
    """Copy (read + write) and read-reduce bandwidth over `nbytes` of fp32 random data, in GB/s."""
    props = dev.properties()
    x = torch.rand(nbytes // 4, device=dev.torch_device)  # random, not zeros: zeros can run faster than data
    y = torch.empty_like(x)
    copy_s = dev.median_s(lambda: y.copy_(x))
    reduce_s = dev.median_s(lambda: x.sum())
    return {"device": dev.name, "gpu": None if props.stand_in else props.name, "bytes": nbytes,
            "measured": not props.stand_in, "stand_in": props.stand_in,
            "copy_gbps": 2 * nbytes / copy_s / 1e9, "reduce_gbps": nbytes / reduce_s / 1e9,
            "datasheet_gbps": props.peak_bandwidth_gbps}


def fraction_of_roofline(target: str, shape, dtype: str, candidate_us: float, roofline_gbps: float) -> float | None:
    """The kernel's effective bandwidth (ideal bytes moved / its time) over the measured roofline: the target's
    bandwidth floor at that roofline over the kernel's time."""
    floor = get_target(target).floor_us(tuple(shape), parse_dtype(dtype), roofline_gbps)
    return None if floor is None or candidate_us <= 0 else floor / candidate_us


def load_kernel(path: Path, entry: str):
    """An example kernel's entry function (our own committed, tested files, not agent output)."""
    spec = importlib.util.spec_from_file_location(f"selfcheck_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, entry)


def library_table(examples: dict[str, Path], dev: Accelerator, dtype: str = "bfloat16",
                  smallest: bool = False) -> list[dict]:
    """Per target with a Liger kernel and per default shape (`smallest`: only the smallest, for the interpreter):
    eager, our example and Liger, in us (on the CPU stand-in: labelled so, and Liger's failure under the
    interpreter is the row's note)."""
    rows = []
    for name, (module, attr, call) in LIBRARIES.items():
        if name not in examples:
            continue
        try:
            liger = getattr(importlib.import_module(module), attr)
        except ImportError as e:
            rows.append({"target": name, "note": f"liger-kernel not installed ({e.name})"})
            continue
        target, ours = get_target(name), load_kernel(examples[name], name)
        shapes = [min(target.default_shapes, key=math.prod)] if smallest else target.default_shapes
        for shape in shapes:
            args = [dev.to_device(a) for a in
                    target.make_inputs(shape, parse_dtype(dtype), torch.Generator().manual_seed(0), "normal")]
            fns = {"eager": target.reference, "ours": ours, "liger": _bound(call, liger)}
            rows.append(_library_row(name, shape, dtype, dev, fns, args))
    return rows


def _bound(fn: Callable, *bound) -> Callable:
    """fn with its first arguments given (a loop's variable bound now, not when the lambda runs)."""
    return lambda *args: fn(*bound, *args)


def _library_row(name: str, shape, dtype: str, dev: Accelerator, fns: dict, args: list) -> dict:
    ref = fns["eager"](*args)
    row: dict = {"target": name, "shape": list(shape), "dtype": dtype, "device": dev.properties().name,
                 "stand_in": dev.stand_in, "agrees_with_reference": {}}
    notes = []
    for who, fn in fns.items():
        try:
            if who != "eager":
                row["agrees_with_reference"][who] = _close(fn(*args), ref)
            row[f"{who}_us"] = dev.median_s(_bound(fn, *args)) * 1e6
        except Exception as e:  # a library's failure (Liger under the interpreter) is a finding, not a crash
            if who == "eager":
                raise
            row[f"{who}_us"] = None
            notes.append(f"{who} failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:160])
    if dev.stand_in:
        notes.insert(0, "CPU stand-in times (interpreter, host clock): not a GPU's")
    row["note"] = "; ".join(notes)
    return row


def _close(got, ref) -> bool:
    got = got[0] if isinstance(got, (tuple, list)) else got
    ref = ref[0] if isinstance(ref, (tuple, list)) else ref
    return bool(torch.allclose(got.float(), ref.float(), rtol=2e-2, atol=2e-2))  # a sanity check, not the checker
