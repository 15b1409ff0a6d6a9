"""Triton's compiler front end on the CPU: what a GPU would refuse to compile is refused here too.

The interpreter runs a kernel's Python directly, so it accepts what Triton's compiler rejects: a
module-level float used inside a kernel, a plain-Python helper called from one, a branch that only
type-checks for some inputs. So the worker (never the judge: this runs candidate code) imports the
candidate a second time with the interpreter off, which gives real `JITFunction`s, and compiles every
kernel launch to Triton IR (TTIR) for an sm_90 target before the interpreter runs it: the signature
and constexprs are taken from the launch's own arguments, exactly as `JITFunction.run` would on a GPU,
and each distinct specialization (kernel, argument types, constexpr values, options) is compiled once.
The front end runs (`ASTSource.make_ir`: Python AST to verified TTIR), then the TTIR and TTGIR passes and the
shared-memory allocation of the LLVM stage, as `triton.compile` runs them for sm_90: a launch whose kernel needs
more shared memory than the GPU gives a block (tiles too large for their pipeline stages) fails there with
OutOfResources, and is refused here with the figure. The stages after it need ptxas and a driver. Measured on this
machine: 0.2 s for the first kernel, 0.03 s for each later one, and 0.1-0.3 s for the passes to the allocation
(most of it the TTGIR stage). Those passes are C++ that releases the GIL, so they run on a thread of their own
beside the interpreter; a refusal there is the case's failure, whatever the interpreter made of it (on a GPU the
launch never runs): a launch that failed waits for its passes before its failure is told, a launch's and a case's
end tell the refusals made so far, and the run's end waits for all (device.process._settled).

    FrontEnd.write(source, workdir)          # before the audit hook forbids writes
    front = FrontEnd.load(workdir)           # after the interpreted import succeeded
    front.check("_rms_norm_kernel", args, kwargs)   # raises CompilationError
    ... the interpreter runs the launch ...
    front.settle()                           # raises CompilationError (shared memory)
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import importlib.util
import re
import sys
from collections.abc import Callable
from pathlib import Path

import triton
from triton._C.libtriton import ir, nvidia, passes
from triton.backends.compiler import GPUTarget
from triton.compiler.compiler import ASTSource, make_backend
from triton.language import core as tl_core
from triton.runtime import KernelInterface
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction, create_function_from_signature

from autotune.accel.queries import SM90

TARGET = GPUTarget("cuda", 10 * SM90.major + SM90.minor, SM90.warp_size)  # H100 / H200: sm_90
# the shared memory a block of an sm_90 GPU may have (cudaDevAttrMaxSharedMemoryPerBlockOptin, 227 KB: what Triton's
# launcher compares a kernel's `shared` with); and the PTX ISA the allocation is planned for (ptxas is not run here)
MAX_SHARED_BYTES = SM90.shared_memory_per_block_optin
PTX_VERSION = 87
# an fp32 x fp32 tt.dot below IEEE: `tt.dot %a, %b, %c, inputPrecision = tf32 : tensor<16x16xf32> * ...` (IEEE
# prints no inputPrecision); tl.dot's default on NVIDIA is tf32
_REDUCED_FP32_DOT = re.compile(r"tt\.dot [^:\n]*inputPrecision = (\w+) : tensor<[^>]*xf32> \* tensor<[^>]*xf32>")
# a tt.dot on half-precision operands (fp16, bf16, fp8): in an fp32 case, fp32 values cast down for the product
_HALF_DOT = re.compile(r"tt\.dot [^:\n]*: tensor<[^>]*x(?:f16|bf16|f8\w*)> \*")
HALF_OPERANDS = "half-precision operands"  # the token a specialization with such a dot reports
# fp32 values rounded to a half-precision type anywhere (a truncf, or a cast to fp8): rounded through fp16 and back
# to fp32 before a TF32 dot, an attacker's GEMM was as accurate as TF32 within fp16's range and Inf past it
_HALF_ROUNDING = re.compile(r"(?:arith\.truncf|tt\.fp_to_fp) [^\n]*: (?:tensor<[^>]*x)?f32>? to "
                            r"(?:tensor<[^>]*x)?(?:f16|bf16|f8\w*)\b")
HALF_ROUNDING = "fp32 values rounded to half precision"
MODULE_NAME = "candidate_for_the_compiler"


class CompilationError(Exception):
    """A kernel launch that Triton's compiler rejects (the worker reports it as compile_error)."""


