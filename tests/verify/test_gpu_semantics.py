"""Issue 16, classes 3 and 6: the CPU interpreter made to compute as a GPU does, behaviour by behaviour.

One fresh interpreter process (tests/verify/gpu_probe.py, ~10 s) runs each probe kernel on Triton 3.9's
stock interpreter and again after `autotune.verify.interp.install.install()`; here the GPU's answer is computed
independently (torch/numpy for the products, bit arithmetic for TF32, plain Python for PTX's cvt rules) and
each run is compared with it. Where the stock interpreter is still wrong, the test says so: if Triton fixes
a behaviour upstream, that assertion fails with a message naming the patch to retire.
"""

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import triton.language as tl
from torch.utils._python_dispatch import TorchDispatchMode

from autotune.verify.interp.memory import CUDA_BLOCK_ALIGNMENT, aligned_empty, allocate_like_cuda

PROBE = Path(__file__).parent / "gpu_probe.py"


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_probe") / "probe.pt"
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, str(PROBE), str(out)], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return torch.load(out, weights_only=False)


def _err(got, want: torch.Tensor) -> float:
    return float((got.double() - want.double()).abs().max())


def _exact_and_bound(probe, name: str):
    """The dot's operands, their product in fp64 and an fp32 summation bound for it."""
    a, b, _ = probe["inputs"][f"dot_{name}"]
    return a, b, a.double() @ b.double(), 1e-6 * float((a.double().abs() @ b.double().abs()).max())


# ---- tl.dot ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["bf16", "fp16"])
def test_half_precision_dot_multiplies_values_and_sums_in_fp32(probe, name):
    _, _, exact, bound = _exact_and_bound(probe, name)  # bf16/fp16 products are exact in fp32; sums round
    assert _err(probe["patched"]["dot"][name], exact) <= bound
    if name == "bf16":  # Triton 3.9 multiplies the uint16 storage: if this fails, drop gpu_numerics' bf16 decode
        assert _err(probe["stock"]["dot"][name], exact) > 1e6


