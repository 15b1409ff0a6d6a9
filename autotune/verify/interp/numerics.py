"""Arithmetic as an NVIDIA GPU does it where Triton 3.9's CPU interpreter does it otherwise: `tl.dot`, casts,
and the types of scalar launch arguments. Each `install_*` patches the interpreter once (a second call does
nothing); `autotune.verify.interp.install` installs them all. Tested against numpy/torch
computations of the GPU's rules in tests/verify/test_gpu_semantics.py.

`tl.dot` (InterpreterBuilder.create_dot; 3.9 calls np.matmul on the operands' storage arrays):
- bf16 operands are stored as uint16 bits and were multiplied as integers (errors of 1e8-1e11). Here every
  operand is decoded to its real value; bf16/fp16/fp8 products are exact in fp32 (8- or 11-bit significands)
  and sum in fp32, as on the tensor cores (each output summed alike wherever it sits in the tile: in fp64,
  rounded once); with an fp16 accumulator (`out_dtype=tl.float16`) each 16-deep
  slice of K is added to it and rounded to fp16, as an m16n8k16 MMA with f16 C/D does. int8 x int8 sums
  exactly in int32 (wrapping, as mma .s32 without .satfinite).
- fp32 operands at the declared `input_precision` (3.9 ignored it: always IEEE). Default "tf32" on NVIDIA
  (`NVIDIA CUDAOptions.default_dot_input_precision`, `tl.dot` when `TRITON_F32_DEFAULT` is unset). TF32: the
  MMA reads fp32 registers and ignores the 13 low mantissa bits, i.e. truncates (tl.dot's 3.9 docstring: "the
  float32 inputs may be truncated to TF32 format ... without rounding"; Triton rounds only in the tf32x3 split
  and in TensorDescriptor loads). "tf32x3" as the F32DotTC pass rewrites it: big = cvt.rna.tf32.f32(x)
  (round to nearest, ties away from zero), small = x - big, then small*big + big*small (NaN -> 0, so an Inf
  operand's NaN correction is dropped) + big*big, each a TF32 dot. "bf16x3"/"bf16x6" (allowed on NVIDIA,
  not by 3.9's interpreter) split each operand into 2 or 3 bf16 parts (RTNE) and sum the 3 or 6 leading
  products. "ieee": fp32 products and sums. `max_num_imprecise_acc` only concerns fp8 on sm_90, whose
  reduced-precision accumulation is not modelled (fp8 dtypes are not on the allow-list).

Casts (InterpreterBuilder.cast_impl; 3.9 used numpy's astype):
- float -> int as PTX `cvt.rzi` (the lowering of fptosi/fptoui): toward zero, saturated to the destination's
  range ("For float-to-integer conversions, the result is clamped to the destination range by default"), NaN
  -> 0 unless the source is f64 or the destination 64-bit, then 1 << (bits - 1) (PTX ISA, cvt, Integer
  Notes). numpy gave INT_MIN for NaN, Inf and overflow in 32/64 bits and wrapped in 8/16 bits.
- int -> bf16 and f64 -> bf16 were numpy casts to the uint16 storage (3 -> 2.8e-40); here correctly rounded
  (RTNE, one rounding: fp64 -> fp32 rounded to odd, then to bf16).
- `fp_downcast_rounding="rtz"` overflowed to NaN (fp32 1e30 -> fp16); here toward zero: 65504.
  fp32 -> fp16 beyond 65504 already gave Inf with round to nearest, as cvt.rn.f16.f32 does.

Integer division by zero (InterpreterBuilder.create_idiv/srem/urem; 3.9's numpy gave 0): the quotient all ones,
the remainder the dividend, as sm_90's code computes it (PTX: unspecified).

Scalar arguments (interpreter._implicit_cvt; 3.9 passed a Python float through as a Python float, so
`eps.to(tl.float16)` failed on the CPU only): typed as the JIT types them (`mangle_type`): float -> fp32
(so 1e300 is Inf, as on a GPU), bool -> i1, int -> i32 / i64 / u64 with data of that width. The JIT also
specialises an int argument equal to 1 into a constexpr (3.9: `specialize_impl` gives ('constexpr', 1)
unless the parameter is in `do_not_specialize`); the interpreter is handed such a 1 as a plain constant too,
so it promotes with other operands as a literal does on the GPU (int8 * 1 stays int8). Divisibility by 16
changes only alignment hints, not values: nothing to do. (Triton's front end compiles every launch with
these rules first, `autotune.verify.device.frontend`, so `n.to(...)` on an n of 1 is a compile error on both.)

Loop counters (the interpreter's `tl.range` is Python's `range`, so `row.to(tl.int64)` on the counter of a
persistent kernel's row loop failed on the CPU only): a `tl.range` counter is a scalar tensor, int32, or int64
when a bound is, as scf.for's induction variable is in a compiled kernel. `tl.static_range` keeps Python ints
(its counter is a constexpr there too).
"""

