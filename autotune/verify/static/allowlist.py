"""What a candidate file may name: the static policy's allow-list, as data, with the reason for each entry.

`autotune.verify.static.policy` walks a candidate's syntax tree and accepts a name, an attribute or a call only
if it is listed here for the place it appears in (a @triton.jit kernel or the plain-Python launcher) and
for the way it is used (called, used as a value, as a decorator, in an annotation, or only as the module
an attribute chain starts from). Everything not listed is a finding. The lists are exact names, never
prefixes: `tl.core.builtins.open` is refused because `triton.language.core` is not listed, not because
`open` is.

Two deliberate gaps, both closed elsewhere: a name that does not exist at all (a typo like `tl.lod`, an
undefined global) is left to Triton's compiler or to Python, which reject it with the error a
developer expects (compile_error); and the allow-list cannot see through operators (`x * w` on
tensors), which the worker's record of aten ops catches at run time (`policy.runtime_violations`).
"""

from __future__ import annotations

import dataclasses
import enum

from autotune.accel.queries import DeviceFacts

# What a launcher may read of the device's properties: the sizes (not the name, a model's marketing)
DEVICE_FACTS = tuple(f.name for f in dataclasses.fields(DeviceFacts) if f.name != "name")


class Use(enum.Enum):
    """How a listed name may be used."""

    CALL = "call"  # only called: binding it to a name (`f = torch.empty`) would hide the call from the scan
    VALUE = "value"  # any use: constants and dtypes
    MODULE = "module"  # only as the start of a listed attribute chain (`torch.empty`), never on its own
    DECORATOR = "decorator"  # only as a decorator of a top-level function
    ANNOTATION = "annotation"  # only in a parameter or return annotation


def _group(names: str, use: Use, reason: str) -> dict[str, tuple[Use, str]]:
    return {name: (use, reason) for name in names.split()}


# Modules a candidate may import (`import triton.language as tl`, `from triton import cdiv`, ...).
IMPORTS: dict[str, str] = {
    "torch": "allocating outputs and reading tensor metadata in the launcher",
    "triton": "@triton.jit and its launch helpers",
    "triton.language": "the language kernels are written in",
    "math": "integer helpers for block sizes in the launcher (ceil, log2)",
    "triton.language.extra.libdevice": "CUDA's libdevice math in kernels, only the functions in KERNEL_LIBDEVICE",
    "typing": "type annotations of the launcher (vLLM annotates its launch_metadata hooks), only those in NAMES",
    "collections.abc": "type annotations of the launcher, only those in NAMES",
}
# Not importable: `triton.language.extra.cuda` and the other backends' modules (a kernel names the portable
# stub module, which the compiler maps to the GPU's own), `triton.language.extra` beyond libdevice.
# `functools`, `__future__`, and typing beyond its annotation names: `from typing import sys` reached the worker's
# modules (issue 8); a name imported from a listed module must itself be in NAMES.
ALLOWED_IMPORTS = tuple(IMPORTS)

# Dotted names reachable from the imported modules, outside kernels and inside them.
NAMES: dict[str, tuple[Use, str]] = {
    **_group("torch triton triton.language math", Use.MODULE, "imported modules, reached only through listed names"),
    **_group("torch.empty torch.empty_like torch.empty_strided", Use.CALL,
             "allocate outputs; fresh memory reads as NaN in the worker, so an unwritten output shows"),
    **_group("torch.zeros torch.zeros_like", Use.CALL,
             "allocate accumulators a kernel adds into (split reductions with tl.atomic_add)"),
    **_group("torch.cuda", Use.MODULE, "reached only through torch.cuda.get_device_properties"),
    **_group("torch.cuda.get_device_properties", Use.CALL,
             "the SM count a persistent grid is sized by (vLLM's persistent matmul, Triton's tutorials): answered "
             "as the GPU judged for, on the interpreter too (autotune.accel.queries), so the path is the GPU's"),
    # Not listed: torch.ones/full/arange/tensor (values computed on the host), the rest of torch.cuda (the device
    # the file runs on: the same file must run the same path on the interpreter and on a GPU),
    # torch.ops/nn/testing/library/_C (math, or the checker's own tools).
    **_group("torch.float32 torch.float16 torch.bfloat16 torch.float64 torch.float torch.half torch.double "
             "torch.int8 torch.int16 torch.int32 torch.int64 torch.uint8 torch.bool torch.long torch.int",
             Use.VALUE, "dtypes, to allocate in a given dtype or to pick a block size by dtype"),
    **_group("torch.Tensor typing.Any typing.Optional typing.Union collections.abc.Callable", Use.ANNOTATION,
             "type annotations of the launcher"),
    **_group("typing collections collections.abc", Use.MODULE, "reached only through listed annotation names"),
    **_group("triton.jit", Use.DECORATOR, "marks a kernel"),
    **_group("triton.autotune triton.heuristics", Use.DECORATOR,
             "launch configurations chosen by shape; on CPU the configs take turns, so each is checked"),
    **_group("triton.Config", Use.CALL, "one @triton.autotune configuration"),
    **_group("triton.cdiv triton.next_power_of_2", Use.CALL, "grid and block sizes from tensor sizes"),
    # Not listed: triton.knobs, triton.runtime, triton.compiler, triton.testing (interpreter settings,
    # caches and benchmarks: the environment, not the kernel).
    **_group("triton.language.constexpr", Use.VALUE, "compile-time constants and constexpr annotations"),
    **_group("triton.language.tensor", Use.ANNOTATION, "kernel parameter annotations (vLLM writes `x_ptr: tl.tensor`)"),
    **_group("triton.language.float32 triton.language.float16 triton.language.bfloat16 triton.language.float64 "
             "triton.language.int1 triton.language.int8 triton.language.int16 triton.language.int32 "
             "triton.language.int64 triton.language.uint8 triton.language.uint16 triton.language.uint32 "
             "triton.language.uint64", Use.VALUE, "Triton dtypes, in kernels and as constexpr launch arguments"),
    **_group("math.ceil math.floor math.log2 math.prod math.isqrt math.gcd", Use.CALL,
             "integer arithmetic on sizes in the launcher"),
    **_group("math.inf math.pi", Use.VALUE, "constants"),
}

