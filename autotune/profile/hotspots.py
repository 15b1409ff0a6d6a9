"""Hot spots: the op table's targets ranked by their share of serving time, with the Amdahl gain each could give.

A target's time is the sum of its op-table rows (GPU kernel time on a GPU trace, CPU time otherwise). A kernel
that is `s` times faster on a target that takes a share `p` of serving time saves at most
`gain = 1 - ((1 - p) + p / s)` of the end-to-end time; `profile.assumed_speedup` sets `s`.

`hotspots.json` (one per profile run; the checker takes its shapes from the newest one):
    {"run": str, "trace": str, "configuration": "eager" | "compiled", "serving_time_us": float,
     "assumed_speedup": float, "environment": {...},
     "hotspots": [{"target": str, "share": float, "calls": int, "total_us": float, "projected_gain": float,
                   "shapes": [{"shape": [int, ...], "dtype": "float32", "calls": int, "total_us": float}]}],
     "coverage": {"share": float, "ops_us": float, "covered_us": float,
                  "uncovered": [{"op": str, "time_us": float, "share": float}]}}
`configuration` is the serving configuration the trace measured (diagnose.configuration: vLLM with
`--enforce-eager`, or torch.compile as vLLM serves by default). Each hot spot reads into a `records.Hotspot`
(`hotspots_in`, `hotspot_for`), the coverage into a `records.Coverage`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from autotune.errors import UserError
from autotune.profile.optable import op_time_us
from autotune.records import Hotspot, ProfiledShape, amdahl_gain

__all__ = ["FILE", "amdahl_gain", "hotspot_for", "hotspots_in", "hotspots_record", "latest_hotspots",
           "rank_hotspots", "shapes_for"]

FILE = "hotspots.json"


def _shapes(target: str, rows: pd.DataFrame) -> tuple[ProfiledShape, ...]:
    """The target's case shapes with dtype, calls and time each, largest time first."""
    seen: dict[tuple, dict] = {}
    for case, dtype, calls, time_us in zip(rows["case_shape"], rows["dtype"], rows["calls"], rows["time_us"]):
        if not case:
            continue  # recorded without shapes (vLLM's default), or not laid out as its mapping says
        shape = tuple(int(d) for d in json.loads(case))
        entry = seen.setdefault((shape, dtype), {"shape": list(shape), "dtype": dtype, "calls": 0, "total_us": 0.0})
        entry["calls"] += int(calls)
        entry["total_us"] += float(time_us)
    ranked = sorted(seen.values(), key=lambda s: (-s["total_us"], s["shape"], s["dtype"]))
    return tuple(ProfiledShape.from_dict(s) for s in ranked)


def rank_hotspots(ops: pd.DataFrame, serving_time_us: float, assumed_speedup: float) -> list[Hotspot]:
    """One entry per target found in the op table, ranked by share of serving time (hotspots.json's list)."""
    if assumed_speedup <= 0:
        raise UserError(f"profile.assumed_speedup={assumed_speedup} must be > 0 (e.g. profile.assumed_speedup=2)")
    mapped = ops[ops["target"].astype(str) != ""].assign(time_us=lambda f: op_time_us(f))
    ranked = []
    for target, rows in mapped.groupby("target", sort=False):
        total_us = float(rows["time_us"].sum())
        share = total_us / serving_time_us if serving_time_us > 0 else 0.0
        ranked.append(Hotspot(target=str(target), share=share, calls=int(rows["calls"].sum()), total_us=total_us,
                              projected_gain=amdahl_gain(share, assumed_speedup), shapes=_shapes(str(target), rows)))
    return sorted(ranked, key=lambda h: (-h.share, h.target))


OUTLIER_SHARE = 0.25  # one call holding more than this share of its target's time (over OUTLIER_CALLS calls or more)
OUTLIER_CALLS = 10


def outlier_notes(ops: pd.DataFrame) -> list[str]:
    """Targets whose time is mostly one call (a first call's compile or autotuning, a page fault): their share
    is inflated by it, and the screen says so."""
    notes = []
    mapped = ops[ops["target"].astype(str) != ""]
    for target, rows in mapped.groupby("target", sort=False):
        total, longest, calls = float(rows["total_us"].sum()), float(rows["max_us"].max()), int(rows["calls"].sum())
        if calls >= OUTLIER_CALLS and total > 0 and longest > OUTLIER_SHARE * total:
            notes.append(f"outlier: one call of {target} took {longest / 1e3:.2f} ms, {100 * longest / total:.0f}% of "
                         f"its {total / 1e3:.2f} ms over {calls} calls (a first call's compile or autotuning?); its "
                         f"share is inflated by it: warm up longer (profile.warmup_requests) or profile more requests")
    return notes


def hotspots_record(run: str, trace: str, serving_time_us: float, assumed_speedup: float,
                    environment: dict, hotspots: list[Hotspot], coverage: dict | None = None,
                    configuration: str = "eager") -> dict[str, Any]:
    """The content of hotspots.json, keys in the documented order."""
    record = {"run": run, "trace": trace, "configuration": configuration, "serving_time_us": float(serving_time_us),
              "assumed_speedup": float(assumed_speedup), "environment": environment,
              "hotspots": [h.to_dict(with_profile=False) for h in hotspots]}
    if coverage is not None:
        record["coverage"] = coverage
    return record


def hotspots_in(record: dict | None) -> list[Hotspot]:
    """The ranked hot spots of a hotspots.json record, each with its profile's run, serving time and speedup."""
    record = record or {}
    return [Hotspot.from_dict(h).in_profile(record) for h in record.get("hotspots", [])]


def hotspot_for(target: str, record: dict | None) -> Hotspot | None:
    """The target's hot spot in a hotspots.json record; None when the profile did not see it."""
    return next((h for h in hotspots_in(record) if h.target == target), None)


def latest_hotspots(out_dir: str | Path) -> dict | None:
    """hotspots.json of the newest complete run under out_dir (runs in progress are hidden); None if none."""
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        return None
    runs = [d for d in out_dir.iterdir() if d.is_dir() and not d.name.startswith(".") and (d / FILE).is_file()]
    # Run names start with a sortable timestamp; the file time orders two runs of the same second.
    for run in sorted(runs, key=lambda d: (d.name[:15], (d / FILE).stat().st_mtime, d.name), reverse=True):
        try:
            return json.loads((run / FILE).read_text())
        except (OSError, json.JSONDecodeError):
            continue  # an unreadable record is skipped, not fatal: the next newest one is used
    return None


def shapes_for(target: str, hotspots: dict | None) -> list[ProfiledShape]:
    """The shapes the profile saw for a target, most time first; [] when it was not seen."""
    found = hotspot_for(target, hotspots)
    return list(found.shapes) if found else []