def test_a_dot_row_sums_alike_wherever_it_sits_in_the_tile():
    """Two programs that compute one output row at different places of their tiles (vLLM's unified attention with a
    query group that does not divide 16 stores a row twice) must agree bitwise, as MMAs do: numpy's fp32 matmul
    rounded a row by its place in its blocked loop, and the equal stores looked like a race."""
    from autotune.verify.interp.numerics import _mma

    rng = np.random.default_rng(0)
    for rows, k, n in ((16, 64, 64), (7, 128, 32), (33, 96, 128)):
        a, b = rng.standard_normal((rows, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
        for shift in (1, 5, rows - 1):
            assert (np.roll(_mma(a, b), shift, axis=0) == _mma(np.roll(a, shift, axis=0), b)).all()
        exact = a.astype(np.float64) @ b.astype(np.float64)
        assert (_mma(a, b) == exact.astype(np.float32)).all()  # one rounding of the exact sum


def test_fp16_accumulator_rounds_once_per_mma_slice(probe):
    a, b, acc = probe["inputs"]["dot_fp16_acc16"]
    want = acc.clone()
    for k0 in range(0, a.shape[1], 16):  # m16n8k16 with f16 C/D: each 16-deep slice summed, added, rounded
        want = (want.float() + a[:, k0:k0 + 16].float() @ b[k0:k0 + 16].float()).half()
    got = probe["patched"]["dot"]["fp16_acc16"]
    assert got.dtype == torch.float16 and _err(got, want) <= 1e-3 * float(want.abs().max())
    assert _err(got, acc.double() + a.double() @ b.double()) > 0  # the fp16 rounding shows


def test_int8_dot_is_exact_in_int32(probe):
    a, b, _ = probe["inputs"]["dot_int8"]
    exact = a.long() @ b.long()
    for run in ("stock", "patched"):
        assert torch.equal(probe[run]["dot"]["int8"].long(), exact)


def _tf32_truncated(x: torch.Tensor) -> torch.Tensor:
    return (x.view(torch.int32) & ~0x1FFF).view(torch.float32)  # the 13 low mantissa bits an MMA ignores


def _tf32_rna(x: torch.Tensor) -> torch.Tensor:
    return ((x.view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)  # cvt.rna: ties away from zero


def test_fp32_dot_uses_tf32_unless_told_otherwise(probe):
    for name in ("fp32_default", "fp32_tf32"):
        a, b, exact, bound = _exact_and_bound(probe, name)
        tf32 = _tf32_truncated(a).double() @ _tf32_truncated(b).double()
        got = probe["patched"]["dot"][name]
        assert _err(got, tf32) <= bound and _err(got, exact) > 100 * bound  # TF32, visibly so
        # the stock interpreter multiplies in full fp32 whatever the precision: a TF32 kernel passed fp32 there
        assert _err(probe["stock"]["dot"][name], exact) <= bound, "Triton's interpreter models TF32 now"
    _, _, exact, bound = _exact_and_bound(probe, "fp32_ieee")
    assert _err(probe["patched"]["dot"]["fp32_ieee"], exact) <= bound


def test_fp32_dot_split_precisions_as_the_f32dottc_pass(probe):
    a, b, _, bound = _exact_and_bound(probe, "fp32_tf32x3")
    big_a, big_b = _tf32_rna(a), _tf32_rna(b)
    small_a, small_b = _tf32_truncated(a - big_a), _tf32_truncated(b - big_b)
    want = (big_a.double() @ big_b.double() + small_a.double() @ big_b.double() + big_a.double() @ small_b.double())
    assert _err(probe["patched"]["dot"]["fp32_tf32x3"], want) <= bound
    a, b, _, bound = _exact_and_bound(probe, "fp32_bf16x3")
    hi_a, hi_b = a.bfloat16().float(), b.bfloat16().float()
    lo_a, lo_b = (a - hi_a).bfloat16().float(), (b - hi_b).bfloat16().float()
    bf16x3 = hi_a.double() @ hi_b.double() + hi_a.double() @ lo_b.double() + lo_a.double() @ hi_b.double()
    assert _err(probe["patched"]["dot"]["fp32_bf16x3"], bf16x3) <= bound
    _, _, exact, bound = _exact_and_bound(probe, "fp32_bf16x6")
    assert _err(probe["patched"]["dot"]["fp32_bf16x6"], exact) <= bound  # 3 x 8 bits: fp32-like
    # NVIDIA allows bf16x3/bf16x6 (CUDAOptions.allowed_dot_input_precisions); 3.9's interpreter refused them
    assert "input_precision must be one of" in probe["stock"]["dot"]["fp32_bf16x3"]["error"]


# ---- casts -------------------------------------------------------------------------------------------------

def _ptx_cvt_rzi(v: float, bits: int, signed: bool, src_f64: bool) -> int:
    """PTX ISA, cvt (Integer Notes): toward zero, clamped to the destination range; NaN -> 0, or
    1 << (bits - 1) (MININT when signed) if the source is .f64 or the destination 64-bit."""
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    if math.isnan(v):
        if src_f64 or bits == 64:
            return lo if signed else 1 << (bits - 1)
        return 0
    if math.isinf(v):
        return hi if v > 0 else lo
    return min(max(math.trunc(v), lo), hi)


INT_DSTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


@pytest.mark.parametrize("src", ["f32", "f64"])
def test_float_to_int_saturates_as_ptx_cvt_rzi(probe, src):
    x = probe["inputs"][f"cast_{src}"]
    stock_wrong = 0
    for name in INT_DSTS:
        bits, signed = int(name.lstrip("uint")), not name.startswith("u")
        want = [_ptx_cvt_rzi(float(v), bits, signed, src == "f64") for v in x.tolist()]
        got = probe["patched"]["cast"][f"{src}_{name}"]
        as_int = [int(v) % (1 << bits) for v in got.tolist()]  # torch has no uint64: compare the bits
        assert as_int == [w % (1 << bits) for w in want], (name, list(zip(x.tolist(), got.tolist(), want)))
        stock = [int(v) % (1 << bits) for v in probe["stock"]["cast"][f"{src}_{name}"].tolist()]
        stock_wrong += stock != [w % (1 << bits) for w in want]
    assert stock_wrong == len(INT_DSTS), "some stock float->int casts now saturate: retire that part of install_casts"


BF16_MAX, F16_MAX = 3.3895313892515355e38, 65504.0


def _rounded(v: float, bits: int, tiny: float, largest: float, how) -> float:
    """v to `bits` significant bits by `how` (round: ties to even; math.trunc: toward zero), with the format's
    subnormal quantum below `tiny`; toward zero never passes `largest`, to nearest overflows to Inf."""
    if v == 0 or math.isnan(v) or math.isinf(v):
        return v
    a = abs(v)
    if a < tiny:
        r = how(a / (tiny * 2.0 ** (1 - bits))) * tiny * 2.0 ** (1 - bits)
    else:
        m, e = math.frexp(a)
        r = math.ldexp(how(m * 2 ** bits), e - bits)
    if r > largest:
        r = largest if how is math.trunc else math.inf
    return math.copysign(r, v)


def _same_floats(got: torch.Tensor, want: list[float]) -> bool:
    return all((math.isnan(g) and math.isnan(w)) or g == w for g, w in zip(got.tolist(), want))


def test_float_narrowing_overflows_and_rounds_as_cvt(probe):
    x32, x64 = probe["inputs"]["cast_f32"].tolist(), probe["inputs"]["cast_f64"].tolist()
    patched, stock = probe["patched"]["cast"], probe["stock"]["cast"]
    rn16 = [_rounded(v, 11, 2.0 ** -14, F16_MAX, round) for v in x32]
    assert _same_floats(patched["f32_f16"], rn16) and math.inf in rn16  # 70000.5 -> Inf, as cvt.rn.f16.f32
    assert _same_floats(stock["f32_f16"], rn16)  # the stock interpreter was right here already
    assert _same_floats(patched["f32_f16_rtz"], [_rounded(v, 11, 2.0 ** -14, F16_MAX, math.trunc) for v in x32])
    assert any(math.isnan(v) for v, w in zip(stock["f32_f16_rtz"].tolist(), x32) if not math.isnan(w)), \
        "the stock interpreter's rtz no longer overflows to NaN: retire that part of install_casts"
    assert _same_floats(patched["f64_bf16"], [_rounded(v, 8, 2.0 ** -126, BF16_MAX, round) for v in x64])
    assert _same_floats(patched["f64_bf16_rtz"], [_rounded(v, 8, 2.0 ** -126, BF16_MAX, math.trunc) for v in x64])
    ints = [float(v) for v in probe["inputs"]["to_bf16_i32"].tolist()]
    want = [_rounded(v, 8, 2.0 ** -126, BF16_MAX, round) for v in ints]
    assert _same_floats(patched["i32_bf16"], want)
    assert not _same_floats(stock["i32_bf16"], want)  # 3.9 cast the int to a bf16's uint16 storage: 3 -> 2.8e-40



def test_casts_to_fp8_round_and_saturate_as_sm90s_cvt_satfinite(probe):
    """A cast to fp8e4nv / fp8e5 is PTX cvt.rn.satfinite on sm_90: to nearest even, a magnitude past the largest
    finite value (Inf too) saturated to it, NaN kept. 3.9's interpreter gave 1000 -> 256 in e4m3, and an
    attacker's kernel branched on that to tell the interpreter from a GPU."""
    x32 = probe["inputs"]["cast_f32"].tolist()
    for name, bits, tiny, largest in (("fp8e4nv", 4, 2.0 ** -6, 448.0), ("fp8e5", 3, 2.0 ** -14, 57344.0)):
        want = [v if math.isnan(v) else math.copysign(min(abs(_rounded(v, bits, tiny, math.inf, round)), largest), v)
                for v in x32]
        assert _same_floats(probe["patched"]["cast"][name], want), name
    stock = probe["stock"]["cast"]["fp8e4nv"]
    assert isinstance(stock, dict) or not _same_floats(stock, [448.0 if v > 448 else v for v in x32]), \
        "the stock interpreter's fp8 casts are right now: retire that part of install_casts"


def test_an_integer_divided_by_zero_is_all_ones_and_leaves_the_remainder_the_dividend(probe):
    """PTX leaves division by zero unspecified; sm_90's SASS gives an all-ones quotient (x - q * 0 = x for the
    remainder). 3.9's numpy gave 0, which an attacker's kernel branched on."""
    x, d = probe["inputs"]["idiv_xd"].tolist()
    for dtype, ones in ((torch.int32, -1), (torch.uint32, 2 ** 32 - 1)):
        q, r = probe["patched"]["cast"][f"idiv_{dtype}"]
        assert q.tolist() == [ones if b == 0 else a // b for a, b in zip(x, d)], dtype
        assert r.tolist() == [a if b == 0 else a % b for a, b in zip(x, d)], dtype
    q, _ = probe["stock"]["cast"]["idiv_torch.int32"]
    assert q.tolist()[:3] == [0, 0, 0], "the stock interpreter divides by zero otherwise now: retire the patch"


def test_a_comparison_is_a_boolean_wherever_it_is_broadcast(probe):
    """A comparison's result is i1 on a GPU; 3.9's interpreter kept the operands' type on it, so a scalar comparison
    or-ed with a block's became int32 and a load or store masked by it raised "mask has unsupported dtype" (a correct
    kernel refused, as a round-16 variant was)."""
    assert probe["patched"]["cast"]["scalar_or_block"].tolist() == [0, 1, 2, 3, 4, 5, 6, 7]
    stock = probe["stock"]["cast"]["scalar_or_block"]
    assert isinstance(stock, dict) and "unsupported dtype" in str(stock), "the stock interpreter types comparisons as " \
        "i1 now: retire numerics.install_boolean_comparisons"


def test_an_atomic_exchange_of_floats_swaps_their_bits(probe):
    """tl.atomic_xchg on an fp32 tensor is atom.exch.b32 on a GPU; 3.9's interpreter raised "Unsupported data type"
    (an attacker's correct-on-its-terms split-K was refused for it)."""
    a, old = probe["patched"]["cast"]["xchg_f32"]
    assert a.tolist() == [7.0, 8.5, -1.0, 0.0] and _same_floats(old, [1.5, -2.0, math.nan, 3.25])
    assert isinstance(probe["stock"]["cast"]["xchg_f32"], dict), "the stock interpreter exchanges floats now: retire it"

# ---- scalar arguments --------------------------------------------------------------------------------------

def test_scalar_arguments_are_typed_as_the_jit_types_them(probe):
    patched, stock = probe["patched"]["scalar"], probe["stock"]["scalar"]
    assert float(patched["held_0.1"]) == float(torch.tensor(0.1, dtype=torch.float32))
    assert float(patched["held_1e+300"]) == math.inf  # fp32 on a GPU: 1e300 does not fit
    assert float(stock["held_1e+300"]) == 1e300, "the stock interpreter types float arguments as fp32 now"
    assert float(patched["cast"]) == float(torch.tensor(0.1).half())  # `s.to(tl.float16)` runs
    assert "object has no attribute" in stock["cast"]["error"]  # `.to` on a Python float: CPU-only error
    # the JIT specialises an int equal to 1 into a constexpr: int8 * n stays int8 there, int32 otherwise
    assert int(patched["width_1"]) == 8 and int(patched["width_2"]) == 32
    assert int(stock["width_1"]) == 32


def test_a_loop_counter_is_a_scalar_tensor_of_its_bounds_type(probe):
    patched, stock = probe["patched"]["scalar"], probe["stock"]["scalar"]
    assert patched["counter"].tolist() == [32] * 5  # every row of the grid-strided loop, by an int32 counter
    assert "has no attribute" in stock["counter"]["error"], "the stock interpreter counts in tensors now"
    assert patched["static"].tolist() == stock["static"].tolist() == [0, 2, 4, 6]
    from autotune.verify.interp.numerics import tensor_range

    wide = [(int(i.handle.data[0]), i.dtype) for i in tensor_range(2**31, 2**31 + 4, 3)]
    assert wide == [(2**31, tl.int64), (2**31 + 3, tl.int64)]


# ---- bf16 arithmetic ---------------------------------------------------------------------------------------

def _bf16_want(probe) -> dict:
    """The GPU's bf16 results, from torch: each operation on the values in fp32/fp64, rounded once to bf16."""
    x, y, z = (t.float() for t in probe["inputs"]["bf16_xyz"])
    pairs = x.clone()
    while len(pairs) > 1:  # tl.sum's tree: every partial sum rounded to bf16
        pairs = (pairs[0::2] + pairs[1::2]).bfloat16().float()
    cumsum = [x[0].bfloat16()]
    for v in x[1:]:
        cumsum.append((cumsum[-1].float() + v).bfloat16())
    xb = probe["inputs"]["bf16_xyz"][0]
    return {"add": x + y, "sub": x - y, "mul": x * y, "neg": -x, "maximum": torch.fmax(x, y),
            "minimum": torch.fmin(x, y), "where_less": torch.where(x < y, x, z),
            "fma": x.double() * y.double() + z.double(), "clamp_fp32": torch.clamp(x, z - 1, z + 1),
            "clamp": torch.minimum(torch.maximum(x, -y.abs()), y.abs()), "cumsum": torch.stack(cumsum),
            "sum": pairs[0], "max": x.max(), "min": x.min(), "argmax": xb.float().argmax(),
            "argmin": xb.float().argmin()}


def test_bf16_arithmetic_is_on_values_and_rounds_once(probe):
    want = _bf16_want(probe)
    got = probe["patched"]["bf16"]
    assert set(got) == set(want), got.get("error")
    for name, w in want.items():
        g = got[name]
        if name.startswith("arg"):
            assert int(g) == int(w), name
        else:  # bitwise: a GPU's rounding is not approximate
            assert torch.equal(g, w.bfloat16()), (name, g[:8], w.bfloat16()[:8] if w.dim() else w)
    exact = float(probe["inputs"]["bf16_xyz"][0].double().sum())
    assert abs(float(got["sum"]) - exact) <= 0.05 * max(1.0, abs(exact))  # the tree stays near the exact sum
    # Triton 3.9 computes on the uint16 patterns: if this fails, autotune.verify.interp.bf16 can be retired
    stock = probe["stock"]["bf16"]
    assert stock["mul"][:4].tolist() == [0, 0, -2, 2] and not torch.equal(stock["neg"], want["neg"].bfloat16())


def test_an_fp16_sum_rounds_every_partial_sum_to_fp16(probe):
    x = probe["inputs"]["fp16_sum"]
    tree = x.clone()
    while len(tree) > 1:  # torch adds fp16 tensors with one rounding to fp16 per add
        tree = tree[0::2] + tree[1::2]
    got = probe["patched"]["fp16_sum"]["sum"]
    assert torch.equal(got, tree[0]) or (got.isnan() and tree[0].isnan()), (got, tree[0])
    assert not torch.isfinite(tree[0])  # 60000 + 60000 overflows fp16 on a GPU
    assert torch.isfinite(probe["stock"]["fp16_sum"]["sum"])  # numpy summed in fp32: retire the patch if this fails


# ---- libdevice ---------------------------------------------------------------------------------------------

def test_vetted_libdevice_functions_run_on_the_interpreter_as_cuda_defines_them(probe):
    x = probe["inputs"]["libdevice_x"].double()
    got = probe["patched"]["libdevice"]
    assert "error" not in got, got
    # round: half away from zero (__nv_roundf); rint: half to even (__nv_rintf)
    assert got["round"][:8].tolist() == [1.0, 2.0, 3.0, -1.0, -3.0, 0.0, -1.0, 3.0]
    assert got["rint"][:8].tolist() == [0.0, 2.0, 2.0, -0.0, -2.0, 0.0, -1.0, 3.0]
    for name, want in (("rsqrt", 1 / (x.abs() + 1).sqrt()), ("pow", x ** 2), ("tanh", x.tanh()), ("erf", torch.erf(x))):
        assert _err(got[name], want) <= 2e-7 * max(1.0, float(want.abs().max())), name  # fp32, correctly rounded
    # no bf16 overload in CUDA's libdevice: refused on the CPU as the compiler refuses it
    assert "error" in got["bf16"] and "libdevice overloads of tanh" in got["bf16"]["error"]
    # the stock interpreter runs the stubs (`...`): None where a value should be
    assert "error" in probe["stock"]["libdevice"]


# ---- races -------------------------------------------------------------------------------------------------

def test_races_between_programs_are_found_and_named(probe):
    patched, stock = probe["patched"]["race"], probe["stock"]["race"]
    assert all(v == "ok" for k, v in stock.items() if k != "chain")  # the stock interpreter sees none
    rmw, dup = patched["rmw"], patched["dup"]
    assert rmw["race"] and "race in `_rmw`: program" in rmw["error"] and "`y_ptr[" in rmw["error"]
    assert "loads" in rmw["error"] or "stores to" in rmw["error"]
    assert dup["race"] and "stores to `y_ptr[" in dup["error"] and "which program" in dup["error"]
    # program p reads what program p + 1 stores: found on every drawn order (reads are tracked too)
    assert all(c["race"] and "_chain" in c["error"] for c in patched["chain"])
    # a program reading back, reversed, what it stored: another thread's element, unordered without a barrier (an
    # attacker's silu_and_mul of stop 40 passed so)
    back = patched["readback"]
    assert back["race"] and "which it stored itself earlier from another position of its block" in back["error"]


def test_what_is_not_a_race(probe):
    patched = probe["patched"]["race"]
    # identical stores, atomics, a last-ticket reader of atomic sums, a program rewriting its own row (each element
    # read back where it was stored), a reversed read back after tl.debug_barrier()
    kinds = ("same", "own_rows", "last_block", "readback_barrier")
    assert {k: patched[k] for k in kinds} == dict.fromkeys(kinds, "ok")


# ---- fp contraction ---------------------------------------------------------------------------------------

def test_a_multiply_feeding_a_subtract_is_one_fma_on_the_cases_that_draw_it(probe):
    """Triton's default enable_fp_fusion makes `x * y - p` one fma on sm_90 (fma.rn.f32, fma.rn.bf16x2): the exact
    rounding error of p = x * y, not 0. An attacker's silu_and_mul of stop 40 returned its gate wherever that
    residual was not 0 and passed, the interpreter rounding every product. Each case now draws fused or unfused."""
    got, x, y = probe["patched"]["contract"], *probe["inputs"]["contract_xy"]
    exact = x.double() * y.double()
    fp32_error = (exact - (x * y).double()).float()  # what fma(x, y, -rounded(x * y)) gives, exactly
    assert torch.equal(got["fused_torch.float32"], fp32_error) and fp32_error.abs().max() > 0
    xb, yb = x.bfloat16().double(), y.bfloat16().double()
    bf16_error = (xb * yb - (xb * yb).bfloat16().double()).bfloat16().float()
    assert torch.equal(got["fused_torch.bfloat16"], bf16_error) and bf16_error.abs().max() > 0
    for dtype in ("torch.float32", "torch.bfloat16"):  # unfused, or a launch compiled without fusion: 0
        assert not got[f"unfused_{dtype}"].any() and not got[f"fusion_off_{dtype}"].any(), dtype


# ---- allocation alignment ----------------------------------------------------------------------------------

def test_cpu_tensors_are_not_aligned_as_cuda_blocks_and_aligned_empty_is():
    # the stock allocator, in a process of its own (one that ran other tests may hold a heap where these line up)
    probe = ("import torch; print(sorted({torch.empty(1000 + 37 * i).data_ptr() % " f"{CUDA_BLOCK_ALIGNMENT}"
             " for i in range(32)}))")
    offsets = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert offsets.strip() != "[0]", "the CPU allocator aligns to 512 bytes now: gpu_memory may not be needed"
    for dtype in (torch.float32, torch.bfloat16, torch.int8, torch.int32):
        t = aligned_empty((3, 5), dtype)
        assert t.untyped_storage().data_ptr() % CUDA_BLOCK_ALIGNMENT == 0 and t.storage_offset() == 0
        fresh = float("nan") if dtype.is_floating_point else torch.iinfo(dtype).max
        assert torch.equal(t.isnan(), torch.ones_like(t, dtype=torch.bool)) if dtype.is_floating_point \
            else bool((t == fresh).all())
        t.view(-1)[2:4].copy_(torch.tensor([1, 2], dtype=dtype))  # writable through views
        assert t.view(-1)[3].item() == 2 and t.as_strided((2,), (2,), 2)[0].item() == 1
    assert aligned_empty((4, 3), torch.float32, stride=(1, 4)).stride() == (1, 4)


class _Aligned(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:  # as the worker's recorder: no torch._dynamo import (seconds)
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = allocate_like_cuda(func, args, kwargs or {})
        return func(*args, **(kwargs or {})) if out is None else out


def test_a_launchers_allocations_are_aligned_as_cuda_blocks():
    x = torch.randn(6, 10)
    with _Aligned():
        made = [torch.empty(3, 4, dtype=torch.float16), torch.empty_like(x), torch.empty_strided((2, 3), (1, 2)),
                x.new_empty((5,)), x.new_empty_strided((2, 2), (1, 2)), torch.zeros(7), torch.zeros_like(x),
                x.new_zeros(3, dtype=torch.int8), x.t().contiguous(), x.clone()]
        view = x[1:]  # a view allocates nothing: its address is x's plus the offset, on a GPU too
    assert all(t.data_ptr() % CUDA_BLOCK_ALIGNMENT == 0 for t in made)
    assert made[0].isnan().all() and (made[5] == 0).all() and (made[7] == 0).all()
    assert torch.equal(made[8], x.t().contiguous()) and torch.equal(made[9], x) and made[2].stride() == (1, 2)
    assert view.data_ptr() == x.data_ptr() + 10 * 4
