"""Kernels that show where Triton 3.9's CPU interpreter and a GPU differ, run twice in one fresh interpreter
process: on the stock interpreter, then after `autotune.verify.interp.install.install()`. Run as a script by
tests/verify/test_gpu_semantics.py (TRITON_INTERPRET=1 set before triton is imported); it saves the inputs
and both runs' outputs with torch.save to the path given, and the test computes what a GPU gives
independently (numpy/torch/pure Python) and compares.

    TRITON_INTERPRET=1 python tests/verify/gpu_probe.py OUT.pt
"""

import sys

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from autotune.verify.interp.install import install
from autotune.verify.interp.races import race_in


@triton.jit
def _dot(a_ptr, b_ptr, acc_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, PREC: tl.constexpr,
         ACC: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    if ACC == "fp16":
        c = tl.dot(a, b, tl.load(acc_ptr + rm[:, None] * N + rn[None, :]), out_dtype=tl.float16)
    elif PREC == "default":
        c = tl.dot(a, b)
    else:
        c = tl.dot(a, b, input_precision=PREC)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], c)


@triton.jit
def _cast(x_ptr, y_ptr, n, DST: tl.constexpr, RTZ: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    if RTZ:
        y = x.to(DST, fp_downcast_rounding="rtz")
    else:
        y = x.to(DST)
    tl.store(y_ptr + offs, y, mask=offs < n)


@triton.jit
def _float_scalar(out_ptr, s):
    tl.store(out_ptr, s * 1.0)  # out is fp64: what the kernel holds for s


@triton.jit
def _float_scalar_cast(out_ptr, s):
    tl.store(out_ptr, s.to(tl.float16).to(tl.float32))


@triton.jit
def _int_scalar_width(x_ptr, out_ptr, n):
    tl.store(out_ptr, (tl.load(x_ptr) * n).dtype.primitive_bitwidth)  # int8 * n: a literal keeps int8


@triton.jit
def _loop_counter(out_ptr, n):  # a persistent kernel's row loop: the counter's width, and `.to` on it
    for i in tl.range(tl.program_id(0), n, tl.num_programs(0)):
        tl.store(out_ptr + i.to(tl.int64), i.dtype.primitive_bitwidth)


@triton.jit
def _static_counter(out_ptr, N: tl.constexpr):  # a static_range counter is a constexpr: `.to` is no method
    for i in tl.static_range(N):
        tl.store(out_ptr + i, i * 2)


@triton.jit
def _rmw(y_ptr, x_ptr, N: tl.constexpr):  # split-K partial sums added without an atomic
    offs = tl.arange(0, N)
    tl.store(y_ptr + offs, tl.load(y_ptr + offs) + tl.load(x_ptr + tl.program_id(0) * N + offs))


@triton.jit
def _dup(y_ptr, N: tl.constexpr):  # every program stores its own id into the same elements
    tl.store(y_ptr + tl.arange(0, N), tl.zeros((N,), tl.float32) + tl.program_id(0))


@triton.jit
def _chain(y_ptr, N: tl.constexpr):  # program p stores block p and reads block p + 1
    p = tl.program_id(0)
    offs = tl.arange(0, N)
    tl.store(y_ptr + p * N + offs, tl.load(y_ptr + (p + 1) * N + offs) + 1.0)


@triton.jit
def _same(y_ptr, N: tl.constexpr):  # redundant programs storing identical values: no race
    tl.store(y_ptr + tl.arange(0, N), tl.zeros((N,), tl.float32) + 3.0)


@triton.jit
def _last_block(y_ptr, count_ptr, x_ptr, out_ptr, N: tl.constexpr):
    # atomic split sums; the program that takes the last ticket reads them plainly: correct on a GPU
    offs = tl.arange(0, N)
    tl.atomic_add(y_ptr + offs, tl.load(x_ptr + tl.program_id(0) * N + offs))
    if tl.atomic_add(count_ptr, 1) == tl.num_programs(0) - 1:
        tl.store(out_ptr + offs, tl.load(y_ptr + offs) * 2.0)


@triton.jit
def _own_rows(y_ptr, x_ptr, N: tl.constexpr):  # each program reads and rewrites only its own row
    offs = tl.program_id(0) * N + tl.arange(0, N)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs) * 2.0)
    tl.store(y_ptr + offs, tl.load(y_ptr + offs) + 1.0)