class FrontEnd:
    """The candidate's kernels as the GPU compiler sees them, and the specializations compiled so far."""

    def __init__(self, kernels: dict[str, JITFunction]):
        self.kernels = kernels
        self.backend = make_backend(TARGET)
        self.binders: dict[str, Callable] = {}  # kernel -> its arguments' binder (specialization and options)
        self.compiled: dict[tuple, frozenset[str]] = {}  # specialization -> its reduced fp32 dot precisions
        # (kernel, argument types, constexprs, options) -> its shared memory: the alignment attributes of a
        # specialization change vector widths, not the tiles and stages that take shared memory
        self.shared: dict[tuple, concurrent.futures.Future[int]] = {}
        # tiles of the launches checked since `settle` -> (kernel, the case that launched them first)
        self.unsettled: dict[tuple, tuple[str, object]] = {}
        self.passes = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="autotune-shared-memory")

    @classmethod
    def write(cls, source: str, workdir: Path) -> None:
        """The second copy's file, written before the worker's audit hook forbids writes."""
        (workdir / f"{MODULE_NAME}.py").write_text(source)

    @classmethod
    def load(cls, workdir: Path) -> FrontEnd:
        """Import the candidate again with the interpreter off, so that @triton.jit makes JITFunctions."""
        path = workdir / f"{MODULE_NAME}.py"
        interpret = triton.knobs.runtime.interpret
        triton.knobs.runtime.interpret = False
        try:
            spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
            assert spec is not None and spec.loader is not None  # a .py file's location always has a loader
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        finally:
            triton.knobs.runtime.interpret = interpret
        return cls(_kernels(vars(module)))

    def check(self, name: str, args: tuple, kwargs: dict, case: object = None) -> frozenset[str]:
        """Compile the kernel `name` for these launch arguments, unless this specialization already was; the input
        precisions below IEEE at which it takes fp32 tl.dot operands (tf32 unless the kernel says otherwise), and
        HALF_OPERANDS if one of its dots takes fp16/bf16/fp8 operands, HALF_ROUNDING if it rounds fp32 values to
        one of those types anywhere (either withdraws an fp32 case's TF32 allowance). `case`: the case under way,
        named where a later `settle` refuses the launch."""
        try:
            return self._compile(name, args, kwargs, case)
        except CompilationError:
            raise
        except Exception as e:  # noqa: BLE001 - untrusted code's failure, of any kind, is reported, never raised here
            raise _rejected(name, e) from None

    def settle(self, wait: bool = True, case: object = None) -> None:
        """The shared-memory passes of the launches checked since the last call, waited for; CompilationError for
        one whose kernel needs more than an sm_90 block has, or that the passes reject. `wait=False`: only those
        already done, the rest kept for a later call (the interpreter runs on beside them: on a case of small
        launches the passes took longer than the launches, 130 ms each). `case`: the case under way (a launch
        first made by another is said to be)."""
        for tiles, (name, first) in list(self.unsettled.items()):
            if not wait and not self.shared[tiles].done():
                continue
            del self.unsettled[tiles]
            earlier = "" if first == case else " (launched first in an earlier case)"
            try:
                shared = self.shared[tiles].result()
            except Exception as e:  # noqa: BLE001 - as in check
                raise CompilationError(f"{_rejected(name, e)}{earlier}") from None
            if shared > MAX_SHARED_BYTES:
                raise CompilationError(
                    f"`{name}` needs {shared:,} bytes of shared memory with these constexprs, warps and stages, and "
                    f"an sm_{TARGET.arch} GPU gives a block at most {MAX_SHARED_BYTES:,} (227 KB): Triton's launcher "
                    f"refuses it (OutOfResources); use smaller tiles or fewer num_stages{earlier}")

    def _compile(self, name: str, args: tuple, kwargs: dict, case: object = None) -> frozenset[str]:
        fn = self.kernels.get(name)
        if fn is None:
            raise CompilationError(f"the launched kernel `{name}` is not a top-level @triton.jit function of the file")
        if name not in self.binders:  # Triton's own launch makes its binder once per kernel too
            self.binders[name] = create_function_from_signature(fn.signature, fn.params, self.backend)
        bound, specialization, options = self.binders[name](*args, **kwargs)
        options, signature, constexprs, attrs = fn._pack_args(self.backend, kwargs, bound, specialization, options)
        key = (name, repr(signature), repr(constexprs), repr(attrs), repr(sorted(options.__dict__.items())))
        tiles = (name, repr(signature), repr(constexprs), key[-1])
        if key not in self.compiled:
            source = ASTSource(fn, signature, constexprs, attrs)
            context = ir.context()
            ir.load_dialects(context)
            self.backend.load_dialects(context)
            codegen = self.backend.get_codegen_implementation(options)
            with _library_compiled():
                module = source.make_ir(TARGET, options, codegen, self.backend.get_module_map(), context)  # verified
            ir_text = str(module)
            if tiles not in self.shared:  # the module is the thread's from here (its own MLIR context)
                self.shared[tiles] = self.passes.submit(self._shared_bytes, module, context, options, source)
            self.compiled[key] = frozenset(_REDUCED_FP32_DOT.findall(ir_text)) | (
                {HALF_OPERANDS} if _HALF_DOT.search(ir_text) else set()) | (
                {HALF_ROUNDING} if _HALF_ROUNDING.search(ir_text) else set())
        self.unsettled.setdefault(tiles, (name, case))
        return self.compiled[key]

    def _shared_bytes(self, module, context, options, source: ASTSource) -> int:
        """The shared memory the kernel takes on sm_90: `triton.compile`'s TTIR and TTGIR stages, then the LLVM
        stage's passes up to its shared-memory allocation (the `ttg.shared` it records in the metadata). `context`
        (the module's) is held until they are done."""
        options = dataclasses.replace(options, ptx_version=options.ptx_version or PTX_VERSION)
        stages: dict = {}
        self.backend.add_stages(stages, options, source.language)
        metadata: dict = {}
        module = stages["ttgir"](stages["ttir"](module, metadata), metadata)
        manager = ir.pass_manager(module.context)
        passes.ttgpuir.add_combine_tensor_select_and_if(manager)
        passes.ttgpuir.add_allocate_warp_groups(manager, False)
        passes.convert.add_scf_to_cf(manager)
        passes.gluon.add_inliner(manager)
        nvidia.passes.ttgpuir.add_allocate_shared_memory_nv(manager, TARGET.arch, options.ptx_version)
        manager.run(module, "autotune_shared_memory")
        return int(module.get_int_attr("ttg.shared") or 0)


