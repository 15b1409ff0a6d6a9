"""A torch-profiler trace (Chrome/Kineto JSON) turned into the op table, one row per (op, input shapes, dtype).

Columns: `op, target, input_shapes, case_shape, dtype, calls, total_us, self_us, device_us, share`.
- `total_us` is the CPU wall time of the op's calls, children included; `self_us` subtracts the time of the
  ops nested directly inside it. Nesting is computed per (pid, tid): on one thread, an op that starts before
  the enclosing op ends is inside it.
- `device_us` is the time of the GPU kernels (and memcpy/memset) the op launched, its child ops' kernels
  included; empty on a CPU-only trace. A kernel joins its launching `cuda_runtime` event through
  `args.correlation`, and that event joins the enclosing cpu_op through `args["External id"]`.
- `share` is the op's time over the serving time: device time on a GPU trace, CPU time otherwise.
- `target` is the target the op implements (profile/opmap.py: our `autotune::<target>` dispatch points, the
  targets' declared foreign ops, the user's profile.target_map). An op nested inside an op that maps to a
  target (`aten::_softmax` under `autotune::softmax`, `aten::linear` under `autotune::linear`) is not counted
  again, whichever target it maps to. An unfused RMSNorm (aten::pow, mean, add, rsqrt, mul, mul side by side)
  or SiLU-and-mul (aten::silu, aten::mul; profile/patterns.py) outside any mapped op is one row, its op named
  after the sequence, e.g. `aten::silu+aten::mul`, its time the sum of its ops'.
- `input_shapes` lists every argument's dims as recorded; `case_shape` is the target's case read from them
  by the op's mapping (vLLM's rotary: query [T, H*D] at argument 1 -> [T, H, D]), '' when the trace did not
  record shapes; `dtype` is the case tensor's.

Serving time: the duration of our `autotune::serve` window when the trace has one; for a foreign trace
(vLLM, SGLang), the span of its profiled window, from the first recorded event's start to the last one's end.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import gzip
import json
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from autotune import targets
from autotune.errors import UserError
from autotune.profile import inductor
from autotune.profile.opmap import MappedOp, OpMap, declared_map
from autotune.profile.patterns import Match, find_patterns
from autotune.records import Coverage
from autotune.targets.base import ForeignOp

COLUMNS = ["op", "target", "input_shapes", "case_shape", "dtype", "calls", "total_us", "max_us", "self_us", "device_us",
           "share"]
SERVE_SPAN = "autotune::serve"  # the record_function around the profiled serving window
META_ENVIRONMENT = "autotune_environment"  # trace metadata keys written by `autotune profile`
META_SERVE = "autotune_serve"
HOST_CATEGORIES = ("cpu_op", "user_annotation")
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
WINDOW_CATEGORIES = HOST_CATEGORIES + DEVICE_CATEGORIES + LAUNCH_CATEGORIES

# Kineto writes tensor dtypes as C++ type names in "Input type"; non-tensor arguments are "Scalar" etc.
_CPP_DTYPES = {"float": "float32", "double": "float64", "c10::Half": "float16", "c10::BFloat16": "bfloat16",
               "long int": "int64", "int": "int32", "short int": "int16", "signed char": "int8",
               "unsigned char": "uint8", "bool": "bool", "c10::Float8_e4m3fn": "float8_e4m3fn",
               "c10::Float8_e5m2": "float8_e5m2"}
_NOT_TENSORS = {"", "Scalar", "ScalarList", "GenericList", "TensorList"}


def read_trace(path: str | Path) -> dict[str, Any]:
    """The trace JSON as a dict; gzip is recognised by its magic bytes. UserError if missing or corrupt."""
    path = Path(path)
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "not found"
        raise UserError(f"trace file {path} {what} (give the path of a torch-profiler trace, .json or .json.gz)")
    try:
        raw = path.read_bytes()
        text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        trace = json.loads(text)
    except (OSError, EOFError, zlib.error) as e:
        raise UserError(f"trace file {path} is not a readable gzip file ({e}); re-export or re-copy it") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"trace file {path} is not valid JSON ({e}); give a torch-profiler trace") from None
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise UserError(f"trace file {path} has no traceEvents list, so it is not a torch-profiler trace "
                        "(export one with prof.export_chrome_trace)")
    return trace


def complete_events(trace: Mapping[str, Any]) -> list[dict]:
    """The duration ('X') events of the categories the op table reads."""
    return [e for e in trace["traceEvents"]
            if isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") in WINDOW_CATEGORIES
            and isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))
            and isinstance(e.get("name"), str) and isinstance(e.get("args", {}), dict)]


def serving_time_us(trace: Mapping[str, Any]) -> float:
    """Our serving window's duration, else the span of the trace's profiled window (see the module doc)."""
    events = complete_events(trace)
    spans = [e for e in events if e["cat"] == "user_annotation" and e.get("name") == SERVE_SPAN]
    if spans:
        return float(sum(e["dur"] for e in spans))
    if not events:
        return 0.0
    return float(max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events))


def has_device_events(trace: Mapping[str, Any]) -> bool:
    return any(e["cat"] in DEVICE_CATEGORIES for e in complete_events(trace))


def _parents(host: list[dict]) -> list[int]:
    """For each host event, the index of the event it is nested in on its thread (-1 at the top level)."""
    parents = [-1] * len(host)
    order = sorted(range(len(host)), key=lambda i: (str(host[i].get("pid")), str(host[i].get("tid")),
                                                    host[i]["ts"], -host[i]["dur"]))
    stack: list[int] = []
    thread = None
    for i in order:
        e = host[i]
        if (e.get("pid"), e.get("tid")) != thread:
            thread, stack = (e.get("pid"), e.get("tid")), []
        while stack and e["ts"] >= host[stack[-1]]["ts"] + host[stack[-1]]["dur"]:
            stack.pop()
        parents[i] = stack[-1] if stack else -1
        stack.append(i)
    return parents


def _device_us(host: list[dict], parents: list[int], events: list[dict]) -> list[float]:
    """GPU time launched by each host event, its children's launches included."""
    launched_by = {e["args"].get("correlation"): e["args"]["External id"]
                   for e in events if e["cat"] in LAUNCH_CATEGORIES and "External id" in e.get("args", {})}
    by_external = {e["args"]["External id"]: i for i, e in enumerate(host) if "External id" in e.get("args", {})}
    device = [0.0] * len(host)
    for k in (e for e in events if e["cat"] in DEVICE_CATEGORIES):
        args = k.get("args", {})
        external = launched_by.get(args.get("correlation"), args.get("External id"))
        i = by_external.get(external, -1)
        while i != -1:
            device[i] += k["dur"]
            i = parents[i]
    return device