@triton.jit
def _readback(y_ptr, x_ptr, N: tl.constexpr):  # stores a row, then reads it back reversed: another thread's element
    offs = tl.program_id(0) * N + tl.arange(0, N)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs) * 2.0)
    back = tl.program_id(0) * N + (N - 1 - tl.arange(0, N))
    tl.store(y_ptr + back, tl.load(y_ptr + back) + 1.0)


@triton.jit
def _readback_barrier(y_ptr, x_ptr, N: tl.constexpr):  # the same, with a barrier between: ordered
    offs = tl.program_id(0) * N + tl.arange(0, N)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs) * 2.0)
    tl.debug_barrier()
    back = tl.program_id(0) * N + (N - 1 - tl.arange(0, N))
    tl.store(y_ptr + back, tl.load(y_ptr + back) + 1.0)


@triton.jit
def _bf16_ops(x_ptr, y_ptr, z_ptr, out_ptr, sums_ptr, idx_ptr, N: tl.constexpr):  # bf16 in, bf16 arithmetic
    offs = tl.arange(0, N)
    x, y, z = tl.load(x_ptr + offs), tl.load(y_ptr + offs), tl.load(z_ptr + offs)
    tl.store(out_ptr + 0 * N + offs, x + y)
    tl.store(out_ptr + 1 * N + offs, x - y)
    tl.store(out_ptr + 2 * N + offs, x * y)
    tl.store(out_ptr + 3 * N + offs, -x)
    tl.store(out_ptr + 4 * N + offs, tl.maximum(x, y))
    tl.store(out_ptr + 5 * N + offs, tl.minimum(x, y))
    tl.store(out_ptr + 6 * N + offs, tl.where(x < y, x, z))
    tl.store(out_ptr + 7 * N + offs, tl.fma(x, y, z))
    tl.store(out_ptr + 8 * N + offs, tl.clamp(x, z - 1.0, z + 1.0) * 1)  # fp32 bounds: promoted to fp32
    tl.store(out_ptr + 9 * N + offs, tl.clamp(x, -tl.abs(y), tl.abs(y)))
    tl.store(out_ptr + 10 * N + offs, tl.cumsum(x, 0))
    tl.store(sums_ptr + 0, tl.sum(x, 0))
    tl.store(sums_ptr + 1, tl.max(x, 0))
    tl.store(sums_ptr + 2, tl.min(x, 0))
    tl.store(idx_ptr + 0, tl.argmax(x, 0))
    tl.store(idx_ptr + 1, tl.argmin(x, 0))


@triton.jit
def _libdevice(x_ptr, out_ptr, N: tl.constexpr):  # a vetted libdevice function per row of out
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + 0 * N + offs, libdevice.round(x))
    tl.store(out_ptr + 1 * N + offs, libdevice.rint(x))
    tl.store(out_ptr + 2 * N + offs, libdevice.rsqrt(tl.abs(x) + 1.0))
    tl.store(out_ptr + 3 * N + offs, libdevice.pow(x, 2.0))
    tl.store(out_ptr + 4 * N + offs, libdevice.tanh(x))
    tl.store(out_ptr + 5 * N + offs, libdevice.erf(x))


@triton.jit
def _libdevice_bf16(x_ptr, out_ptr, N: tl.constexpr):  # CUDA's libdevice has no bf16 overloads: a compile error
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, libdevice.tanh(tl.load(x_ptr + offs)))


@triton.jit
def _half_sum(x_ptr, out_ptr, N: tl.constexpr):  # tl.sum of fp16 values stays fp16: each partial sum rounded
    tl.store(out_ptr, tl.sum(tl.load(x_ptr + tl.arange(0, N)), axis=0))



@triton.jit
def _fp8_round_trip(x_ptr, e4_ptr, e5_ptr, N: tl.constexpr):  # fp32 -> sm_90's fp8 types -> fp32
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(e4_ptr + offs, x.to(tl.float8e4nv).to(tl.float32))
    tl.store(e5_ptr + offs, x.to(tl.float8e5).to(tl.float32))