def _rejected(name: str, e: Exception) -> CompilationError:
    """What the compiler's own exception says, as the verdict shows it: Triton's message puts the source excerpt
    first and the reason last."""
    detail = str(e).strip() or type(e).__name__
    return CompilationError(f"{detail}\nTriton's compiler (front end, {TARGET.backend} sm_{TARGET.arch}) "
                            f"rejects `{name}`: {detail.splitlines()[-1].split('. ')[0]}")


def _kernels(namespace: dict) -> dict[str, JITFunction]:
    """Top-level JITFunctions by name, under any @triton.autotune / @triton.heuristics wrappers."""
    found = {}
    for value in namespace.values():
        while isinstance(value, KernelInterface) and not isinstance(value, JITFunction):
            value = getattr(value, "fn", None)
        if isinstance(value, JITFunction):
            found[value.fn.__name__] = value
    return found


def _library_owners() -> list[object]:
    """The modules of triton.language and the classes of triton.language.core: what the interpreter patches."""
    modules = [m for name, m in list(sys.modules.items()) if name.startswith("triton.language") and m is not None]
    classes = [v for v in vars(tl_core).values() if isinstance(v, type) and v.__module__ == tl_core.__name__]
    return [*modules, *classes]


# Taken when the worker imports this module, before the candidate is imported or any kernel interpreted:
# the interpreter patches triton.language's builtins while it runs a kernel and, for library functions
# called from a kernel (InterpretedFunction.__call__), never restores them.
_PRISTINE = {(owner, name): value for owner in _library_owners() for name, value in list(vars(owner).items())}
_compiled_forms: dict[tuple[int, str], object] = {}


@contextlib.contextmanager
def _library_compiled():
    """triton.language as the compiler needs it while compiling: unpatched builtins, and Triton's own library
    (tl.sum, tl.max, tl.softmax, ... written with @jit, so InterpretedFunctions under TRITON_INTERPRET=1)
    as JITFunctions of the same Python functions; the interpreter's state is put back afterwards."""
    if not _compiled_forms:
        _compiled_forms.update(_compiled_library())
    now = {key: vars(key[0]).get(key[1], _PRISTINE[key]) for key in _PRISTINE}
    wanted = {key: _compiled_forms.get((id(key[0]), key[1]), value) for key, value in _PRISTINE.items()}
    interpret = triton.knobs.runtime.interpret
    triton.knobs.runtime.interpret = False  # else @constexpr_function returns plain values (jit.py, "No constexpr")
    _assign(wanted, now)
    try:
        yield
    finally:
        triton.knobs.runtime.interpret = interpret
        _assign(now, wanted)


def _assign(values: dict, current: dict) -> None:
    for (owner, name), value in values.items():
        if current[(owner, name)] is not value:
            setattr(owner, name, value)


def _compiled_library() -> dict[tuple[int, str], object]:
    """(id(owner), attribute) -> the JITFunction to use while compiling, for every interpreted library function."""
    made: dict[int, JITFunction] = {}

    def jit_of(f: InterpretedFunction) -> JITFunction:
        if id(f) not in made:
            made[id(f)] = JITFunction(f.fn, **f.kwargs)
        return made[id(f)]

    forms = {}
    for (owner, name), value in _PRISTINE.items():
        if isinstance(value, InterpretedFunction):
            forms[(id(owner), name)] = jit_of(value)
        elif owner is tl_core.tensor:  # `x.sum(axis=0)`: @_tensor_member_fn wrapped the function in a closure
            cells = [c.cell_contents for c in getattr(value, "__closure__", None) or ()]
            target = next((c for c in cells if isinstance(c, InterpretedFunction)), None)
            if target is not None:
                forms[(id(owner), name)] = jit_of(target)
    return forms
