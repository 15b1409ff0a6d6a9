"""The `search` agent's kernels: parametrised Triton templates per target, written without an LLM.

It is the baseline that runs when no endpoint is configured, and the bar that LLM-written kernels
must clear. Each target declares its space (`Target.search`, autotune/targets/space.py): a Jinja2
template in `autotune/targets/templates/` that renders a complete candidate file (the candidate
contract stated in prompts/system.md.j2 and enforced by autotune/verify/static/policy.py: one entry
function with the reference's parameters, all math in @triton.jit kernels, fp32 inside, output in
the input's dtype), and a hand-ordered list of configurations: block widths, rows or heads per
program, warps.

Every configuration is correct for any shape (masks for ragged widths, chunked loops for rows wider
than the block), so the parameters change speed only. The first configuration of every target is the
safe general one; the later ones explore.

    from autotune.agent import search
    for label, source in search.candidates("rms_norm", 4):
        ...  # label like "max_block=4096,rows=1,warps=auto"; source is the candidate file
"""

from __future__ import annotations

import re

import jinja2

from autotune import targets
from autotune.errors import UserError
from autotune.targets.space import TEMPLATES_DIR, Knob, SearchSpace

__all__ = ["Knob", "candidates", "label", "render", "search_space"]


def _space(target_name: str) -> SearchSpace:
    space = targets.get(target_name).search if target_name in targets.NAMES else None
    if space is None:
        raise UserError(f"the search agent has no template for '{target_name}' (templates: "
                        f"{', '.join(n for n in targets.NAMES if targets.get(n).search)}); pick one of those")
    return space


_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)


def search_space(target_name: str) -> list[dict]:
    """The target's configurations, most promising first; the first is correct for every shape and dtype."""
    return [dict(c) for c in _space(target_name).configs]


def label(target_name: str, params: dict) -> str:
    """A configuration's short name, e.g. "max_block=4096,rows=1,warps=auto"."""
    space = _space(target_name)
    _check_params(target_name, space, params)
    return ",".join(f"{k.name}={params[k.name]}" for k in space.knobs)


def render(target_name: str, params: dict) -> str:
    """A complete candidate file for the target with these template parameters (checked by `label`)."""
    name = label(target_name, params)
    source = _env.get_template(_space(target_name).template).render(label=name, **params)
    return re.sub(r"\n{4,}", "\n\n\n", source)  # an empty optional block leaves extra blank lines


def candidates(target_name: str, n: int) -> list[tuple[str, str]]:
    """The first n configurations as (label, source); fewer when the space is smaller than n."""
    if n < 1:
        raise UserError(f"asked the search agent for {n} candidates; ask for at least 1 (agent.candidates)")
    return [(label(target_name, p), render(target_name, p)) for p in search_space(target_name)[:n]]


def _check_params(target_name: str, space: SearchSpace, params: dict) -> None:
    knobs = {k.name: k for k in space.knobs}
    unknown = sorted(set(params) - set(knobs))
    missing = sorted(set(knobs) - set(params))
    if unknown or missing:
        raise UserError(f"{target_name} template parameters are {', '.join(knobs)}; "
                        f"got unknown {unknown or 'none'}, missing {missing or 'none'}: give exactly those")
    for name, value in params.items():
        if value not in knobs[name].choices or isinstance(value, bool):
            raise UserError(f"{target_name} template parameter {name}={value!r} is not allowed "
                            f"({knobs[name].meaning}); use one of {list(knobs[name].choices)}")
    if space.max_tile and params.get("rows", 1) * params.get("max_block", 1) > space.max_tile:
        raise UserError(f"{target_name}: rows x max_block = {params['rows'] * params['max_block']} values per "
                        f"program spills registers; keep it at most {space.max_tile}")
