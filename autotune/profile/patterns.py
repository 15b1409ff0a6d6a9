"""Unfused op sequences that compute a target, found among sibling ops of one thread.

An engine that runs RMSNorm in plain PyTorch (vLLM's `forward_static` on the CPU without
`ir_enable_torch_wrap`, SGLang's `forward_native`, Hugging Face's LlamaRMSNorm) leaves no op named for it,
only the aten ops of its formula, side by side under the same parent:

    [aten::add(x [T, W], residual [T, W])]   present for fused_add_rms_norm
    aten::pow(x [T, W], 2) -> aten::mean([T, W]) -> aten::add -> aten::rsqrt -> aten::mul -> aten::mul(weight [W])

(dtype casts, `aten::to` and its relatives, may sit between them). Such a run is attributed to rms_norm, or
fused_add_rms_norm with the leading residual add, with case shape (T, W) and x's dtype, so it ranks like the
named op an engine with a fused kernel would have called. In vLLM 0.32's CPU trace of a 4-layer Llama each
step has 9 of them (306 in 34 steps).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

# Casts and views around the formula's ops that do no arithmetic of their own.
_QUIET = {"aten::to", "aten::_to_copy", "aten::type_as", "aten::view", "aten::reshape", "aten::result_type",
          "aten::empty_strided", "aten::copy_", "aten::detach"}
_RMS_NORM = ("aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul", "aten::mul")
PATTERN_OPS = {"rms_norm": "+".join(_RMS_NORM), "fused_add_rms_norm": "aten::add+" + "+".join(_RMS_NORM)}


@dataclasses.dataclass(frozen=True)
class Match:
    """One run of host events (indices) that computes `target` on a case of `shape`."""

    target: str
    members: tuple[int, ...]
    shape: tuple[int, ...]
    dtype_index: int  # the member whose first input's dtype is the case's (aten::pow's, x)

    @property
    def op(self) -> str:
        return PATTERN_OPS[self.target]


def find_rms_norms(host: list[dict], parents: list[int], eligible: list[bool]) -> list[Match]:
    """Every unfused RMSNorm among the eligible host events (those inside no mapped op)."""
    siblings: dict[tuple, list[int]] = defaultdict(list)
    for i, e in enumerate(host):
        if eligible[i] and e.get("cat") == "cpu_op" and e["name"] not in _QUIET:
            siblings[(e.get("pid"), e.get("tid"), parents[i])].append(i)
    found = []
    for run in siblings.values():
        run.sort(key=lambda i: host[i]["ts"])
        found.extend(_matches(host, run))
    return found


def _matches(host: list[dict], run: list[int]) -> list[Match]:
    names = [host[i]["name"] for i in run]
    found = []
    for k in range(len(run) - len(_RMS_NORM) + 1):
        if tuple(names[k:k + len(_RMS_NORM)]) != _RMS_NORM:
            continue
        members = run[k:k + len(_RMS_NORM)]
        shape = _normed_shape(host, members)
        if shape is None:
            continue
        if k > 0 and names[k - 1] == "aten::add" and _dims(host[run[k - 1]])[:2] == [list(shape)] * 2:
            found.append(Match("fused_add_rms_norm", (run[k - 1], *members), shape, members[0]))
        else:
            found.append(Match("rms_norm", tuple(members), shape, members[0]))
    return found


def _normed_shape(host: list[dict], members: list[int]) -> tuple[int, ...] | None:
    """x's shape when the run is x * rsqrt(mean(x^2) + eps) * weight over the last dim, else None."""
    pow_, mean, _, _, _, scale = (host[i] for i in members)
    x = _dims(pow_)[0] if _dims(pow_) else []
    concrete = pow_.get("args", {}).get("Concrete Inputs") or ["", ""]
    if not x or concrete[1:2] != ["2"] or (_dims(mean)[:1] != [x]):
        return None
    weight = [x[-1]]
    if weight not in _dims(scale)[:2] or x not in _dims(scale)[:2]:
        return None  # the last multiply is not by a [W] weight
    return tuple(int(d) for d in x)


def _dims(e: dict) -> list:
    return list(e.get("args", {}).get("Input Dims") or [])
