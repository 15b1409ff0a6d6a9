"""What the GEMM targets (linear, int8_linear) share: their case shape (M, N, K), bytes, flops, CPU cut and
search space.

Case shape (M, N, K): x [M, K] (M tokens of the step), weight [N, K], y [M, N]. The projections of the
built-in model: qkv (M, (heads + 2 kv_heads) * head_dim, hidden), o (M, hidden, heads * head_dim),
gate_up (M, 2 * intermediate, hidden), down (M, hidden, intermediate).
"""

import torch

from autotune.accel.queries import SM90
from autotune.targets.base import Shape
from autotune.targets.space import Knob, SearchSpace, configs


def shape_from_dims(dims: list) -> Shape:
    """Profiler input dims [x [..., K], weight [N, K], ...] -> (M, N, K): F.linear's layout."""
    x, w = dims[0], dims[1]
    return _rows(x), w[0], _same_k(x[-1], w[1])


def shape_from_mm_dims(dims: list) -> Shape:
    """[x [M, K], weight [K, N], ...] -> (M, N, K): aten::mm's layout, and aten::addmm's after its bias (the
    weight is linear's [N, K] transposed, so the math is linear's)."""
    x, w = dims[0], dims[1]
    return _rows(x), w[1], _same_k(x[-1], w[0])


def shape_from_out_dims(dims: list) -> Shape:
    """[out [..., N], x [..., K], ...] -> (M, N, K): vLLM's CPU `_C::onednn_mm(out, x, bias, handler)`, whose
    weight lives in the oneDNN handler and is not recorded; N is the output's width."""
    out, x = dims[0], dims[1]
    if _rows(out) != _rows(x):
        raise ValueError(f"output rows {out} and input rows {x} differ")
    return _rows(x), out[-1], x[-1]


def _rows(x: list) -> int:
    if not x:
        raise ValueError("no shape recorded")
    m = 1
    for d in x[:-1]:
        m *= d
    return m


def _same_k(k_x: int, k_w: int) -> int:
    """K, when x's and the weight's agree; a ValueError (no case shape) for a call laid out otherwise."""
    if k_x != k_w:
        raise ValueError(f"x's K {k_x} is not the weight's {k_w}: not this layout")
    return k_x


def flops(shape, dtype):
    m, n, k = shape
    return 2 * m * n * k


