"""What a plan leaves out, said in the verdict and by `autotune verify TARGET --plan`: the profile shapes not
checked, the shapes cut for the interpreter, the served values no case runs whole or runs at all, the sizes served
together that ran only smaller, the launches only a sample of programs proved."""

from __future__ import annotations

from autotune.records import ProfiledShape
from autotune.targets.base import ENGINE_STEP_TOKENS, Shape, Target, dtype_name, numel
from autotune.verify.plan.cases import (
    Case,
    PlanConfig,
    primary_shapes,
    select_profile_shapes,
    together_runs,
)


def selection_note(shapes, limit: int) -> str:
    """One line saying which profile shapes were checked, when not all of them were."""
    shapes = [ProfiledShape.of(s) for s in shapes or []]
    chosen = select_profile_shapes(shapes, limit)
    if len(chosen) == len(shapes):
        return ""
    total = sum(s.calls for s in shapes) or 1
    covered = sum(s.calls for s in chosen) / total
    return (f"profile shapes: {len(chosen)} of {len(shapes)} checked (the smallest, the largest and the most "
            f"called; {covered:.0%} of the profiled calls; verify.max_profile_shapes={limit})")


def together_note(target: Target, shapes, config: PlanConfig) -> str:
    """For each pair of shrunk dims whose largest served shape ran together only smaller (too large for the CPU
    budget), that shape and what ran: '' when every pair ran at its largest. The served call run whole
    (served_whole) is none of them: together_runs makes no run of it."""
    halved = [f"[{target.label_shape(largest)}] " + (f"as [{target.label_shape(run)}]" if run else "not at all")
              for _, run, largest in together_runs(target, shapes, config) if run != largest]
    return ("sizes served together that ran together only smaller (verify.together_values and together_flops; a "
            "sample of programs): " + "; ".join(halved)) if halved else ""


def rerun_note(target: Target, cases: list[Case], too_slow: dict[int, float], smaller: dict[int, int | None]) -> str:
    """The sampled cases whose sample compared nothing alone and whose whole call was too slow for the interpreter,
    and the smaller shapes that ran whole in their place (plan.followup.smaller_whole_case): '' when none."""
    said = []
    for i, seconds in too_slow.items():
        j = smaller.get(i)
        said.append(f"[{target.label_shape(cases[i].shape)}] {dtype_name(cases[i].dtype)} (about {seconds:.0f} s "
                    "whole) " + (f"ran whole as [{target.label_shape(cases[j].shape)}]" if j is not None
                                 else "did not run whole"))
    return ("samples that compared nothing alone (launches reading other launches' partial results, atomics) where "
            "the whole call was too slow for the interpreter (verify.rerun_within_s): " + "; ".join(said)
            ) if said else ""


def probe_note(cases: list[Case]) -> str:
    """The probe cases that ran as a sample: '' when there were none."""
    sampled = [f"{list(c.shape)} {dtype_name(c.dtype)}" for c in cases if c.source == "probe" and c.sample]
    return ("launches only served sizes make ran as a sample of their programs at " + ", ".join(sampled)
            + " (too dear to run whole on the CPU): what those programs computed is compared; outputs the grid "
              "leaves unwritten at served sizes would not show") if sampled else ""


def cut_note(target: Target, shapes, config: PlanConfig, salt: bytes = b"") -> str:
    """What was left out of the plan: profile shapes not checked, shapes cut for the interpreter; or ''."""
    notes = [selection_note(shapes, config.max_profile_shapes)]
    limits = (config.max_interpreter_rows, config.max_interpreter_elements)
    cut = [(s, target.cut_shape(s, *limits)) for s, *_ in primary_shapes(target, shapes, config, salt)]
    cut = list(dict.fromkeys((a, b) for a, b in cut if a != b))
    if cut and not config.whole:
        pairs = ", ".join(f"{list(a)} -> {list(b)}" for a, b in cut)
        notes.append(f"shapes cut for the CPU interpreter (at most {limits[0]} rows, {limits[1]} elements; extra "
                     f"cases {config.max_interpreter_rows_extra} rows and a quarter of the elements): {pairs}")
    return "; ".join(n for n in notes if n)


def beyond_note(target: Target, config: PlanConfig) -> str:
    """The served values no plan runs: those the target declares (Target.beyond_domain), and vLLM's larger steps
    where the plan's served rows (serve.max_batched_tokens) are fewer than it takes on the target GPU; '' when
    none."""
    beyond = list(target.beyond_domain)
    if target.model_shapes is not None and config.served_rows < ENGINE_STEP_TOKENS:
        beyond.append(f"steps of more than {config.served_rows} tokens at a model's full sizes "
                      f"(serve.max_batched_tokens): vLLM on an H100/H200 serves up to {ENGINE_STEP_TOKENS} a step "
                      f"(16384 offline), and serve.max_batched_tokens={ENGINE_STEP_TOKENS} judges those")
    return "served values no case runs (on a GPU either): " + "; ".join(beyond) if beyond else ""


def whole_note(target: Target, cases: list[Case], served: list[Shape]) -> str:
    """What the CPU plan never ran with every program: each dim's served values that no case ran whole (each named),
    with the largest value any case ran whole and the largest a sample of programs met; '' when every served value
    runs whole. A kernel that changes at a served value no whole case ran (a grid capped along a dim with its share
    rounded down, a size it switches at) is checked there only as far as the sample's programs reach; the verdict
    says so instead of implying more. Then the served calls themselves (sizes together) that no case ran whole."""
    values: dict[str, set[int]] = {}
    for shape in served:
        for name, value in target.named_dims(shape).items():
            values.setdefault(name, set()).add(value)
    whole: dict[str, set[int]] = {}
    sampled: dict[str, int] = {}
    for case in cases:
        for name, value in target.named_dims(case.shape).items():
            if case.sample:
                sampled[name] = max(sampled.get(name, 0), value)
            else:
                whole.setdefault(name, set()).add(value)
    gaps = []
    for name, served_values in values.items():
        missing = sorted(served_values - whole.get(name, set()))
        if missing:
            most, reach = max(whole.get(name, ()), default=0), sampled.get(name, 0)
            gaps.append(f"{name} {', '.join(map(str, missing))} ("
                        + (f"every program up to {most}" if most else "no case sets it whole")
                        + (f", a sample of programs at {reach}" if reach > most else "") + ")")
    largest = max(served, key=numel, default=None)  # sizes together: a kernel may switch at a product of them
    most = max((numel(c.shape) for c in cases if not c.sample), default=0)
    named = None  # the largest call, where that gap names it
    if largest is not None and most < numel(largest):
        named = largest
        gaps.append(f"the largest call {list(largest)} (a product of sizes of {numel(largest)}; every program up to "
                    f"{most})")
    # and each served call no case ran at its sizes with every program: a kernel wrong in a few programs of it only
    # (2 rows of 2048, behind a loop that makes every program dear on the interpreter) was checked as far as the
    # sample reached
    ran_whole = {tuple(c.shape) for c in cases if not c.sample}
    ran_sampled = {tuple(c.shape) for c in cases if c.sample}
    rest = [s for s in served if tuple(s) not in ran_whole and s != named]
    if rest:
        gaps.append("the served calls " + ", ".join(
            f"{list(s)}" + (" (a sample of its programs)" if tuple(s) in ran_sampled else "") for s in rest))
    return ("served values the CPU plan never ran with every program: " + ", ".join(gaps)) if gaps else ""
