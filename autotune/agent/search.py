"""The `search` agent's kernels: parametrised Triton templates per target, written without an LLM.

It is the baseline that runs when no endpoint is configured, and the bar that LLM-written kernels
must clear. Each target has a Jinja2 template, `autotune/agent/templates/<target>.py.j2`, that
renders a complete candidate file (the contract in DESIGN.md: one entry function with the
reference's parameters, all math in @triton.jit kernels, fp32 inside, output in the input's dtype),
and a hand-ordered list of configurations: block widths, rows or heads per program, warps.

Every configuration is correct for any shape (masks for ragged widths, chunked loops for rows wider
than the block), so the parameters change speed only. The first configuration of every target is the
safe general one; the later ones explore.

    from autotune.agent import search
    for label, source in search.candidates("rms_norm", 4):
        ...  # label like "max_block=4096,rows=1,warps=auto"; source is the candidate file
"""

from __future__ import annotations

import dataclasses
import re

import jinja2

from autotune.errors import UserError
from autotune.targets import NAMES as TARGET_NAMES


@dataclasses.dataclass(frozen=True)
class Knob:
    """One template parameter and the values a configuration may give it."""

    name: str
    choices: tuple
    meaning: str


_POW2 = tuple(2**i for i in range(15))
MAX_TILE = 16384  # values one program holds at once (rows x block): 32 fp32 registers per thread on 16 warps
WARPS = Knob("warps", ("auto", 1, 2, 4, 8, 16, 32), "warps per program; auto: about 16 values per thread")
_ROW_KNOBS = (
    Knob("max_block", tuple(b for b in _POW2 if 16 <= b <= MAX_TILE),
         "widest row held in registers; wider rows are read in chunks of this width"),
    Knob("rows", tuple(r for r in _POW2 if r <= 64), "rows per program"),
    WARPS,
)

KNOBS: dict[str, tuple[Knob, ...]] = {
    "rms_norm": _ROW_KNOBS,
    "fused_add_rms_norm": _ROW_KNOBS,
    "softmax": _ROW_KNOBS,
    "silu_and_mul": (
        Knob("block", tuple(b for b in _POW2 if 16 <= b <= MAX_TILE), "output columns per program"),
        WARPS,
    ),
    "rotary_embedding": (
        Knob("heads", tuple(h for h in _POW2 if h <= 64), "heads of one token per program"),
        WARPS,
    ),
    "decode_attention": (
        Knob("block_n", (16, 32, 64, 128, 256), "keys per iteration of the context loop"),
        Knob("splits", (1, 2, 4, 8, 16), "programs sharing one sequence's context (split-K), merged by a second kernel"),
        Knob("warps", (1, 2, 4, 8), "warps per program"),
        Knob("stages", (1, 2, 3, 4), "software-pipelining depth of the key loop"),
    ),
}
_GEMM_KNOBS = (
    Knob("block_m", (16, 32, 64, 128), "rows of x (tokens) per program"),
    Knob("block_n", (32, 64, 128, 256), "output columns per program"),
    Knob("block_k", (32, 64, 128, 256), "reduction step"),
    Knob("group_m", (1, 4, 8), "row blocks walking the column blocks together (L2 reuse of the weight)"),
    Knob("split_k", (1, 2, 4, 8, 16), "programs sharing a tile's reduction; fp32 partials summed in order"),
    Knob("warps", (2, 4, 8), "warps per program"),
    Knob("stages", (2, 3, 4, 5), "software-pipelining depth of the K loop"),
)
KNOBS["prefill_attention"] = (
    Knob("block_m", (16, 32, 64, 128), "query rows per program"),
    Knob("block_n", (16, 32, 64, 128), "keys per iteration of the causal loop"),
    Knob("warps", (2, 4, 8), "warps per program"),
    Knob("stages", (1, 2, 3, 4), "software-pipelining depth of the key loop"),
)
KNOBS["linear"] = _GEMM_KNOBS
KNOBS["int8_linear"] = _GEMM_KNOBS


def _configs(names: tuple[str, ...], rows: list[tuple]) -> tuple[dict, ...]:
    return tuple(dict(zip(names, row)) for row in rows)


# Row reductions (Llama: hidden 2048-8192; a row per sequence in a decode step, thousands in prefill).
# First: rows up to 4096 wide read once, wider ones chunked, warps from the tile size (8 at 4096,
# as Liger-Kernel's calculate_settings picks). Then: wider register rows for 8192-wide models,
# the warp count either way, several rows per program for narrow rows (the tiny model's 128,
# attention rows of 128-512), and small chunks that leave more programs resident per SM.
_ROW_SPACE = _configs(("max_block", "rows", "warps"), [
    (4096, 1, "auto"), (8192, 1, "auto"), (4096, 1, 4), (4096, 1, 16), (2048, 2, "auto"),
    (1024, 4, "auto"), (512, 8, 4), (16384, 1, 16), (1024, 1, 4), (256, 16, 4),
])