from __future__ import annotations

import dataclasses
import functools
import operator

import numpy as np
import torch
import triton
import triton.language as tl
from triton._C.libtriton import ir
from triton.runtime import interpreter

# bound here, not read through the module: the worker seals autotune.verify.interp.launch (sandbox.audit)
from autotune.verify.interp.launch import current_launch

_P = ir.INPUT_PRECISION
_F32_SPECIAL = np.uint32(0x7F800000)
_TF32_LOW = np.uint32(0x1FFF)  # the 13 mantissa bits an fp32 has and a TF32 lacks
MMA_K_F16_ACC = 16  # K of one m16n8k16 MMA: an fp16 accumulator is rounded once per slice this deep


def _fp32_to_bf16_rtne(data: np.ndarray) -> np.ndarray:
    """fp32 values -> bf16 bits (uint16), rounded to nearest even; NaN stays a (quiet) NaN."""
    bits = np.ascontiguousarray(data, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(data)
    return np.where(nan, ((bits >> 16) | 0x40).astype(np.uint16), rounded) if nan.any() else rounded


def round_bf16_like_gpu() -> None:
    """From now on, the interpreter's fp32 -> bf16 casts round to nearest even, as the GPU's do; bf16 -> fp32 takes
    the bits as an fp32's upper half (exact, as Triton's general conversion is, at a fraction of its cost)."""
    if getattr(interpreter, "_autotune_bf16_rtne", False):
        return
    convert = interpreter._convert_float

    def convert_float(data, input_dtype, output_dtype, rounding_mode):
        to_nearest = rounding_mode in (None, interpreter._ir.ROUNDING_MODE.RTNE)
        if input_dtype == tl.float32 and output_dtype == tl.bfloat16 and to_nearest:
            return _fp32_to_bf16_rtne(data)
        if input_dtype == tl.bfloat16 and output_dtype == tl.float32:
            return _bf16_values(np.asarray(data).view(np.uint16)).view(np.uint32)
        return convert(data, input_dtype, output_dtype, rounding_mode)

    interpreter._convert_float = convert_float
    interpreter._autotune_bf16_rtne = True


def _installed(owner, flag: str) -> bool:
    """True if `flag` is already set on owner; sets it otherwise (idempotent installs)."""
    if getattr(owner, flag, False):
        return True
    setattr(owner, flag, True)
    return False


# ---- tl.dot -------------------------------------------------------------------------------------------------

def _bf16_values(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _operand(h) -> np.ndarray:
    """A dot operand's values: bf16/fp8 decoded and fp16 widened to fp32 (exact), ints to int32."""
    ty = h.dtype
    if ty == tl.bfloat16:
        return _bf16_values(h.data)
    if ty.is_fp8():
        return interpreter._convert_float(h.data, ty, tl.float16, None).view(np.float16).astype(np.float32)
    if ty == tl.float16:
        return h.data.astype(np.float32)
    if ty.is_int():
        return h.data.astype(np.int32)
    return h.data


def tf32_truncated(x: np.ndarray) -> np.ndarray:
    """fp32 values as a TF32 MMA reads them: the 13 low mantissa bits dropped (Inf and NaN stay)."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return (bits & ~_TF32_LOW).view(np.float32)


def tf32_rna(x: np.ndarray) -> np.ndarray:
    """cvt.rna.tf32.f32: to 10 mantissa bits, to nearest, ties away from zero (Inf and NaN unchanged)."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x1000)) & ~_TF32_LOW
    return np.where((bits & _F32_SPECIAL) == _F32_SPECIAL, bits, rounded).view(np.float32)


def _bf16_rtne(x: np.ndarray) -> np.ndarray:
    return _bf16_values(_fp32_to_bf16_rtne(x))


def _split(x: np.ndarray, parts: int, head) -> list[np.ndarray]:
    """x as `parts` terms, each the rounding `head` of what the earlier ones leave (x = sum, nearly)."""
    terms, rest = [], x
    for _ in range(parts):
        terms.append(head(rest))
        rest = (rest - terms[-1]).astype(np.float32)
    return terms


def _compensated(a: np.ndarray, b: np.ndarray, parts: int, head, dot) -> np.ndarray:
    """The split products Triton keeps (leading-order terms first), NaN corrections dropped, then big x big."""
    sa, sb = _split(a, parts, head), _split(b, parts, head)
    pairs = [(i, j) for i in range(parts) for j in range(parts) if 0 < i + j < parts]
    small = sum((dot(sa[i], sb[j]) for i, j in sorted(pairs, key=sum, reverse=True)), np.float32(0))
    return dot(sa[0], sb[0]) + np.where(np.isnan(small), np.float32(0), small)


def _mma(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b with every element summed alike wherever its row and column sit in the tile, as an MMA does: float
    operands in fp64, rounded once to fp32 (numpy's fp32 matmul rounds a row by its place in the blocked loop, so
    two programs computing one output row from the same inputs differed in the last bit and their equal stores
    looked like a race); integers exactly."""
    if a.dtype.kind != "f":
        return np.matmul(a, b)
    return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)


def _fp32_product(a: np.ndarray, b: np.ndarray, precision) -> np.ndarray:
    """a @ b of fp32 operands at the declared input precision (before the accumulator is added)."""
    if precision == _P.IEEE:
        return _mma(a, b)
    tf32_dot = lambda x, y: _mma(tf32_truncated(x), tf32_truncated(y))
    if precision == _P.TF32:
        return tf32_dot(a, b)
    if precision == _P.TF32x3:
        return _compensated(a, b, 2, tf32_rna, tf32_dot)
    parts = {_P.BF16x3: 2, _P.BF16x6: 3}[precision]
    return _compensated(a, b, parts, _bf16_rtne, _mma)


def _into_fp16(acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """An fp16 accumulator: each K slice of one MMA summed in fp32, added, rounded to fp16."""
    for k0 in range(0, a.shape[-1], MMA_K_F16_ACC):
        part = _mma(a[..., k0:k0 + MMA_K_F16_ACC], b[..., k0:k0 + MMA_K_F16_ACC, :])
        acc = (acc.astype(np.float32) + part).astype(np.float16)
    return acc


def gpu_dot(a, b, d, input_precision) -> np.ndarray:
    """tl.dot(a, b, d) as the GPU computes it, in the accumulator's numpy dtype."""
    x, y, acc = _operand(a), _operand(b), d.data
    if acc.dtype == np.float16:
        return _into_fp16(acc, x, y)
    if a.dtype == tl.float32:
        product = _fp32_product(x, y, input_precision)
    else:
        product = _mma(x, y)
    return (product + acc).astype(acc.dtype)


def install_dot() -> None:
    """From now on tl.dot computes as the GPU's MMA does (see the module docstring)."""
    builder = interpreter.InterpreterBuilder
    if _installed(builder, "_autotune_gpu_dot"):
        return

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        with np.errstate(all="ignore"):  # Inf - Inf in a split is NaN on the GPU too, without a warning
            return interpreter.TensorHandle(gpu_dot(a, b, d, input_precision), d.dtype.scalar)

    builder.create_dot = create_dot
    options = interpreter.interpreter_builder.options  # NVIDIA's CUDAOptions also allow the bf16 splits
    interpreter.interpreter_builder.options = dataclasses.replace(
        options, allowed_dot_input_precisions=(*options.allowed_dot_input_precisions, "bf16x3", "bf16x6"))


# ---- casts --------------------------------------------------------------------------------------------------

def ptx_float_to_int(x: np.ndarray, src_is_f64: bool, dst: np.dtype) -> np.ndarray:
    """cvt.rzi.{s,u}N.fM: toward zero, saturated; NaN -> 0, or 1 << (N - 1) from f64 or into 64 bits."""
    info = np.iinfo(dst)
    wide = np.asarray(x, dtype=np.float64)
    t = np.trunc(wide)
    nan, high, low = np.isnan(t), t >= float(info.max) + 1, t < float(info.min)
    out = np.where(nan | high | low, 0, t).astype(dst)
    out[high], out[low] = info.max, info.min
    if src_is_f64 or info.bits == 64:
        out[nan] = np.array(1 << (info.bits - 1), dtype=np.uint64).astype(dst)  # MININT, or MAXINT >> 1 + 1
    return out


def _uint_of(dtype: np.dtype) -> type:
    return {2: np.uint16, 4: np.uint32, 8: np.uint64}[np.dtype(dtype).itemsize]


def toward_zero(x: np.ndarray, dst: type) -> np.ndarray:
    """x (fp32/fp64) rounded toward zero to fp16/fp32: to nearest, then one step back where that went outward
    (an overflow to Inf becomes the largest finite value, as cvt.rz does)."""
    with np.errstate(over="ignore"):
        y: np.ndarray = np.asarray(x).astype(dst)
    wide = np.asarray(x, dtype=np.float64)
    outward = np.isfinite(wide) & (np.abs(y.astype(np.float64)) > np.abs(wide))
    bits: np.ndarray = y.view(_uint_of(np.dtype(dst))).copy()
    bits[outward] -= 1  # sign-magnitude: one ulp less magnitude, for either sign
    return bits.view(dst)


def _bf16_bits_rtz(x: np.ndarray) -> np.ndarray:
    f32 = toward_zero(x, np.float32).view(np.uint32)
    nan = np.isnan(f32.view(np.float32))
    return np.where(nan, (f32 >> 16) | 0x40, f32 >> 16).astype(np.uint16)


def bf16_bits_rtne(x: np.ndarray) -> np.ndarray:
    """Any real values (float64, ints) -> bf16 bits, rounded to nearest even once: fp32 rounded to odd (toward
    zero, lowest bit set when inexact) keeps the information the second rounding needs."""
    wide = np.asarray(x, dtype=np.float64)
    f32 = toward_zero(wide, np.float32)
    inexact = np.isfinite(wide) & (f32.astype(np.float64) != wide)
    odd = (f32.view(np.uint32) | inexact.astype(np.uint32)).view(np.float32)
    return _fp32_to_bf16_rtne(odd)


def _float_source(h) -> np.ndarray:
    return _bf16_values(h.data) if h.dtype == tl.bfloat16 else h.data


# sm_90's fp8 types: (torch's dtype of the same encoding, the largest finite value)
_FP8 = {"fp8e4nv": ("float8_e4m3fn", 448.0), "fp8e5": ("float8_e5m2", 57344.0)}


def fp8_bits(values: np.ndarray, name: str) -> np.ndarray:
    """fp32 values in an fp8 type as sm_90's lowering of the cast encodes them (PTX cvt.rn.satfinite.e4m3x2.f32 /
    .e5m2x2.f32): rounded to nearest even, a magnitude past the largest finite value (Inf too) saturated to it,
    NaN kept. 3.9's interpreter gave 1000 -> 256 in e4m3 (an attacker's kernel told it from a GPU so)."""
    dtype, largest = _FP8[name]
    clipped = np.where(np.isnan(values), values, np.clip(values, -largest, largest)).astype(np.float32)
    return torch.from_numpy(clipped).to(getattr(torch, dtype)).view(torch.uint8).numpy()


def fp8_values(bits: np.ndarray, name: str) -> np.ndarray:
    """fp8 bits as their fp32 values (exact)."""
    return torch.from_numpy(np.ascontiguousarray(bits, dtype=np.uint8)).view(getattr(torch, _FP8[name][0])).float() \
        .numpy()


def install_casts() -> None:
    """From now on float -> int casts saturate as PTX's cvt.rzi does, int/f64 -> bf16 round correctly,
    fp_downcast_rounding="rtz" rounds toward zero without overflowing to NaN, and casts to and from sm_90's fp8
    types are PTX's (fp8_bits)."""
    builder = interpreter.InterpreterBuilder
    if _installed(builder, "_autotune_gpu_casts"):
        return
    cast_impl, fp_to_fp = builder.cast_impl, builder.create_fp_to_fp

    def cast(self, src, dst_type):
        s, d = src.dtype.scalar, dst_type.scalar
        if s.is_floating() and d.is_int() and not d.is_bool():
            dst = interpreter._get_np_dtype(d)
            return interpreter.TensorHandle(ptx_float_to_int(_float_source(src), s == tl.float64, dst), d)
        if d == tl.bfloat16 and s not in (tl.bfloat16, tl.float32):
            return interpreter.TensorHandle(bf16_bits_rtne(src.data), d)
        return cast_impl(self, src, dst_type)

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        s, d = src.dtype.scalar, dst_type.scalar
        wide = (tl.float32, tl.float16, tl.bfloat16)
        if d.name in _FP8 and s in wide and rounding_mode != ir.ROUNDING_MODE.RTZ:
            return interpreter.TensorHandle(fp8_bits(_float_source(src).astype(np.float32), d.name), d)
        if s.name in _FP8 and d in wide:
            values = fp8_values(src.data, s.name)  # exact in each of them
            return interpreter.TensorHandle(_fp32_to_bf16_rtne(values) if d == tl.bfloat16 else
                                            values.astype(interpreter._get_np_dtype(d)), d)
        if rounding_mode == ir.ROUNDING_MODE.RTZ and s in (tl.float32, tl.float64):
            if d == tl.bfloat16:
                return interpreter.TensorHandle(_bf16_bits_rtz(src.data), d)
            if d in (tl.float16, tl.float32):
                return interpreter.TensorHandle(toward_zero(src.data, interpreter._get_np_dtype(d).type), d)
        return fp_to_fp(self, src, dst_type, rounding_mode)

    builder.cast_impl, builder.create_fp_to_fp = cast, create_fp_to_fp


def install_boolean_comparisons() -> None:
    """From now on a comparison's result is typed i1, as on a GPU: 3.9's interpreter computes it as a numpy bool
    but types it as its operands (an int32 scalar's comparison stayed "int32"), so broadcasting it made int32 data,
    and a load or store masked by `(pid == 0) | (offs > 3)` raised "mask has unsupported dtype"."""
    builder = interpreter.InterpreterBuilder
    if _installed(builder, "_autotune_bool_compare"):
        return
    binary_op = builder.binary_op

    @functools.wraps(binary_op)
    def typed(self, lhs, rhs, op):
        out = binary_op(self, lhs, rhs, op)
        if out.data.dtype == np.bool_ and out.dtype != tl.int1:
            return interpreter.TensorHandle(out.data, tl.int1)
        return out

    builder.binary_op = typed


def install_integer_division() -> None:
    """From now on an integer divided by zero gives what sm_90's code gives: PTX leaves div.s32/div.u32 by zero
    unspecified, and its SASS sets the quotient to all ones when the divisor is 0 (the remainder, x - q * 0, is
    x). 3.9's numpy gave 0 for both, and an attacker's kernel branched on that to tell the interpreter from a GPU."""
    builder = interpreter.InterpreterBuilder
    if _installed(builder, "_autotune_gpu_idiv"):
        return

    def by_nonzero(op, when_zero):
        def divide(self, lhs, rhs):
            zero = rhs.data == 0
            if not np.any(zero):
                return op(self, lhs, rhs)
            out = op(self, lhs, interpreter.TensorHandle(np.where(zero, 1, rhs.data).astype(rhs.data.dtype), rhs.dtype))
            return interpreter.TensorHandle(
                np.where(zero, when_zero(lhs.data, out.data), out.data).astype(out.data.dtype), out.dtype)
        return divide

    def all_ones(_, quotient):
        return np.array(-1).astype(quotient.dtype)  # -1 signed, the largest value unsigned

    def dividend(x, _):
        return x

    for name, when_zero in (("create_idiv", all_ones), ("create_srem", dividend), ("create_urem", dividend)):
        setattr(builder, name, by_nonzero(getattr(builder, name), when_zero))


def install_float_exchange() -> None:
    """From now on tl.atomic_xchg on an fp32/fp64 tensor exchanges its bits, as on a GPU (atom.exch.b32/b64); 3.9's
    interpreter raised "Unsupported data type" for it (a false rejection of a correct kernel). Triton refuses it on
    fp16 and bf16 itself."""
    builder = interpreter.InterpreterBuilder
    if _installed(builder, "_autotune_gpu_xchg"):
        return
    rmw = builder.create_atomic_rmw
    bits = {np.dtype(np.float32): np.uint32, np.dtype(np.float64): np.uint64}

    def create_atomic_rmw(self, rmwOp, ptr, val, mask, sem, scope):
        as_bits = bits.get(val.data.dtype) if rmwOp == ir.ATOMIC_OP.XCHG else None
        if as_bits is None:
            return rmw(self, rmwOp, ptr, val, mask, sem, scope)
        old = rmw(self, rmwOp, ptr, interpreter.TensorHandle(val.data.view(as_bits), tl.uint64), mask, sem, scope)
        return interpreter.TensorHandle(old.data.view(val.data.dtype), val.dtype.scalar)

    builder.create_atomic_rmw = create_atomic_rmw


# ---- scalar arguments ---------------------------------------------------------------------------------------

_INT_DATA = {"i32": np.int32, "i64": np.int64, "u64": np.uint64}


def _scalar(value, ty_name: str, np_dtype) -> tl.tensor:
    ty = tl.str_to_ty(ty_name, None)
    with np.errstate(over="ignore"):  # a float beyond fp32's range is Inf on the GPU too
        data = np.array([value], dtype=np_dtype)
    return tl.tensor(interpreter.TensorHandle(data, ty), ty)


def _specialised_ones(names: list[str], args: tuple, kwargs: dict) -> list[str]:
    """The parameters the JIT would turn into the constexpr 1: int (not bool) arguments equal to 1."""
    launch = current_launch()
    skip = set((launch.fn.kwargs.get("do_not_specialize") or ()) if launch else ())
    bound = {**dict(zip(names, args)), **kwargs}
    return [n for i, n in enumerate(names) if type(bound.get(n)) is int and bound[n] == 1
            and n not in skip and i not in skip]


def install_scalar_arguments() -> None:
    """From now on scalar kernel arguments reach the kernel typed as the JIT types them (module docstring)."""
    if _installed(interpreter, "_autotune_gpu_scalars"):
        return
    convert = interpreter._implicit_cvt

    def implicit_cvt(arg):
        if type(arg) is float:
            return _scalar(arg, "fp32", np.float32)
        if type(arg) is int:
            name = triton.runtime.jit.mangle_type(arg)
            return _scalar(arg, name, _INT_DATA[name]) if name in _INT_DATA else convert(arg)
        return convert(arg)

    grid_call = interpreter.GridExecutor.__call__

    def call(self, *args, **kwargs):
        ones = _specialised_ones(self.arg_names, args, kwargs)
        if ones:  # this executor serves one launch
            self.constexprs = [*self.constexprs, *ones]
        return grid_call(self, *args, **kwargs)

    interpreter._implicit_cvt = implicit_cvt
    interpreter.GridExecutor.__call__ = call


# ---- loop counters ------------------------------------------------------------------------------------------

def _is_int64(bound) -> bool:
    if isinstance(bound, tl.tensor):
        return bound.dtype in (tl.int64, tl.uint64)
    return not -2**31 <= operator.index(bound) < 2**31


def tensor_range(arg1, arg2=None, step=None, **kwargs):
    """`tl.range` as a compiled kernel counts: each value a scalar tensor of the bounds' integer type."""
    start, end = (0, arg1) if arg2 is None else (arg1, arg2)
    step = 1 if step is None else step
    dtype, np_dtype = (tl.int64, np.int64) if any(map(_is_int64, (start, end, step))) else (tl.int32, np.int32)
    for i in range(operator.index(start), operator.index(end), operator.index(step)):
        yield tl.tensor(interpreter.TensorHandle(np.array([i], dtype=np_dtype), dtype), dtype)


def install_loop_counters() -> None:
    """From now on a `tl.range` loop counts in scalar tensors (module docstring)."""
    if _installed(interpreter, "_autotune_gpu_loops"):
        return
    patch_lang = interpreter._patch_lang

    def _patch_lang(fn):
        scope = patch_lang(fn)
        if hasattr(scope, "set_attr"):  # not a library function inside a launch (autotune.verify.interp.fastpatch)
            for lang in {id(v): v for v in fn.__globals__.values() if v is tl or v is tl.core}.values():
                scope.set_attr(lang, "range", tensor_range)
        return scope

    interpreter._patch_lang = _patch_lang
