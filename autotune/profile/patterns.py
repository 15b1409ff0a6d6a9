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

SiLU-and-mul unfused (vLLM's and SGLang's `SiluAndMul.forward_native`: `silu(x[..., :I]) * x[..., I:]`):

    [aten::slice(x [T, 2I])] -> aten::silu([T, I]) -> [aten::slice(x)] -> aten::mul([T, I], [T, I])

is silu_and_mul with case shape (T, 2I), the slices (views, but 40 us each on vLLM's CPU build, as long as the
silu) counted with it. vLLM 0.32's CPU build runs every MLP's activation so: 4 per step.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

# Casts and views around the formula's ops that do no arithmetic of their own.
_QUIET = {"aten::to", "aten::_to_copy", "aten::type_as", "aten::view", "aten::reshape", "aten::result_type",
          "aten::empty_strided", "aten::copy_", "aten::detach"}
_RMS_NORM = ("aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul", "aten::mul")
# Views that slice the gate and the up half out of silu_and_mul's input
_VIEWS = {"aten::slice", "aten::narrow", "aten::chunk", "aten::split", "aten::split_with_sizes", "aten::select"}
PATTERN_OPS = {"rms_norm": "+".join(_RMS_NORM), "fused_add_rms_norm": "aten::add+" + "+".join(_RMS_NORM),
               "silu_and_mul": "aten::silu+aten::mul"}


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


def find_patterns(host: list[dict], parents: list[int], eligible: list[bool]) -> list[Match]:
    """Every unfused RMSNorm and SiLU-and-mul among the eligible host events (those inside no mapped op)."""
    found = []
    for run in _sibling_runs(host, parents, eligible):
        norms = _matches(host, run)
        taken = {i for m in norms for i in m.members}
        found.extend(norms)
        found.extend(_silu_and_muls(host, [i for i in run if i not in taken]))
    return found


def _sibling_runs(host: list[dict], parents: list[int], eligible: list[bool]) -> list[list[int]]:
    """The eligible ops (casts left out) of each (process, thread, parent), in time order."""
    siblings: dict[tuple, list[int]] = defaultdict(list)
    for i, e in enumerate(host):
        if eligible[i] and e.get("cat") == "cpu_op" and e["name"] not in _QUIET:
            siblings[(e.get("pid"), e.get("tid"), parents[i])].append(i)
    return [sorted(run, key=lambda i: host[i]["ts"]) for run in siblings.values()]


def _silu_and_muls(host: list[dict], run: list[int]) -> list[Match]:
    """aten::silu(a [.., I]) then, past views only, aten::mul(a', b) of the same shape; the slices of the
    [.., 2I] input just before the silu and between the two count with them."""
    found = []
    for k, i in enumerate(run):
        if host[i]["name"] != "aten::silu" or not _dims(host[i]) or not _dims(host[i])[0]:
            continue
        half = list(_dims(host[i])[0])
        whole = half[:-1] + [2 * half[-1]]
        before: list[int] = []
        j = k - 1
        while j >= 0 and host[run[j]]["name"] in _VIEWS and _dims(host[run[j]])[:1] == [whole]:
            before.insert(0, run[j])
            j -= 1
        between = []
        j = k + 1
        while j < len(run) and host[run[j]]["name"] in _VIEWS:
            between.append(run[j])
            j += 1
        if j < len(run) and host[run[j]]["name"] == "aten::mul" and _dims(host[run[j]])[:2] == [half, half]:
            found.append(Match("silu_and_mul", (*before, i, *between, run[j]), tuple(int(d) for d in whole), i))
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