# Members of `triton.language` a kernel may use, beyond the values above. The modules of triton.language
# (core, extra, math, random, standard, target_info) are not members: `tl.core.builtins.open` reached
# Python's open. `tl.math` is the one exception, and only for the functions listed under KERNEL_MATH.
KERNEL_TL: dict[str, tuple[Use, str]] = {
    **_group("program_id num_programs arange range static_range", Use.CALL, "the program's place in the grid, loops"),
    **_group("load store make_block_ptr multiple_of max_contiguous max_constancy assume", Use.CALL,
             "memory access and its alignment hints"),
    **_group("atomic_add atomic_max atomic_min atomic_cas atomic_xchg atomic_and atomic_or atomic_xor", Use.CALL,
             "cross-program reductions (a split-K sum)"),
    **_group("zeros zeros_like full cast broadcast broadcast_to expand_dims reshape view ravel trans permute "
             "split join interleave cat flip where gather squeeze unsqueeze", Use.CALL,
             "tensor construction and shape"),
    **_group("abs exp exp2 log log2 sqrt sqrt_rn rsqrt sin cos erf floor ceil sigmoid softmax fma fdiv div_rn "
             "maximum minimum clamp umulhi cdiv", Use.CALL, "elementwise math"),
    **_group("sum max min argmax argmin reduce associative_scan cumsum cumprod xor_sum reduce_or sort topk "
             "histogram", Use.CALL, "reductions and scans"),
    **_group("dot dot_scaled", Use.CALL, "matrix products"),
    **_group("rand randn randint randint4x rand4x randn4x philox pair_uniform_to_normal uint_to_uniform_float",
             Use.CALL, "counter-based random numbers (seeded by the caller: the same on CPU and GPU)"),
    **_group("static_assert device_assert debug_barrier", Use.CALL, "compile-time and device checks, barriers"),
    **_group("PropagateNan TRITON_MAX_TENSOR_NUMEL", Use.VALUE, "language constants"),
    # annotations only: called, tl.dtype("fp8e4nv") makes any dtype by name, past the list of dtypes above (an
    # attacker's kernel cast to fp8 that way to tell the interpreter from a GPU)
    **_group("dtype pointer_type", Use.ANNOTATION, "types in kernel parameter annotations"),
    **_group("math", Use.MODULE, "tl.math.rsqrt and the other math functions listed in KERNEL_MATH"),
    # Not listed: inline_asm_elementwise (GPU assembly the interpreter cannot run: a different path on
    # CPU), make_tensor_descriptor/load_tensor_descriptor/store_tensor_descriptor (need a host allocator
    # set through triton.set_allocator), device_print/static_print (a kernel's output is its tensors).
}

# `tl.math.NAME`: the math functions (tl.math also holds `core`, a module, and typing helpers).
KERNEL_MATH: dict[str, tuple[Use, str]] = _group(
    "abs ceil cos div_rn erf exp exp2 fdiv floor fma log log2 rsqrt sin sqrt sqrt_rn umulhi", Use.CALL,
    "math functions (Liger-Kernel writes tl.math.rsqrt)")

# `libdevice.NAME` in kernels: functions `triton.language` lacks (round, tanh, pow) or that production kernels
# pin (Liger-Kernel's rsqrt). Each runs on the CPU interpreter as autotune.verify.interp.libdevice computes it
# (fp32/fp64 only, as CUDA's overloads; a test keeps the two lists equal); not listed: the integer and bit
# functions (clz, popc, byte_perm ...), the _rd/_ru/_rz rounding variants and the fast_* approximations but
# fast_expf/fast_logf, none of which an interpreter run was made to match.
KERNEL_LIBDEVICE: dict[str, tuple[Use, str]] = _group(
    "rsqrt sqrt cbrt exp exp2 exp10 expm1 fast_expf log log2 log10 log1p fast_logf tanh sinh cosh erf sin cos tan "
    "asin acos atan round rint nearbyint trunc floor ceil pow fmod div_rn atan2 hypot", Use.CALL,
    "libdevice math (vetted: fp32/fp64 as on the GPU, run by the interpreter)")