def _dtype(types: list) -> str:
    """The dtype of the first tensor argument, as torch names it ('float32'); '' when there is none."""
    for t in types or ():
        if t not in _NOT_TENSORS:
            return _CPP_DTYPES.get(t, t)
    return ""


def _inside_mapped(parents: list[int], mapped: list[MappedOp | None]) -> list[bool]:
    """Whether each event is, or is nested in, an op that maps to a target (its implementation's ops)."""
    inside = [False] * len(parents)
    for i in range(len(parents)):
        p = i
        while p != -1 and not mapped[p]:
            p = parents[p]
        inside[i] = p != -1
    return inside


def _targets(parents: list[int], own: list[str]) -> list[str]:
    """Each event's target, blank when an enclosing op already counts for a target: its time is inside that op's
    (the reference of `autotune::paged_attention` runs an `aten::_softmax`, which maps to softmax). The one rule
    both the op table and `coverage` count by."""
    return [t if t and not any(own[a] for a in _ancestors(parents, i)) else "" for i, t in enumerate(own)]


def _case_shape(e: dict, mapped: MappedOp | None) -> str:
    """The target's case shape (JSON) from the call's recorded arguments; '' when they do not give one."""
    if mapped is None:
        return ""
    args = e.get("args", {})
    try:
        shape = mapped.foreign.case_shape(list(args.get("Input Dims") or []), list(args.get("Concrete Inputs") or []),
                                          targets.get(mapped.target).shape_from_dims)
    except (TypeError, ValueError, IndexError):
        return ""  # no shapes recorded, or the call is not laid out as the map says
    return json.dumps(list(shape))


def _row(e: dict, target: str, case: tuple[str, str]) -> dict:
    return {"op": e["name"], "target": target, "input_shapes": json.dumps(e.get("args", {}).get("Input Dims", [])),
            "case_shape": case[0] if target else "", "dtype": case[1], "total_us": float(e["dur"])}


def _case_dtype(e: dict, mapped: MappedOp | None) -> str:
    return _dtype(e.get("args", {}).get("Input type", [])[mapped.foreign.case_arg if mapped else 0:])


