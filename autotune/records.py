"""The profile's typed records: a target's hot spot and the shapes it was called with, and the Amdahl gain.

Every stage after the profile (the checker's case plan and timing, the agent's prompt, the evidence page,
the ledger) reads these, never the dicts of hotspots.json: `Hotspot.from_dict(entry)` reads an entry of
hotspots.json (or of the ledger), `to_dict()` writes it back with the same keys.

    ProfiledShape(shape=(64, 4096), dtype="bfloat16", calls=120, total_us=930.5)
    Hotspot(target="rms_norm", share=0.08, calls=120, total_us=930.5, projected_gain=0.04, shapes=(...,))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any


def amdahl_gain(share: float, speedup: float) -> float:
    """The fraction of end-to-end time saved when a part taking `share` of it runs `speedup` times faster."""
    return 1.0 - ((1.0 - share) + share / speedup)


@dataclasses.dataclass(frozen=True)
class ProfiledShape:
    """One (case shape, dtype) a target was called with in the profile: how often and for how long."""

    shape: tuple[int, ...]
    dtype: str  # torch's name: "float32", "bfloat16"
    calls: int
    total_us: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "calls", int(self.calls or 0))
        object.__setattr__(self, "total_us", float(self.total_us or 0.0))

    @classmethod
    def of(cls, value: ProfiledShape | Mapping | Iterable) -> ProfiledShape:
        """A ProfiledShape from itself, a hotspots.json entry, or a `(shape, dtype, calls)` tuple."""
        if isinstance(value, ProfiledShape):
            return value
        if isinstance(value, Mapping):
            return cls.from_dict(value)
        shape, dtype, calls = value
        return cls(tuple(shape), str(dtype), int(calls))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ProfiledShape:
        return cls(tuple(d.get("shape") or ()), str(d.get("dtype", "?")), int(d.get("calls") or 0),
                   float(d.get("total_us") or 0.0))

    def to_dict(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dtype": self.dtype, "calls": self.calls, "total_us": self.total_us}


@dataclasses.dataclass(frozen=True)
class Hotspot:
    """A target's share of serving time in one profile, and the end-to-end gain a faster kernel could give."""

    target: str
    share: float  # of serving time
    calls: int
    total_us: float
    projected_gain: float  # amdahl_gain(share, the profile's assumed speedup)
    shapes: tuple[ProfiledShape, ...] = ()  # most time first
    # the profile it comes from; set by `in_profile` when the hot spot leaves its hotspots.json
    run: str | None = None
    serving_time_us: float | None = None
    assumed_speedup: float | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Hotspot:
        return cls(target=str(d["target"]), share=float(d.get("share") or 0.0), calls=int(d.get("calls") or 0),
                   total_us=float(d.get("total_us") or 0.0), projected_gain=float(d.get("projected_gain") or 0.0),
                   shapes=tuple(ProfiledShape.from_dict(s) for s in d.get("shapes") or ()),
                   run=d.get("run"), serving_time_us=_float(d.get("serving_time_us")),
                   assumed_speedup=_float(d.get("assumed_speedup")))

    def to_dict(self, *, with_profile: bool = True) -> dict[str, Any]:
        """hotspots.json's entry (`with_profile=False`), or that plus the profile's run, serving time and speedup."""
        d = {"target": self.target, "share": self.share, "calls": self.calls, "total_us": self.total_us,
             "projected_gain": self.projected_gain, "shapes": [s.to_dict() for s in self.shapes]}
        if with_profile:
            d.update(run=self.run, serving_time_us=self.serving_time_us, assumed_speedup=self.assumed_speedup)
        return d

    def summary(self) -> dict[str, Any]:
        """The few figures the ledger keeps per hot spot."""
        return {"target": self.target, "share": self.share, "calls": self.calls, "projected_gain": self.projected_gain}

    def in_profile(self, record: Mapping[str, Any]) -> Hotspot:
        """This hot spot with its profile's run, serving time and assumed speedup (from hotspots.json's top level)."""
        return dataclasses.replace(self, run=record.get("run"), serving_time_us=_float(record.get("serving_time_us")),
                                   assumed_speedup=_float(record.get("assumed_speedup")))


def _float(x) -> float | None:
    return None if x is None else float(x)


@dataclasses.dataclass(frozen=True)
class Coverage:
    """How much of the time spent in ops the targets hold: covered_us / ops_us, and the rest by op name.

    ops_us: the time of the outermost ops (each op once, its children inside it); covered_us: the time of
    the outermost target ops; uncovered: (op name, time not inside any target op) for the outermost
    non-target ops, largest first. GPU kernel time on a GPU trace, CPU time otherwise."""

    ops_us: float
    covered_us: float
    uncovered: tuple[tuple[str, float], ...] = ()

    @property
    def share(self) -> float:
        return self.covered_us / self.ops_us if self.ops_us > 0 else 0.0

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Coverage:
        return cls(float(d["ops_us"]), float(d["covered_us"]),
                   tuple((str(u["op"]), float(u["time_us"])) for u in d.get("uncovered") or ()))

    def to_dict(self) -> dict[str, Any]:
        return {"share": self.share, "ops_us": self.ops_us, "covered_us": self.covered_us,
                "uncovered": [{"op": op, "time_us": us, "share": us / self.ops_us if self.ops_us > 0 else 0.0}
                              for op, us in self.uncovered]}