LIBDEVICE = "triton.language.extra.libdevice"

# Python builtins, outside kernels. Not listed, among others: open, exec, eval, compile, __import__,
# getattr/setattr/delattr/hasattr, globals/locals/vars/dir, type/isinstance/id (introspection: a kernel
# object's type tells the interpreter from a GPU), repr/str/format/print (repr of a kernel object tells
# the same), input/breakpoint/exit/help, iter/next, sum/any/all (host math over tensor values).
BUILTINS: dict[str, tuple[Use, str]] = {
    **_group("len range min max int float bool tuple list dict enumerate zip abs divmod round", Use.CALL,
             "arithmetic on sizes and building the grid and argument tuples"),
    **_group("ValueError TypeError RuntimeError AssertionError NotImplementedError", Use.CALL,
             "errors raised for shapes the launcher does not support"),
    **_group("None True False", Use.VALUE, "constants"),
}

# Inside kernels Triton's front end defines its own few builtins; these are the ones a kernel needs.
KERNEL_BUILTINS: dict[str, tuple[Use, str]] = {
    **_group("range len min max int float", Use.CALL, "loops, compile-time sizes, float('-inf') for a max's mask"),
    **_group("None True False", Use.VALUE, "constants"),
}

# Methods a launcher may call on the values it holds (tensors, sizes, its own dicts and tuples).
METHODS: dict[str, tuple[Use, str]] = {
    **_group("size stride numel dim element_size is_contiguous storage_offset data_ptr", Use.CALL,
             "tensor metadata (data_ptr: an address, which vLLM's launchers check for alignment)"),
    **_group("view view_as reshape reshape_as contiguous flatten unflatten squeeze unsqueeze transpose permute t "
             "expand expand_as narrow unbind split chunk select detach", Use.CALL,
             "views and layout: no values change (contiguous copies when needed)"),
    **_group("new_empty new_empty_strided new_zeros zero_", Use.CALL, "allocation in another tensor's dtype/device"),
    **_group("clone copy_", Use.CALL, "copies, e.g. writing a kernel's result into a caller's buffer"),
    **_group("to", Use.CALL, "moving to a device (`.to(x.device)`); a dtype conversion is refused separately"),
    **_group("get items keys values append copy pop update setdefault", Use.CALL,
             "the launcher's own dicts and lists (a launch config copied and trimmed, as FlagGems' and vLLM's are)"),
}

# Attributes a launcher may read on its values.
ATTRIBUTES: dict[str, tuple[Use, str]] = {
    **_group("shape dtype ndim T mT itemsize", Use.VALUE, "tensor and dtype metadata"),
    # only as an argument (`torch.empty(..., device=x.device)`): in a condition it would choose a path by
    # the machine the file runs on
    **_group("device", Use.VALUE, "the device to allocate on, passed along"),
    **_group(" ".join(DEVICE_FACTS), Use.VALUE,
             "torch.cuda.get_device_properties' answer (the SM count, shared memory): the GPU judged for, everywhere"),
}
# Read on its arguments by a `launch_metadata=` hook of @triton.jit (policy.py: a profiler's, never run by the checker)
HOOK_ATTRIBUTES: dict[str, tuple[Use, str]] = _group("name", Use.VALUE, "the kernel's name, for the profiler's label")
# The only methods such a hook may call (reads: it runs where the checker never looks)
HOOK_READS = frozenset("element_size numel size stride dim get items keys values".split())

# Attributes and methods of the values inside a kernel: Triton tensor members (triton 3.9's `tl.tensor`)
# and dtype fields. Not listed: `handle` (under the interpreter, the numpy array behind a tensor).
KERNEL_ATTRIBUTES: dict[str, tuple[Use, str]] = {
    **_group("to cast reshape view trans permute broadcast_to expand_dims ravel split advance abs exp exp2 log "
             "log2 sqrt sqrt_rn rsqrt sin cos erf floor ceil sigmoid softmax cdiv sum max min argmax argmin reduce "
             "associative_scan cumsum cumprod xor_sum reduce_or sort flip gather histogram logical_and logical_or "
             "atomic_add atomic_max atomic_min atomic_cas atomic_xchg atomic_and atomic_or atomic_xor store",
             Use.CALL, "Triton tensor methods (the tl functions, called on a tensor)"),
    **_group("T dtype shape numel element_ty primitive_bitwidth", Use.VALUE,
             "tensor and dtype fields (`y_ptr.dtype.element_ty`)"),
    # vLLM's attention kernels branch on `K.dtype.is_fp8()` for an fp8 cache. The fp8 dtypes themselves
    # (tl.float8e4nv ...) are not listed: casts to them are not computed here as a GPU does them
    **_group("is_fp8 is_fp16 is_bf16 is_fp32 is_fp64 is_floating is_int is_int_signed is_int_unsigned is_bool",
             Use.CALL, "dtype queries: compile-time facts about a tensor's type, no value computed"),
}

# Things the launcher may not do with a tensor even though the method exists: each has a better message.
CONVERSIONS = frozenset("float half bfloat16 double int long short bool type type_as".split())
