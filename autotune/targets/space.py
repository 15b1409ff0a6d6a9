"""A target's search space for the `search` agent: its Jinja2 template and the knobs and configurations it takes.

A target declares `search=SearchSpace(template="rms_norm.py.j2", knobs=..., configs=...)`; the template lives
in `autotune/targets/templates/` beside the target modules (`_warps.j2` holds the launch-width macros every
template shares). The row-wise knobs and configurations below are shared by the row reductions
(rms_norm, fused_add_rms_norm, softmax).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from pathlib import Path

Shape = tuple[int, ...]

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"


@dataclasses.dataclass(frozen=True)
class Knob:
    """One template parameter and the values a configuration may give it."""

    name: str
    choices: tuple
    meaning: str


@dataclasses.dataclass(frozen=True)
class SearchSpace:
    """A template and its hand-ordered configurations; the first is the safe general one, later ones explore."""

    template: str  # file name in autotune/targets/templates/
    knobs: tuple[Knob, ...]
    configs: tuple[dict, ...]
    max_tile: int | None = None  # rows x max_block bound on values per program, when the knobs have both
    # a configuration's parameters -> small shapes that take every code path it has (ragged tiles, more than one
    # block, part-empty programs), cheap under the interpreter: tests/agent/test_search.py runs every
    # configuration on them
    sweep_shapes: Callable[[dict], tuple[Shape, ...]] | None = None
    # (shape, parameters, dtype) -> extra (label, args) inputs for those shapes beyond make_inputs' kinds, e.g.
    # rows that are all -inf for a softmax
    sweep_inputs: Callable[[Shape, dict, object], Iterable[tuple[str, tuple]]] | None = None
    # its configurations cost the interpreter tens of seconds (attention, GEMMs): the sweep judges them in a child
    # process of their own, with its own time limit, rather than with the cheap row-wise ones
    own_sweep: bool = False

    def __post_init__(self):
        names = tuple(k.name for k in self.knobs)
        for c in self.configs:
            if tuple(c) != names:
                raise ValueError(f"{self.template}: configuration {c} does not give exactly the knobs {names}")
        if not (TEMPLATES_DIR / self.template).is_file():
            raise ValueError(f"search template {self.template} is not in {TEMPLATES_DIR}")
        if self.sweep_shapes is None:
            raise ValueError(f"{self.template}: a search space names the sweep_shapes that take each code path")


def configs(names: tuple[str, ...], rows: list[tuple]) -> tuple[dict, ...]:
    return tuple(dict(zip(names, row)) for row in rows)


POW2 = tuple(2**i for i in range(15))
MAX_TILE = 16384  # values one program holds at once (rows x block): 32 fp32 registers per thread on 16 warps
WARPS = Knob("warps", ("auto", 1, 2, 4, 8, 16, 32), "warps per program; auto: about 16 values per thread")
ROW_KNOBS = (
    Knob("max_block", tuple(b for b in POW2 if 16 <= b <= MAX_TILE),
         "widest row held in registers; wider rows are read in chunks of this width"),
    Knob("rows", tuple(r for r in POW2 if r <= 64), "rows per program"),
    WARPS,
)

# Row reductions (Llama: hidden 2048-8192; a row per sequence in a decode step, thousands in prefill).
# First: rows up to 4096 wide read once, wider ones chunked, warps from the tile size (8 at 4096,
# as Liger-Kernel's calculate_settings picks). Then: wider register rows for 8192-wide models,
# the warp count either way, several rows per program for narrow rows (the tiny model's 128,
# attention rows of 128-512), and small chunks that leave more programs resident per SM.
ROW_CONFIGS = configs(("max_block", "rows", "warps"), [
    (4096, 1, "auto"), (8192, 1, "auto"), (4096, 1, 4), (4096, 1, 16), (2048, 2, "auto"),
    (1024, 4, "auto"), (512, 8, 4), (16384, 1, 16), (1024, 1, 4), (256, 16, 4),
])


def row_sweep_shapes(params: dict) -> tuple[Shape, ...]:
    """Narrow ragged rows (with leading dims, a row count that is not a multiple of ROWS), then rows wider than
    the block: the chunked loop runs twice, the second chunk ragged."""
    return (2, 3, 1000), (2, params["max_block"] + 37)


def row_space(template: str, sweep_inputs=None, own_sweep: bool = False) -> SearchSpace:
    """The row reductions' space, rendered through `template`."""
    return SearchSpace(template=template, knobs=ROW_KNOBS, configs=ROW_CONFIGS, max_tile=MAX_TILE,
                       sweep_shapes=row_sweep_shapes, sweep_inputs=sweep_inputs, own_sweep=own_sweep)