def _mapping(e: dict, op_map: OpMap) -> MappedOp | None:
    """What a host event computes: its name in the op map, else an Inductor kernel's fused ops (profile/inductor.py)."""
    if e["cat"] != "cpu_op":
        return None
    found = op_map.get(e["name"])
    target = None if found else inductor.target_of(e["name"])
    return MappedOp(target, ForeignOp(e["name"])) if target else found


def _cases(host: list[dict], parents: list[int], mapped: list[MappedOp | None]) -> list[tuple[str, str]]:
    """Each event's (case shape as JSON, the case's dtype), '' where unknown: read from its arguments, or for an
    Inductor kernel without them, from the GEMMs around it among its siblings (inductor.case_from_gemm)."""
    cases = [(_case_shape(e, m), _case_dtype(e, m)) for e, m in zip(host, mapped)]
    siblings: dict[tuple, list[int]] = collections.defaultdict(list)  # (pid, tid, parent) -> its children in order
    for i in sorted(range(len(host)), key=lambda i: host[i]["ts"]):
        siblings[(host[i].get("pid"), host[i].get("tid"), parents[i])].append(i)
    for row in siblings.values():
        gemms = [j for j in row if getattr(mapped[j], "target", "") == "linear"]  # in time order, as the row
        starts = [host[j]["ts"] for j in gemms]
        for i in row:
            m = mapped[i]
            if m is not None and not cases[i][0] and inductor.KERNEL.match(host[i]["name"]):
                k = bisect.bisect_left(starts, host[i]["ts"])  # gemms[k - 1] starts before the kernel, gemms[k] not
                before, after = gemms[k - 1:k] if k else [], gemms[k:k + 1]
                case = inductor.case_from_gemm(m.target, cases[before[0]][0] if before else "",
                                               cases[after[0]][0] if after else "")
                cases[i] = (case, cases[(before or after)[0]][1] if case else "")  # the GEMM's dtype with its shape
    return cases


def _pattern_row(host: list[dict], match: Match, self_us: list[float], device: list[float]) -> dict:
    """One row for an unfused sequence: its members' time, the case shape and x's dtype."""
    return {"op": match.op, "target": match.target, "input_shapes": json.dumps([list(match.shape)]),
            "case_shape": json.dumps(list(match.shape)),
            "dtype": _dtype(host[match.dtype_index].get("args", {}).get("Input type", [])),
            "total_us": sum(float(host[i]["dur"]) for i in match.members),
            "self_us": sum(self_us[i] for i in match.members), "device_us": sum(device[i] for i in match.members)}


@dataclasses.dataclass(frozen=True)
class _Attributed:
    """A trace's host events with what each computes: the one attribution the op table and the coverage share."""

    host: list[dict]
    parents: list[int]
    on_gpu: bool
    device: list[float]  # GPU time each launched, its children's included (zeros on a CPU trace)
    mapped: list[MappedOp | None]
    targets: list[str]  # each event's target, blank inside another target op (_targets)
    matches: list[Match]  # unfused sequences outside any mapped op
    cases: list[tuple[str, str]]  # each event's (case shape as JSON, its dtype), '' when unknown

    @classmethod
    def of(cls, trace: Mapping[str, Any], op_map: OpMap) -> _Attributed:
        events = complete_events(trace)
        host = [e for e in events if e["cat"] in HOST_CATEGORIES]
        parents = _parents(host)
        on_gpu = any(e["cat"] in DEVICE_CATEGORIES for e in events)
        device = _device_us(host, parents, events) if on_gpu else [0.0] * len(host)
        mapped = [_mapping(e, op_map) for e in host]
        targets_of = _targets(parents, [m.target if m else "" for m in mapped])
        matches = find_patterns(host, parents, [not x for x in _inside_mapped(parents, mapped)])
        return cls(host, parents, on_gpu, device, mapped, targets_of, matches, _cases(host, parents, mapped))

    def time_us(self) -> list[float]:
        """The time that counts per event: GPU kernel time on a GPU trace, CPU time otherwise."""
        return self.device if self.on_gpu else [float(e["dur"]) for e in self.host]

    def covered(self) -> list[bool]:
        """Whether each event counts for a target: a target op outside any other, or a member of a sequence."""
        members = {i for m in self.matches for i in m.members}
        return [bool(t) or i in members for i, t in enumerate(self.targets)]