SPACES: dict[str, tuple[dict, ...]] = {
    "rms_norm": _ROW_SPACE,
    "fused_add_rms_norm": _ROW_SPACE,
    "softmax": _ROW_SPACE,
    # Elementwise over [rows, I] (Llama: I = 8192 or 14336). A 1-row decode step is launch-bound
    # whatever the block; from 64 rows up, 4096 columns on 8 warps (two 16-byte loads per operand per
    # thread in bf16) give 128+ programs to fill the SMs, and a quarter of the 1024-block programs for the
    # CPU interpreter, which pays about 1 ms per program. Then smaller blocks, and the warp count.
    "silu_and_mul": _configs(("block", "warps"), [
        (4096, 8), (2048, 8), (1024, 4), (4096, 16), (2048, 4), (8192, 16), (512, 4), (256, 2),
    ]),
    # One token's cos/sin row is loaded once per program and shared by its heads: more heads per
    # program reuse it more (Liger-Kernel's rope takes all of a token's heads), fewer give a decode
    # step with one token more programs. First 16: two programs per token for 32 query heads.
    "rotary_embedding": _configs(("heads", "warps"), [
        (16, "auto"), (32, "auto"), (8, "auto"), (4, "auto"), (64, 16), (2, 4), (1, 4), (16, 8),
    ]),
    # A decode step has one program per (sequence, kv head): 8 x 8 = 64 for Llama 3 8B at batch 8, too few
    # to fill an H100's 132 SMs, so split-K (flash-decoding) spreads long contexts over more programs. First:
    # 64 keys a step, no split (the safe one, no merge kernel); then splits for small batches and long
    # contexts, bigger and smaller key blocks, and the pipelining depth.
    "decode_attention": _configs(("block_n", "splits", "warps", "stages"), [
        (64, 1, 4, 2), (64, 4, 4, 2), (128, 1, 4, 2), (32, 1, 4, 2), (64, 8, 4, 3), (128, 2, 8, 3),
        (16, 1, 2, 1), (256, 4, 8, 2), (64, 16, 4, 2),
    ]),
}
# GEMMs. Decode steps have a few tokens (M <= 64): one 16-row block, wide K steps, split-K when the
# columns give too few tiles; prefill chunks (M in the hundreds) want square-ish 64-128 tiles, 8 warps
# and deep pipelines (Triton's matmul tutorial configurations). First: the decode tile, no split.
_GEMM_SPACE = _configs(("block_m", "block_n", "block_k", "group_m", "split_k", "warps", "stages"), [
    (16, 64, 128, 8, 1, 4, 3), (16, 128, 64, 8, 1, 4, 4), (16, 64, 128, 8, 4, 4, 3), (64, 64, 64, 8, 1, 4, 4),
    (128, 128, 64, 8, 1, 8, 3), (64, 128, 32, 8, 1, 4, 4), (128, 256, 64, 8, 1, 8, 3), (32, 64, 256, 4, 2, 4, 3),
    (16, 32, 256, 1, 8, 2, 2), (64, 256, 32, 4, 1, 4, 4),
])
# Flash-attention forward tiles (the Triton tutorial's 64-128 square tiles, 4-8 warps); small query
# blocks for short chunks, where a 128-row block would be mostly masked. First: 64 x 64 on 4 warps.
SPACES["prefill_attention"] = _configs(("block_m", "block_n", "warps", "stages"), [
    (64, 64, 4, 2), (128, 64, 8, 3), (64, 32, 4, 2), (32, 64, 4, 2), (128, 128, 8, 2), (16, 32, 2, 1),
    (64, 128, 4, 3), (128, 32, 4, 4),
])
SPACES["linear"] = _GEMM_SPACE
SPACES["int8_linear"] = _GEMM_SPACE

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("autotune.agent", "templates"),
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)


def search_space(target_name: str) -> list[dict]:
    """The target's configurations, most promising first; the first is correct for every shape and dtype."""
    _check_target(target_name)
    return [dict(c) for c in SPACES[target_name]]


def label(target_name: str, params: dict) -> str:
    """A configuration's short name, e.g. "max_block=4096,rows=1,warps=auto"."""
    _check_target(target_name)
    _check_params(target_name, params)
    return ",".join(f"{k.name}={params[k.name]}" for k in KNOBS[target_name])


def render(target_name: str, params: dict) -> str:
    """A complete candidate file for the target with these template parameters (checked by `label`)."""
    name = label(target_name, params)
    source = _env.get_template(f"{target_name}.py.j2").render(label=name, **params)
    return re.sub(r"\n{4,}", "\n\n\n", source)  # an empty optional block leaves extra blank lines


def candidates(target_name: str, n: int) -> list[tuple[str, str]]:
    """The first n configurations as (label, source); fewer when the space is smaller than n."""
    if n < 1:
        raise UserError(f"asked the search agent for {n} candidates; ask for at least 1 (agent.candidates)")
    return [(label(target_name, p), render(target_name, p)) for p in search_space(target_name)[:n]]


def _check_target(target_name: str) -> None:
    if target_name not in SPACES:
        raise UserError(f"the search agent has no template for '{target_name}' "
                        f"(templates: {', '.join(n for n in TARGET_NAMES if n in SPACES)}); pick one of those")


def _check_params(target_name: str, params: dict) -> None:
    knobs = {k.name: k for k in KNOBS[target_name]}
    unknown = sorted(set(params) - set(knobs))
    missing = sorted(set(knobs) - set(params))
    if unknown or missing:
        raise UserError(f"{target_name} template parameters are {', '.join(knobs)}; "
                        f"got unknown {unknown or 'none'}, missing {missing or 'none'}: give exactly those")
    for name, value in params.items():
        if value not in knobs[name].choices or isinstance(value, bool):
            raise UserError(f"{target_name} template parameter {name}={value!r} is not allowed "
                            f"({knobs[name].meaning}); use one of {list(knobs[name].choices)}")
    if params.get("rows", 1) * params.get("max_block", 1) > MAX_TILE:
        raise UserError(f"{target_name}: rows x max_block = {params['rows'] * params['max_block']} values per "
                        f"program spills registers; keep it at most {MAX_TILE}")
