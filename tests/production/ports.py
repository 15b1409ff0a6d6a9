"""Production kernels fitted to autotune's targets: what to take from which wheel, and our launcher.

Each `Port` takes named top-level definitions (the @triton.jit kernels, their jit helpers and constexpr constants)
verbatim from a module of a pinned wheel (tests/production/wheels.py) and adds a launcher we wrote: the target's
entry point, doing what the library's own Python wrapper does (shapes, strides, block sizes, the grid) but for the
target's signature. `HEADER` stands in for the module's imports: what its conditional imports resolve to under
Triton 3.9 on NVIDIA. Nothing of the kernels' code is in this repository; `candidate(port)` assembles a file for
the checker at test time.
"""

from __future__ import annotations

import dataclasses

from tests.production.wheels import Source, read, take

HEADER = "import torch\nimport triton\nimport triton.language as tl\n"
LIGER = ("liger-kernel", "0.8.5")


@dataclasses.dataclass(frozen=True)
class Port:
    name: str  # library/kernel, as the tests' ids show it
    target: str
    source: Source
    names: tuple[str, ...]  # the top-level definitions taken from the module
    launcher: str  # our code: the target's entry point calling the taken kernels
    imports: str = ""  # what the module's own (conditional) imports bind, as Triton 3.9 on NVIDIA resolves them

    def candidate(self) -> str:
        taken = take(read(self.source), self.names, str(self.source))
        return (f'"""{self.name}: {self.source}, taken at test time; the launcher is autotune\'s test adapter."""\n\n'
                f"{HEADER}{self.imports}\n\n{taken}\n\n\n{self.launcher.strip()}\n")


def _liger(path: str) -> Source:
    return Source(*LIGER, f"liger_kernel/ops/{path}")


LIBDEVICE_RSQRT = "from triton.language.extra.libdevice import rsqrt\n"

PORTS = (
    Port("liger/rms_norm", "rms_norm", _liger("rms_norm.py"),
         ("_CASTING_MODE_NONE", "_CASTING_MODE_LLAMA", "_CASTING_MODE_GEMMA", "_rms_norm_forward_kernel"), '''
def rms_norm(x, weight, eps):
    shape = x.shape
    X = x.reshape(-1, shape[-1])
    n_rows, n_cols = X.shape
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    Y = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    RSTD = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    _rms_norm_forward_kernel[(n_rows,)](Y, Y.stride(0), X, X.stride(0), weight, weight.stride(0), RSTD,
                                        RSTD.stride(0), n_cols, eps, 0.0, _CASTING_MODE_LLAMA, True,
                                        BLOCK_SIZE=BLOCK_SIZE, num_warps=8 if BLOCK_SIZE >= 2048 else 4)
    return Y.reshape(shape)
''', LIBDEVICE_RSQRT),
    Port("liger/fused_add_rms_norm", "fused_add_rms_norm", _liger("fused_add_rms_norm.py"),
         ("_CASTING_MODE_NONE", "_CASTING_MODE_LLAMA", "_CASTING_MODE_GEMMA", "_fused_add_rms_norm_forward_kernel"),
         '''
def fused_add_rms_norm(x, residual, weight, eps):
    shape = x.shape
    X = x.reshape(-1, shape[-1])
    R = residual.reshape(-1, shape[-1])
    n_rows, n_cols = X.shape
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    Y = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    S = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    RSTD = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    _fused_add_rms_norm_forward_kernel[(n_rows,)](Y, Y.stride(0), S, S.stride(0), X, X.stride(0), R, R.stride(0),
                                                  weight, weight.stride(0), RSTD, RSTD.stride(0), n_cols, eps, 0.0,
                                                  _CASTING_MODE_LLAMA, BLOCK_SIZE=BLOCK_SIZE,
                                                  num_warps=8 if BLOCK_SIZE >= 2048 else 4)
    return Y.reshape(shape), S.reshape(shape)
''', LIBDEVICE_RSQRT),
    Port("liger/swiglu", "silu_and_mul", _liger("swiglu.py"), ("silu", "_swiglu_forward_kernel"), '''
def silu_and_mul(x):
    shape = x.shape
    n_cols = shape[-1] // 2
    X = x.reshape(-1, shape[-1])
    a, b = X[:, :n_cols], X[:, n_cols:]  # gate and up: views of one row, so one stride serves all three
    c = torch.empty((X.shape[0], shape[-1]), dtype=x.dtype, device=x.device)
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    _swiglu_forward_kernel[(X.shape[0],)](a, b, c, X.stride(0), 1.0, n_cols=n_cols, BLOCK_SIZE=BLOCK_SIZE,
                                          num_warps=8 if BLOCK_SIZE >= 2048 else 4)
    return c[:, :n_cols].contiguous().reshape(*shape[:-1], n_cols)
'''),
    Port("liger/rope", "rotary_embedding", _liger("rope.py"), ("_triton_rope",), '''
def rotary_embedding(x, cos, sin):
    tokens, heads, head_dim = x.shape
    q = x.contiguous().clone().reshape(1, tokens, heads, head_dim)  # rotated in place, as Liger does q and k
    k = torch.zeros(1, tokens, 1, head_dim, dtype=x.dtype, device=x.device)  # one spare head for its k
    cos, sin = cos.contiguous(), sin.contiguous()  # [T, D/2]: the left halves Liger reads of its [T, D]
    _triton_rope[(tokens,)](q, q.stride(1), k, k.stride(1), cos, cos.stride(-2), sin, sin.stride(-2), tokens, 1, 1,
                            heads, 1, head_dim, triton.next_power_of_2(heads), 1, triton.next_power_of_2(head_dim),
                            triton.next_power_of_2(head_dim), head_dim, BLOCK_SIZE=triton.next_power_of_2(heads),
                            BACKWARD_PASS=False)
    return q.reshape(tokens, heads, head_dim)
'''),
    Port("liger/softmax", "softmax", _liger("softmax.py"),
         ("_softmax_single_block_forward_kernel", "_softmax_multi_block_forward_kernel"), '''
def softmax(x):
    *batch, n_cols = x.shape
    x2d = x.contiguous().view(-1, n_cols)
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    y2d = torch.empty_like(x2d)
    _softmax_single_block_forward_kernel[(x2d.shape[0],)](y2d, y2d.stride(0), x2d, x2d.stride(0), n_cols,
                                                          BLOCK_SIZE=BLOCK_SIZE,
                                                          num_warps=8 if BLOCK_SIZE >= 2048 else 4)
    return y2d.view(*batch, n_cols)
'''),
)