@triton.jit
def _scalar_or_block_mask(x_ptr, y_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    first = tl.program_id(0) == 0  # a comparison of scalars, or-ed with a block's: the mask of a load and a store
    keep = first | (offs > 3)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=keep, other=-1.0), mask=keep | (offs == 0))


@triton.jit
def _exchange(a_ptr, v_ptr, old_ptr, N: tl.constexpr):  # atomic exchange of fp32 values
    offs = tl.arange(0, N)
    tl.store(old_ptr + offs, tl.atomic_xchg(a_ptr + offs, tl.load(v_ptr + offs)))


@triton.jit
def _int_division(x_ptr, d_ptr, q_ptr, r_ptr, N: tl.constexpr):  # some divisors 0
    offs = tl.arange(0, N)
    x, d = tl.load(x_ptr + offs), tl.load(d_ptr + offs)
    tl.store(q_ptr + offs, x // d)
    tl.store(r_ptr + offs, x % d)

LIBDEVICE_OUTPUTS = ("round", "rint", "rsqrt", "pow", "tanh", "erf")
BF16_OUTPUTS = ("add", "sub", "mul", "neg", "maximum", "minimum", "where_less", "fma", "clamp_fp32", "clamp",
                "cumsum")


def _attempt(fn):
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - the stock interpreter's failure is data for the test
        return {"error": race_in(e) or repr(e)[:500], "race": bool(race_in(e))}


DOTS = [("bf16", torch.bfloat16, "default", None), ("fp16", torch.float16, "default", None),
        ("int8", torch.int8, "default", None), ("fp16_acc16", torch.float16, "default", "fp16")] + [
    (f"fp32_{p}", torch.float32, p, None) for p in ("default", "tf32", "tf32x3", "ieee", "bf16x3", "bf16x6")]
INT_DSTS = [("int8", tl.int8), ("int16", tl.int16), ("int32", tl.int32), ("int64", tl.int64), ("uint8", tl.uint8),
            ("uint16", tl.uint16), ("uint32", tl.uint32), ("uint64", tl.uint64)]
SPECIALS = [float("nan"), float("inf"), -float("inf"), 3e9, -3e9, 1e19, -1e19, 2e19, 200.7, -200.7, 70000.5,
            -0.7, 0.7, 127.9, -128.9, 255.5, 32767.5, -32768.5, 2.0 ** 31, -(2.0 ** 31) - 1, 2.0 ** 63, 0.0,
            -0.0, 1e30, 65519.0, 65520.0, 3.0]


def make_inputs() -> dict:
    g = torch.Generator().manual_seed(16)
    inputs = {}
    for name, dtype, _, acc in DOTS:
        k = 64 if acc else 32
        if dtype == torch.int8:
            a, b = (torch.randint(-128, 128, s, generator=g, dtype=torch.int8) for s in ((16, k), (k, 16)))
        else:
            a, b = (torch.randn(s, generator=g).to(dtype) for s in ((16, k), (k, 16)))
        inputs[f"dot_{name}"] = (a, b, torch.randn(16, 16, generator=g).half() * 4 if acc else None)
    inputs["cast_f32"] = torch.tensor(SPECIALS, dtype=torch.float32)
    inputs["cast_f64"] = torch.tensor(SPECIALS, dtype=torch.float64)
    inputs["idiv_xd"] = torch.tensor([[7, 100, 0, 9, 7, 100, 30, 5], [0, 0, 0, 4, 3, 7, 0, 2]])
    inputs["to_bf16_i32"] = torch.tensor([3, -5, 1000, 2 ** 24 + 1, 2 ** 24 + 3, 65535, -2 ** 31, 2 ** 31 - 1],
                                         dtype=torch.int32)
    inputs["race_x"] = torch.randn(4, 8, generator=g)
    inputs["contract_xy"] = (torch.randn(64, generator=g) * 3, torch.randn(64, generator=g) * 3)
    xyz = torch.randn(3, 64, generator=g) * torch.tensor([[1.0], [3.0], [0.5]])
    xyz[:, :4] = torch.tensor([[1.5, 2, -3, 0.25], [2, 3, 0.5, 4], [-1, 1, -2, 2]])  # the issue's example first
    inputs["bf16_xyz"] = xyz.bfloat16()
    inputs["fp16_sum"] = torch.tensor([60000.0, 60000.0, -60000.0, -60000.0, 5.0, 0.5, 1e-3, 2048.0],
                                      dtype=torch.float16)
    inputs["libdevice_x"] = torch.tensor([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, -1.25, 3.0] * 2)
    return inputs


def _dots(inputs: dict) -> dict:
    out = {}
    for name, dtype, prec, acc in DOTS:
        a, b, c0 = inputs[f"dot_{name}"]
        c = torch.empty(16, 16, dtype=torch.int32 if dtype == torch.int8 else (torch.float16 if acc else torch.float32))
        out[name] = _attempt(lambda: (_dot[(1,)](a, b, c0 if acc else c, c, 16, 16, a.shape[1], prec, acc or ""), c)[1])
    return out


def _casts(inputs: dict) -> dict:
    out = {}
    for src in ("f32", "f64"):
        x = inputs[f"cast_{src}"]
        for name, dst in INT_DSTS:
            y = torch.empty(len(x), dtype=getattr(torch, name))
            out[f"{src}_{name}"] = _attempt(lambda: (_cast[(1,)](x, y, len(x), dst, False, BLOCK=32), y)[1])
    x32, x64, i32 = inputs["cast_f32"], inputs["cast_f64"], inputs["to_bf16_i32"]
    for key, x, dst, rtz in (("f32_f16", x32, tl.float16, False), ("f32_f16_rtz", x32, tl.float16, True),
                             ("f64_bf16", x64, tl.bfloat16, False), ("f64_bf16_rtz", x64, tl.bfloat16, True),
                             ("i32_bf16", i32, tl.bfloat16, False)):
        y = torch.empty(len(x), dtype=torch.float16 if dst == tl.float16 else torch.bfloat16)
        out[key] = _attempt(lambda: (_cast[(1,)](x, y, len(x), dst, rtz, BLOCK=32), y)[1])
    e4, e5 = torch.empty(32), torch.empty(32)
    padded = torch.cat([x32, torch.zeros(32 - len(x32))])
    ran = _attempt(lambda: _fp8_round_trip[(1,)](padded, e4, e5, N=32))
    out["fp8e4nv"], out["fp8e5"] = (ran, ran) if isinstance(ran, dict) else (e4[:len(x32)], e5[:len(x32)])
    a, v = torch.tensor([1.5, -2.0, float("nan"), 3.25]), torch.tensor([7.0, 8.5, -1.0, 0.0])
    old = torch.empty(4)
    ran = _attempt(lambda: _exchange[(1,)](a, v, old, N=4))
    out["xchg_f32"] = ran if isinstance(ran, dict) else (a, old)
    x, y = torch.arange(8, dtype=torch.float32), torch.zeros(8)
    ran = _attempt(lambda: _scalar_or_block_mask[(1,)](x, y, N=8))
    out["scalar_or_block"] = ran if isinstance(ran, dict) else y
    for dtype in (torch.int32, torch.uint32):
        x, d = (inputs["idiv_xd"][i].to(dtype) for i in (0, 1))
        q, r = torch.empty_like(x), torch.empty_like(x)
        ran = _attempt(lambda: _int_division[(1,)](x, d, q, r, N=8))
        out[f"idiv_{dtype}"] = ran if isinstance(ran, dict) else (q.long(), r.long())
    return out


def _scalars() -> dict:
    out = {}
    for value in (0.1, 1e300):
        held = torch.empty(1, dtype=torch.float64)
        out[f"held_{value}"] = _attempt(lambda: (_float_scalar[(1,)](held, value), held)[1])
    cast = torch.empty(1)
    out["cast"] = _attempt(lambda: (_float_scalar_cast[(1,)](cast, 0.1), cast)[1])
    for n in (1, 2):
        width = torch.empty(1, dtype=torch.int32)
        out[f"width_{n}"] = _attempt(lambda: (_int_scalar_width[(1,)](torch.ones(1, dtype=torch.int8), width, n),
                                              width)[1])
    counted = torch.zeros(5, dtype=torch.int32)
    out["counter"] = _attempt(lambda: (_loop_counter[(2,)](counted, 5), counted)[1])
    static = torch.zeros(4, dtype=torch.int32)
    out["static"] = _attempt(lambda: (_static_counter[(1,)](static, N=4), static)[1])
    return out


def _races(inputs: dict) -> dict:
    x = inputs["race_x"]
    kernels = {
        "rmw": lambda: _rmw[(4,)](torch.zeros(8), x, N=8),
        "dup": lambda: _dup[(4,)](torch.zeros(8), N=8),
        "same": lambda: _same[(4,)](torch.zeros(8), N=8),
        "own_rows": lambda: _own_rows[(4,)](torch.zeros(4, 8), x, N=8),
        "readback": lambda: _readback[(4,)](torch.zeros(4, 8), x, N=8),
        "readback_barrier": lambda: _readback_barrier[(4,)](torch.zeros(4, 8), x, N=8),
        "last_block": lambda: _last_block[(4,)](torch.zeros(8), torch.zeros(1, dtype=torch.int32), x,
                                               torch.zeros(8), N=8),
    }
    out = {name: _attempt(lambda: (run(), "ok")[1]) for name, run in kernels.items()}
    out["chain"] = [_attempt(lambda: (_chain[(3,)](torch.zeros(4, 8), N=8), "ok")[1]) for _ in range(8)]
    return out


def _bf16(inputs: dict) -> dict:
    x, y, z = inputs["bf16_xyz"]
    out = torch.empty(len(BF16_OUTPUTS), 64, dtype=torch.bfloat16)
    sums, idx = torch.empty(3, dtype=torch.bfloat16), torch.empty(2, dtype=torch.int32)
    ran = _attempt(lambda: _bf16_ops[(1,)](x, y, z, out, sums, idx, N=64))
    if isinstance(ran, dict):
        return ran
    return {**dict(zip(BF16_OUTPUTS, out)), "sum": sums[0], "max": sums[1], "min": sums[2], "argmax": idx[0],
            "argmin": idx[1]}


def _libdevices(inputs: dict) -> dict:
    x = inputs["libdevice_x"]
    out = torch.empty(len(LIBDEVICE_OUTPUTS), 16)
    ran = _attempt(lambda: _libdevice[(1,)](x, out, N=16))
    half = _attempt(lambda: _libdevice_bf16[(1,)](x.bfloat16(), torch.empty(16, dtype=torch.bfloat16), N=16))
    return {**(ran if isinstance(ran, dict) else dict(zip(LIBDEVICE_OUTPUTS, out))), "bf16": half}


def _half_sums(inputs: dict) -> dict:
    out = torch.empty(1, dtype=torch.float16)
    ran = _attempt(lambda: _half_sum[(1,)](inputs["fp16_sum"], out, N=8))
    return ran if isinstance(ran, dict) else {"sum": out[0]}


@triton.jit
def _residual(x_ptr, y_ptr, out_ptr, N: tl.constexpr):  # p = x * y rounded; x * y - p: 0 unless fused into an fma
    offs = tl.arange(0, N)
    x, y = tl.load(x_ptr + offs), tl.load(y_ptr + offs)
    p = x * y
    tl.store(out_ptr + offs, x * y - p)


def _contraction(inputs: dict) -> dict:
    """x * y - p for fp32 and bf16, on each of a case's draws, and in a launch with enable_fp_fusion=False."""
    from autotune.verify.interp import contract

    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        x, y = (v.to(dtype) for v in inputs["contract_xy"])
        for mode, fusing, options in (("fused", True, {}), ("unfused", False, {}),
                                      ("fusion_off", True, {"enable_fp_fusion": False})):
            contract._fusing[0] = fusing
            r = torch.empty(64, dtype=dtype)
            ran = _attempt(lambda: _residual[(1,)](x, y, r, N=64, **options))
            out[f"{mode}_{dtype}"] = ran if isinstance(ran, dict) else r.float()
    contract._fusing[0] = False
    return out


def run_all(inputs: dict) -> dict:
    return {"dot": _dots(inputs), "cast": _casts(inputs), "scalar": _scalars(), "race": _races(inputs),
            "bf16": _bf16(inputs), "libdevice": _libdevices(inputs), "fp16_sum": _half_sums(inputs),
            "contract": _contraction(inputs)}


if __name__ == "__main__":
    inputs = make_inputs()
    stock = run_all(inputs)
    install()
    install()  # idempotent: a second install changes nothing
    torch.save({"inputs": inputs, "stock": stock, "patched": run_all(inputs)}, sys.argv[1])