def cut_shape(shape, max_rows, max_elements):
    """M (tokens) shrinks to max_rows / 32 plus its remainder modulo 64 (a grid that rounds the row blocks down
    leaves a served step's last rows unwritten: 43 tokens run whole, 100 as 44); K to at most max_elements / 128
    (at least 256) plus its remainder modulo 64, and N until the weight holds max_elements / 16 values, at least 64
    plus N's remainder modulo 64. Every served K also runs whole, in a range case (`range_cuts`). With the checker's
    defaults [512, 4096, 14336] runs as [8, 64, 2048] (the extra cases [2, 64, 512])."""
    if max_rows is None or max_elements is None:  # on a GPU: no cut
        return tuple(shape)
    m, n, k = shape
    m = min(m, max(1, max_rows // 32) + m % 64)
    k_cap = max(256, max_elements // 128)
    if k > k_cap:
        k = k_cap + k % 64
    keep = max(16, (max_elements // 16) // k)
    if n > keep:
        n = max(64, keep // 64 * 64) + n % 64
    return m, n, k


# Llama 3 8B's projections at a decode step of 8 and a 512-token prefill chunk
DEFAULT_SHAPES = ((8, 6144, 4096), (8, 28672, 4096), (512, 4096, 14336))
# one token; N and K not multiples of the usual tiles (the tiny model: qkv 256 x 128, down 128 x 352)
EDGE_SHAPES = ((1, 256, 128), (7, 100, 352), (33, 128, 200), (5, 300, 64))


# (M, N, K) as the prompt names them
DIMS = ("M_tokens", "N_out", "K_in")  # x [M, K], weight [N, K], y [M, N]


# output values past one 128 x 128 tile per SM of the GPU judged for: a persistent GEMM (one program per SM walking
# the tiles pid, pid + SMs, ...) whose share is rounded down leaves tiles unwritten only past this
PERSISTENT_VALUES = (SM90.multi_processor_count + 1) * 128 * 128


def range_cuts(shape):
    """Two: M whole (many row blocks, the large-M code paths) with N and K to two of the largest tiles of the
    search space (256) plus their remainders modulo 64; and K whole, the dimension a kernel sums over and splits,
    with M and N to a tile plus their remainders (a split-K share rounded down is exact at K = 4096 and drops 64
    input channels at Qwen2.5-0.5B's K = 4864). And M and K whole together, N to a tile plus its remainder: a stop
    48 attacker's GEMM stopped its weight pointer after 1024 of K only at M of 128 or more, which no case had
    with K past 575. Each a sample of programs where it is large."""
    m, n, k = shape
    return ((m, min(n, 512 + n % 64), min(k, 512 + k % 64)), (min(m, 8 + m % 64), min(n, 64 + n % 64), k),
            (m, min(n, 64 + n % 64), k))


def concurrency_cuts(shape):
    """M whole with N as far as more 128 x 128 tiles than SMs take (PERSISTENT_VALUES: [2048, 1088]; a decode
    step's whole N), K to a tile plus its remainder: every program on the default plan (`verify.concurrency_whole`),
    a sample on the quick one."""
    m, n, k = shape
    return ((m, min(n, max(64, -(-PERSISTENT_VALUES // m) // 64 * 64 + 64) + n % 64), min(k, 64 + k % 64)),)


def span_cuts(shape):
    """N whole at a decode step's rows, K to a tile plus its remainder: a row of column tiles per served N."""
    m, n, k = shape
    return ((min(m, 8), n, min(k, 64 + k % 64)),)


def model_shapes(dims, rows):
    """The projections of a preset at `rows` tokens: qkv, o, gate_up, down (the LM head is the same GEMM again)."""
    h, heads, kv, hd, inter = (int(dims[k]) for k in ("hidden_size", "num_heads", "num_kv_heads", "head_dim",
                                                       "intermediate_size"))
    return ((rows, (heads + 2 * kv) * hd, h), (rows, h, heads * hd), (rows, 2 * inter, h), (rows, h, inter))


def element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def input_elements(shape) -> int:
    m, n, k = shape
    return m * k + n * k + n  # x, the weight (larger than the case's M x N output) and int8_linear's scales


def output_elements(shape) -> int:
    m, n, _ = shape
    return m * n


# Decode steps have a few tokens (M <= 64): one 16-row block, wide K steps, split-K when the columns give too
# few tiles; prefill chunks (M in the hundreds) want square-ish 64-128 tiles, 8 warps and deep pipelines
# (Triton's matmul tutorial configurations). First: the decode tile, no split.
KNOBS = (
    Knob("block_m", (16, 32, 64, 128), "rows of x (tokens) per program"),
    Knob("block_n", (32, 64, 128, 256), "output columns per program"),
    Knob("block_k", (32, 64, 128, 256), "reduction step"),
    Knob("group_m", (1, 4, 8), "row blocks walking the column blocks together (L2 reuse of the weight)"),
    Knob("split_k", (1, 2, 4, 8, 16), "programs sharing a tile's reduction; fp32 partials summed in order"),
    Knob("warps", (2, 4, 8), "warps per program"),
    Knob("stages", (2, 3, 4, 5), "software-pipelining depth of the K loop"),
)
CONFIGS = configs(tuple(k.name for k in KNOBS), [
    (16, 64, 128, 8, 1, 4, 3), (16, 128, 64, 8, 1, 4, 4), (16, 64, 128, 8, 4, 4, 3), (64, 64, 64, 8, 1, 4, 4),
    (128, 128, 64, 8, 1, 8, 3), (64, 128, 32, 8, 1, 4, 4), (128, 256, 64, 8, 1, 8, 3), (32, 64, 256, 4, 2, 4, 3),
    (16, 32, 256, 1, 8, 2, 2), (64, 256, 32, 4, 1, 4, 4),
])


def search_space(template: str) -> SearchSpace:
    """The GEMM space, rendered through `template` (which imports the shared `_gemm.j2` kernel)."""
    return SearchSpace(template=template, knobs=KNOBS, configs=CONFIGS, sweep_shapes=sweep_shapes, own_sweep=True)


def sweep_shapes(params: dict) -> tuple[Shape, ...]:
    """Ragged M, N and K tiles; K over two blocks and every split."""
    return ((params["block_m"] + 3, params["block_n"] + 5, params["block_k"] * params["split_k"] + 7),)
