"""What the case plan is given: the `verify` settings it reads, the model presets' sizes and the served rows, and
whether the plan is the GPU's (whole shapes) or the interpreter's (cut shapes, range cases, dry calls)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class PlanConfig:
    seeds: int  # seeds per (shape, dtype)
    dtypes: tuple[str, ...] | None  # narrows each target's own dtypes; None: all of them
    max_profile_shapes: int  # 0: every profile shape
    max_interpreter_rows: int
    max_interpreter_rows_extra: int
    max_interpreter_elements: int
    max_range_shapes: int  # 0: every range shape the cover picks
    range_whole_work: int  # values and FLOPs up to which a range case runs every program
    range_programs: int  # indices of a launch's longest grid axis a sampled range case runs
    long_calls: int  # calls that end the cheapest case (0: none)
    probe_whole_work: int = 67108864  # values and FLOPs up to which a probe case runs every program
    served_whole_work: int = 0  # the largest served call runs uncut with every program when it takes at most this
    whole_within_s: float = 0.0  # a sampled call runs again whole when its skipped programs take at most this
    rerun_within_s: float = 0.0  # one that must run again whole (nothing compared alone) does so within this, else
    # a smaller shape runs whole (0: always again whole)
    widen_within_s: float = 0.0  # a launch widened to read partial results stops after this (0: runs to the end)
    concurrency_whole: bool = False  # the concurrency and span cuts run every program (else sampled as range cases)
    edge_kinds: bool = True  # the edge shapes run large and NaN/Inf inputs too (else as the presets' shapes do)
    every_dtype: bool = True  # every shape in every dtype (else the edges', presets' and drawn shapes in one each)
    together_values: int = 0  # the most values of a case with two cut dims at their served sizes together (0: none)
    together_flops: int = 0  # and the most FLOPs of its reference
    served_turns: bool = True  # range cases but a shape's first take the layouts' and scalars' turns
    presets: tuple[Mapping[str, Any], ...] = ()  # every model preset's sizes (conf/model/*.yaml), as plain dicts
    served_rows: int = 0  # the most tokens served in one step: the rows of the presets' served shapes
    whole: bool = False  # the GPU's plan: shapes whole, no range cases, no sampling, no dry calls

    def __post_init__(self) -> None:
        for name in ("seeds", "max_interpreter_rows", "max_interpreter_rows_extra", "max_interpreter_elements"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"verify.{name} must be at least 1, not {getattr(self, name)}")
        for name in ("max_profile_shapes", "max_range_shapes", "range_whole_work", "range_programs", "long_calls",
                     "probe_whole_work", "served_whole_work", "together_values", "together_flops"):
            if int(getattr(self, name)) < 0:
                raise ValueError(f"verify.{name} must be 0 or more, not {getattr(self, name)}")
        for name in ("whole_within_s", "rerun_within_s", "widen_within_s"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"verify.{name} must be 0 or more seconds, not {getattr(self, name)}")

    @classmethod
    def from_config(cls, cfg_verify: Any, *, presets: tuple[Mapping[str, Any], ...] = (), served_rows: int = 0,
                    whole: bool = False) -> PlanConfig:
        """From the `verify` config node: every setting read as it is given (a value of 0 stays 0)."""
        dtypes = cfg_verify.dtypes
        return cls(seeds=int(cfg_verify.seeds), dtypes=tuple(str(d) for d in dtypes) if dtypes else None,
                   max_profile_shapes=int(cfg_verify.max_profile_shapes),
                   max_interpreter_rows=int(cfg_verify.max_interpreter_rows),
                   max_interpreter_rows_extra=int(cfg_verify.max_interpreter_rows_extra),
                   max_interpreter_elements=int(cfg_verify.max_interpreter_elements),
                   max_range_shapes=int(cfg_verify.max_range_shapes), range_whole_work=int(cfg_verify.range_whole_work),
                   range_programs=int(cfg_verify.range_programs), long_calls=int(cfg_verify.long_calls),
                   probe_whole_work=int(cfg_verify.probe_whole_work),
                   served_whole_work=int(cfg_verify.served_whole_work),
                   whole_within_s=float(cfg_verify.whole_within_s),
                   rerun_within_s=float(cfg_verify.rerun_within_s),
                   widen_within_s=float(cfg_verify.widen_within_s),
                   concurrency_whole=bool(cfg_verify.concurrency_whole),
                   edge_kinds=bool(cfg_verify.edge_kinds), every_dtype=bool(cfg_verify.every_dtype),
                   together_values=int(cfg_verify.together_values),
                   together_flops=int(cfg_verify.together_flops),
                   served_turns=bool(cfg_verify.served_turns),
                   presets=tuple(presets), served_rows=int(served_rows), whole=whole)
