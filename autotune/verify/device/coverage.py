"""Coverage accounting: which launch signatures (kernel, constexpr values, warps and stages, grid rank, pointer
dtypes) the dry calls at served shapes made and which ran in a compared case, and which of a kernel's
@triton.autotune configurations ran. Each must have run somewhere: a GPU may take any of them at a served shape."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import triton.language as tl

from autotune.verify import protocol

UNCOVERED_LIMIT = 20  # dry calls (or autotune configurations) named in a coverage account


class Account:
    def __init__(self, kernels, value: Callable[[Any], Any]):
        self.kernels, self.value = kernels, value  # value: a launch argument's wire form -> the device's value
        self.executed: set = set()
        self.dry: dict = {}  # signature -> the dry case index it was first seen at
        self.probed: dict = {}  # signature -> the probes' dry indices that made it (not demanded: DryItem.probe)
        self.configs: dict[str, list[dict]] = {}
        self.launched_configs: set = set()

    def ran(self, launch) -> None:
        self.executed.add(self.signature(launch))
        if (i := self.config_of(launch)) is not None:
            self.launched_configs.add((launch.kernel, i))

    def seen_dry(self, launch, index, probe: bool = False) -> None:
        if probe:
            found = self.probed.setdefault(self.signature(launch), [])
            if index not in found:
                found.append(index)
        else:
            self.dry.setdefault(self.signature(launch), index)

    def dry_uncovered(self) -> protocol.DryUncovered:
        left = sorted(((i, sig) for sig, i in self.dry.items() if sig not in self.executed),
                      key=lambda pair: pair[0])[:UNCOVERED_LIMIT]
        return protocol.DryUncovered([i for i, _ in left], [self.probed.get(sig, [])[:64] for _, sig in left])

    def signature(self, launch) -> tuple:
        """What makes two launches of one kernel the same code path on a GPU: its constexpr values, warps and
        stages, grid rank and pointer dtypes; a configuration among the kernel's @triton.autotune configs left
        out (that every one of them runs somewhere is checked on its own: an autotuner may pick any at a served
        shape), one that is not (a pruner or hook made it) kept in."""
        fn = self.kernels.compiled[launch.kernel]
        params = [p.name for p in fn.params]
        bound = dict(zip(params, launch.args)) | {k: v for k, v in launch.kwargs.items() if k in params}
        listed = self.config_of(launch) is not None
        tuned = {k for c in self.configs.get(launch.kernel, []) for k in (c.get("kwargs") or {})} if listed else ()
        constexprs = tuple((p, _plain(bound.get(p))) for p in self.kernels.constexpr_args[launch.kernel]
                           if p not in tuned)
        dtypes = tuple(_plain(v)[1] for v in bound.values()
                       if isinstance(v, torch.Tensor) or (isinstance(v, tuple) and v[:1] == ("tensor",)))
        options = () if listed else (launch.kwargs.get("num_warps"), launch.kwargs.get("num_stages"))
        return (launch.kernel, constexprs, options, len(launch.grid), dtypes)

    def config_of(self, launch) -> int | None:
        """The index of the autotune configuration this launch ran with, or None (none listed matches)."""
        for i, config in enumerate(self.configs.get(launch.kernel, [])):
            wanted = config.get("kwargs") or {}
            if all(_plain(launch.kwargs.get(k)) == _plain(self.value(v)) for k, v in wanted.items()) and all(
                    launch.kwargs.get(k) in (None, config.get(k)) for k in ("num_warps", "num_stages")):
                return i
        return None

    def report(self) -> protocol.Coverage:
        uncovered = [{"dry_index": i, "signature": _describe(sig)} for sig, i in self.dry.items()
                     if sig not in self.executed]
        unrun = [{"kernel": name, "config": _describe_config(c)} for name, cs in self.configs.items()
                 for i, c in enumerate(cs) if (name, i) not in self.launched_configs]
        return protocol.Coverage(uncovered[:UNCOVERED_LIMIT], unrun[:UNCOVERED_LIMIT], len(self.executed))


def _plain(v):
    if isinstance(v, tl.constexpr):
        v = v.value
    if isinstance(v, tl.dtype):
        return str(v)
    if isinstance(v, torch.Tensor):
        return ("tensor", str(v.dtype).removeprefix("torch."))
    if isinstance(v, (list, tuple)):
        return tuple(_plain(x) for x in v)
    return v


def _describe(sig: tuple) -> str:
    kernel, constexprs, options, rank, dtypes = sig
    warps, stages = options or (None, None)
    parts = [f"{k}={v}" for k, v in constexprs] + [f"num_warps={warps}"] * (warps is not None) + [
        f"num_stages={stages}"] * (stages is not None)
    return f"{kernel}[{rank}-D grid]({', '.join(parts)}) on {'/'.join(dict.fromkeys(dtypes))} tensors"


def _describe_config(c: dict) -> str:
    kw = ", ".join(f"{k}={v}" for k, v in (c.get("kwargs") or {}).items())
    return f"triton.Config({{{kw}}}, num_warps={c.get('num_warps')}, num_stages={c.get('num_stages')})"