def op_table(trace: Mapping[str, Any], op_map: OpMap | None = None) -> pd.DataFrame:
    """The op table of a trace (columns COLUMNS), sorted by share, largest first; op_map: opmap.build_map()."""
    at = _Attributed.of(trace, declared_map() if op_map is None else op_map)
    host = at.host
    self_us = [float(e["dur"]) for e in host]
    for i, p in enumerate(at.parents):
        if p != -1:
            self_us[p] -= host[i]["dur"]
    in_match = {i for m in at.matches for i in m.members}
    rows = [{**_row(e, at.targets[i], at.cases[i]), "self_us": self_us[i], "device_us": at.device[i]}
            for i, e in enumerate(host) if e["cat"] == "cpu_op" and i not in in_match]
    rows += [_pattern_row(host, m, self_us, at.device) for m in at.matches]
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype="float64" if c.endswith(("_us", "share")) else "object")
                             for c in COLUMNS})
    frame = pd.DataFrame(rows)
    table = (frame.groupby(["op", "target", "input_shapes", "case_shape", "dtype"], sort=False, dropna=False)
             .agg(calls=("total_us", "size"), total_us=("total_us", "sum"), max_us=("total_us", "max"),
                  self_us=("self_us", "sum"),
                  device_us=("device_us", "sum"))
             .reset_index())
    if not at.on_gpu:
        table["device_us"] = float("nan")  # no GPU kernels in the trace: left empty, not zero
    serving = serving_time_us(trace)
    table["share"] = op_time_us(table) / serving if serving > 0 else 0.0
    return table.sort_values(["share", "op"], ascending=[False, True], ignore_index=True)[COLUMNS]


def coverage(trace: Mapping[str, Any], op_map: OpMap) -> Coverage:
    """The share of the time spent in ops that targets hold, and the uncovered rest by op name (records.Coverage).

    Each op counts once, at its outermost level: an op inside another op is part of the outer one's time. The
    ops that count for a target are the op table's: target ops (not inside another target op) and the members of
    an unfused sequence (an RMSNorm as aten::pow, mean, ...; aten::silu + aten::mul). One inside a non-target op
    (vLLM's `_C::rms_norm` under a Python-level wrapper op) covers that much of the outer op's time; the rest of
    the outer op is listed under the outer op's name."""
    at = _Attributed.of(trace, op_map)
    time, covered, host = at.time_us(), at.covered(), at.host
    is_op = [e["cat"] == "cpu_op" for e in host]
    ops_us, covered_us = 0.0, 0.0
    inside: dict[int, float] = collections.defaultdict(float)  # an outer op's time in covered ops below it
    outermost = {}
    for i in range(len(host)):
        if is_op[i]:
            outermost[i] = _outermost_op(at.parents, is_op, i)
    for i, outer in outermost.items():
        if i == outer:
            ops_us += time[i]
        if covered[i] and not any(covered[a] for a in _ancestors(at.parents, i)):
            covered_us += time[i]
            inside[outer] += time[i]
    rest: dict[str, float] = collections.defaultdict(float)
    for i, outer in outermost.items():
        if i == outer and not covered[i]:
            rest[host[i]["name"]] += max(0.0, time[i] - inside[i])
    most_first = sorted(rest.items(), key=lambda kv: kv[1], reverse=True)  # as Counter.most_common: ties in order
    return Coverage(ops_us, covered_us, tuple((op, us) for op, us in most_first if us > 0))


def _outermost_op(parents: list[int], is_op: list[bool], i: int) -> int:
    """The outermost op around event i (user annotations are not ops), i itself at the top."""
    outer = i
    for a in _ancestors(parents, i):
        outer = a if is_op[a] else outer
    return outer


def _ancestors(parents: list[int], i: int) -> Iterator[int]:
    p = parents[i]
    while p != -1:
        yield p
        p = parents[p]


def op_time_us(ops: pd.DataFrame) -> pd.Series:
    """The time that counts per row: the GPU kernels' time when the trace has any, else CPU time."""
    return ops["device_us"].where(ops["device_us"].notna(), ops["total_us"])


def read_op_table(path: str | Path) -> pd.DataFrame:
    """An op table written by `autotune profile` (ops.csv or ops.parquet), with blanks as ''."""
    path = Path(path)
    frame = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path, keep_default_na=False,
                                                                                 na_values={"device_us": [""]})
    if "case_shape" not in frame:  # a table written before the column existed
        frame["case_shape"] = ""
    for c in ("target", "dtype", "input_shapes", "case_shape"):
        frame[c] = frame[c].fillna("").astype(str)
    return frame[COLUMNS]
