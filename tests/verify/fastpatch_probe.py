"""Run by tests/verify/test_fastpatch.py in a fresh interpreter process (TRITON_INTERPRET=1): Triton 3.9's
frontend objects, errors and kernel results on the stock interpreter, then after
`autotune.verify.interp.fastpatch.install()` alone; prints both as one JSON object for the test to compare.

    TRITON_INTERPRET=1 python tests/verify/fastpatch_probe.py
"""

import json

import numpy as np
import torch
import triton
import triton.language as tl
from triton.language import core
from triton.runtime import interpreter

from autotune.verify.interp import fastpatch

SHAPES = [[16], [16, 64], [core.constexpr(1), 32], core.tuple([core.constexpr(8), 4]), [1, 1, 2], [True]]
BAD = [[], [3, 4], [np.int64(16)], [16.0], [1 << 21], core.constexpr(16)]


def _block(shape, element=tl.float32) -> dict:
    t = core.block_type(element, shape)
    return {"shape": [repr(v) for v in t.shape.values], "type": repr(t.shape.type.types), "numel": t.numel,
            "name": t.name, "element": str(t.element_ty), "str": str(t)}


def _tensor(shape) -> dict:
    t = core.tensor(None, core.block_type(tl.int32, shape))
    return {"shape": [repr(v) for v in t.shape], "type": repr(t.shape.type.types), "numel": repr(t.numel),
            "dtype": str(t.dtype), "str": str(t)}


def _error(shape) -> str:
    try:
        core.block_type(tl.float16, shape)
    except Exception as e:  # noqa: BLE001 - whatever Triton raises, by type and text
        return f"{type(e).__name__}: {e}"
    return "no error"


@triton.jit
def _index_math(x_ptr, y_ptr, scale, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    big = offs * scale + 2147483000  # int32: wraps past 2**31 - 1, as on a GPU
    tl.store(y_ptr + offs, big - offs * 3, mask=offs < n)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    acc = tl.dot(tl.reshape(x, (16, 16)), tl.trans(tl.reshape(x, (16, 16))), input_precision="ieee")
    tl.store(x_ptr + 1024 + tl.program_id(0) * 256 + tl.arange(0, 256), tl.reshape(acc, (256,)))


def _kernel() -> list:
    torch.manual_seed(0)
    x = torch.randn(1024 + 4 * 256)
    y = torch.zeros(1000, dtype=torch.int32)
    _index_math[(4,)](x, y, 1 << 20, 1000, BLOCK=256)
    return [y.tolist(), x.tolist()]


TYPES = [(tl.float32, [16, 64]), (tl.float32, [16, 64]), (tl.bfloat16, [16, 64]), (tl.float32, [64, 16]),
         (tl.float32, [1, 64]), (tl.float32, [64]), (tl.float32, [4, 8]), (tl.pointer_type(tl.float16), [16, 64])]
SCALARS = [tl.float32, tl.core.dtype("fp32"), tl.bfloat16, tl.int32, tl.pointer_type(tl.float32)]


def _value(type_) -> core.tensor:
    shape = [int(s) for s in type_.get_block_shapes()] if type_.is_block() else [1]
    data = np.zeros(shape, dtype=interpreter._get_np_dtype(type_.scalar))
    return core.tensor(interpreter.TensorHandle(data, type_.scalar), type_)


def _attempt(op, *args) -> list | str:
    """What `op(*args)` gives, as each result's type and whether it is the operand itself; or the error."""
    try:
        results = op(*args)
    except Exception as e:  # noqa: BLE001 - whatever Triton raises, by type and text
        return f"{type(e).__name__}: {e}"
    results = results if isinstance(results, tuple) else (results,)
    return [(str(r.type), r is a) for r, a in zip(results, args)]


def _types() -> list:
    """Equality of block types and dtypes, broadcasts of every pair (their shapes, or the error), casts."""
    blocks = [core.block_type(e, s) for e, s in TYPES]
    scalars = [*SCALARS, *blocks]
    out: list = [[bool(a == b) for b in scalars] for a in scalars] + [[bool(b == blocks[0].shape) for b in blocks]]
    semantic = interpreter.interpreter_semantic
    values = [_value(t) for t in [*blocks, tl.float32]]
    out += [_attempt(semantic.broadcast_impl_value, a, b) for a in values for b in values]
    out += [_attempt(semantic.cast, v, to) for v in values
            for to in (tl.float32, tl.core.dtype("fp32"), tl.bfloat16, v.type.scalar, v.type)]
    return out


def _run() -> dict:
    return {"blocks": [_block(s) for s in SHAPES] + [_block([16, 64], tl.bfloat16)],
            "tensors": [_tensor(s) for s in SHAPES], "errors": [_error(s) for s in BAD], "types": _types(),
            "kernel": _kernel()}


if __name__ == "__main__":
    stock = _run()
    fastpatch.install()
    print(json.dumps({"stock": stock, "patched": _run(), "again": _run()}))
