"""The call domain a target is judged on, and the plan that covers it, said before any candidate runs:
`autotune verify TARGET --plan`.

    lines = describe(get("paged_attention"), shapes=None, config=plan_config)
"""

from __future__ import annotations

import collections

from autotune.targets.base import Target, dtype_name
from autotune.verify.plan.cases import PlanConfig, plan, scalar_values, served_shapes, target_dtypes
from autotune.verify.plan.notes import beyond_note, cut_note, together_note, whole_note


def describe(target: Target, shapes, config: PlanConfig, salt: bytes = b"plan") -> list[str]:
    """The domain (each dim's served values, the edges, layouts, scalar values, dtypes) and the plan's cases, with
    what the plan cuts and what it never runs whole on this device. `shapes`: the profile's, or None (defaults)."""
    served = served_shapes(target, shapes, config)
    values: dict[str, set[int]] = collections.defaultdict(set)
    for shape in served:
        for name, value in target.named_dims(shape).items():
            values[name].add(value)
    scalars = scalar_values(target, config)
    cases = plan(target, shapes, config, salt)
    by_source = collections.Counter(c.source for c in cases)
    sampled = sum(1 for c in cases if c.sample)
    source = "the profile's shapes" if shapes else "the target's default shapes"
    lines = [f"{target.name}: the call domain the checker judges ({source} and {len(config.presets)} model presets "
             f"at {config.served_rows} rows a step)",
             "served values: " + "; ".join(f"{name} {', '.join(map(str, sorted(v)))}" for name, v in values.items()),
             "edges: " + ", ".join(str(list(s)) for s in target.edge_shapes),
             "layouts: " + ", ".join(target.layouts),
             "scalars: " + ("; ".join(f"{name} {', '.join(f'{v:g}' for v in sorted(v_))}" for name, v_ in
                                      scalars.items()) or "none"),
             "dtypes: " + ", ".join(dtype_name(d) for d in target_dtypes(target, config)),
             f"plan: {len(cases)} cases over {len({c.shape for c in cases})} shapes ("
             + ", ".join(f"{n} {s}" for s, n in by_source.items()) + f"); {sampled} run a drawn sample of programs"]
    return lines + [note for note in (beyond_note(target, config), cut_note(target, shapes, config, salt),
                                      whole_note(target, cases, served), together_note(target, shapes, config))
                     if note]
